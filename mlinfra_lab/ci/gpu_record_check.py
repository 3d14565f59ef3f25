"""Release-time check: the README shows the newest GPU notebook record, and says what it misses.

Contract: ``gpu_record_problems(root)`` reads the newest record under
``root/benchmarks/results/*-notebooks-*.json`` (by the date it states, whichever GPU made
it; written by ``make test-gpu``, `mlinfra_lab.ci.notebook_record`) and the README of the
checkout at `root`, and returns what is wrong, one sentence each, empty when nothing is:

- the record passed every notebook, names its device and date, and no cell ran past its
  per-cell budget (at most 60 s);
- it names no notebook that is gone;
- the README cites the record's file and carries its table row for every notebook;
- every notebook changed (its `source_fingerprint`) or added after the record is named in
  the README's not-run note (``Not run on a GPU as they are now: ...``), and that note is
  absent when every notebook is in the record as it is.

``python -m mlinfra_lab.ci.gpu_record_check [ROOT]`` prints them and exits 1 when there are
any; ``make release-check`` runs it, and the release workflow runs that.

Decisions:
- A release check, not a unit test: the README and the record are documents about a GPU
  run, and a notebook edit or a README edit on a machine without a GPU cannot fix them. A
  test on every change failed on unrelated edits; a release must not cite a stale run.
- Problems are returned, not raised one at a time, so one run lists every fix.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mlinfra_lab.ci.notebook_record import source_fingerprint

__all__ = ["NOT_RUN_MARKER", "gpu_record_problems", "main", "newest_record"]

NOT_RUN_MARKER = "Not run on a GPU as they are now"
_BUDGET_S = 60  # the most a notebook cell may take on a GPU (make test-gpu's --cell-timeout)


def newest_record(root: Path) -> Path | None:
    """The GPU notebook record with the latest ``date`` under `root`/benchmarks/results; of
    records of one date, the one with the most notebooks (a merge, `record_merge`, carries
    its newest input's date)."""
    records = (root / "benchmarks" / "results").glob("*-notebooks-*.json")
    dated = []
    for path in records:
        record = json.loads(path.read_text())
        dated.append((record["date"], len(record["notebooks"]), path))
    return max(dated)[2] if dated else None


def _row(entry: dict[str, Any]) -> str:
    return (
        f"| `{entry['notebook']}` | {entry['cells']} | passed | {entry['seconds']:.0f} | "
        f"{entry['slowest_cell_seconds']:.0f} |"
    )


def gpu_record_problems(root: Path) -> list[str]:
    """What is wrong with the README's account of the newest GPU notebook record at `root`."""
    path = newest_record(root)
    if path is None:
        return ["no GPU notebook record: run `make test-gpu` on a GPU and commit it"]
    record = json.loads(path.read_text())
    problems = []
    if not (record.get("all_passed") and record["device"].get("device_name") and record["date"]):
        problems.append(f"{path.name}: not every notebook passed, or no device name or date")
    budget = record.get("cell_timeout_s", _BUDGET_S + 1)
    slow = [e["notebook"] for e in record["notebooks"] if e["slowest_cell_seconds"] > budget]
    if budget > _BUDGET_S or slow:
        problems.append(f"{path.name}: a cell budget above {_BUDGET_S} s or cells past it: {slow}")
    ran = {e["notebook"]: e for e in record["notebooks"]}
    expected = {
        p.relative_to(root).as_posix()
        for p in [*root.glob("book/*.ipynb"), *root.glob("labs/*.ipynb")]
    }
    if set(ran) - expected:
        problems.append(f"{path.name} names notebooks that are gone: {sorted(set(ran) - expected)}")
    stale = sorted(
        nb
        for nb in expected
        if nb not in ran or ran[nb].get("source_fingerprint") != source_fingerprint(root / nb)
    )
    readme = (root / "README.md").read_text()
    if stale and NOT_RUN_MARKER not in readme:
        problems.append(f"README cites the GPU record for notebooks changed since: {stale}")
    elif stale:
        note = readme[readme.index(NOT_RUN_MARKER) :].split("\n\n")[0]
        missing = [nb for nb in stale if f"`{nb}`" not in note]
        if missing:
            problems.append(f"README's not-run note ({NOT_RUN_MARKER!r}) leaves out {missing}")
    elif NOT_RUN_MARKER in readme:
        problems.append("every notebook is in the GPU record as it is: drop README's not-run note")
    if path.name not in readme:
        problems.append(f"README does not cite the newest GPU record, {path.name}")
    problems += [
        f"README's GPU table lacks the record's row {_row(e)}"
        for e in record["notebooks"]
        if _row(e) not in readme
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", nargs="?", type=Path, default=Path.cwd(), help="the checkout")
    args = parser.parse_args(argv)
    problems = gpu_record_problems(args.root)
    for problem in problems:
        print(f"gpu-record: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"gpu-record: the README shows {newest_record(args.root)} and what it misses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
