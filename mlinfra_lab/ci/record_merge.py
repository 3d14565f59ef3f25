"""Merge GPU notebook records of one device into one: each notebook's newest run.

Contract: ``merge_records(records)`` takes records written by `notebook_record` (dicts, with
their file names) made on the same device with the same software (device name, torch, Triton,
CUDA, Python), and returns one record in the same format whose entry for each notebook is the
one from the newest record that ran it, tagged with that record's file and date; its ``date``
is the newest, ``all_passed`` holds for the merged entries, and ``merged_from`` names the
inputs. Records of different devices or versions raise `RecordMergeError`.
``python -m mlinfra_lab.ci.record_merge --out FILE A.json B.json ...`` writes it.

Design decisions:
- Why merge: a short device call re-runs only the notebooks changed since the last full
  record; the release check (`gpu_record_check`) reads one record, the newest, and compares
  each notebook's ``source_fingerprint`` with the source. A merged record keeps every entry's
  own fingerprint, file and date, so it claims no run that did not happen.
- Same device and versions only: a number measured on another GPU or torch is another
  experiment, not a newer run of the same one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = ["RecordMergeError", "main", "merge_records"]

SAME = ("device_name", "torch", "triton", "cuda", "python")  # what must match across inputs


class RecordMergeError(MlinfraError, ValueError):
    """The records cannot be merged (another device or versions, or none given)."""


def merge_records(records: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One record from `records`, (file name, record) pairs (see the module docstring)."""
    if not records:
        raise RecordMergeError("give at least one record to merge")
    first_name, first = records[0]
    for name, record in records[1:]:
        differ = [k for k in SAME if record["device"].get(k) != first["device"].get(k)]
        if differ:
            raise RecordMergeError(
                f"{name} and {first_name} differ in {differ}: merge only records of one "
                "device and one software stack"
            )
    newest: dict[str, dict[str, Any]] = {}
    for name, record in sorted(records, key=lambda r: r[1]["date"]):
        for entry in record["notebooks"]:
            newest[entry["notebook"]] = {**entry, "record": name, "date": record["date"]}
    entries = sorted(newest.values(), key=lambda e: e["notebook"])
    latest = max(r["date"] for _, r in records)
    return {
        "kind": "notebooks",
        "date": latest,
        "device": first["device"],
        "cell_timeout_s": max(r.get("cell_timeout_s", 0.0) for _, r in records),
        "command": "python -m mlinfra_lab.ci.record_merge (each notebook's newest run)",
        "merged_from": [name for name, _ in records],
        "all_passed": all(e["passed"] for e in entries),
        "notebooks": entries,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("records", nargs="+", type=Path, metavar="RECORD.json")
    parser.add_argument("--out", type=Path, required=True, help="the merged record's file")
    args = parser.parse_args(argv)
    try:
        merged = merge_records([(p.name, json.loads(p.read_text())) for p in args.records])
    except RecordMergeError as err:
        print(f"record-merge: {err}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(merged, indent=2) + "\n")
    n = len(merged["notebooks"])
    print(f"record-merge: {args.out}: {n} notebooks from {len(args.records)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
