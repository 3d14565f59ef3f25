"""Merge the gradebooks of chunks graded apart (one batch-scheduler job each) into one.

Contract: `merge_gradebooks(chunk_dirs, secret)` verifies every chunk against its manifest
(`manifest.verify_gradebook`, with the same secret), reads their ``gradebook.json`` and
returns one `GradeReport` holding every chunk's results, problems and warnings; then
``grade --merge`` stores it in the gradebook database of ``--out`` (`views`) and rewrites
its views with a fresh manifest. `MergeError` names the chunk
and the reason when a chunk fails verification, was graded against other source labs or
another secret, or grades a student's lab that another chunk also graded.

Design decisions:
- Verify before reading: a chunk edited after grading (or its manifest rewritten) must not
  reach the merged gradebook, which would then carry a valid seal over forged rows.
- The same source labs (by SHA-256) in every chunk, and the secret of the merge: rows
  graded against different hidden tests are not comparable, and a keyed chunk verifies
  only with its own secret.
- A (student, lab) graded in two chunks of one merge is an error, not "last one wins": the
  instructor split the submissions, and an overlap means the split was wrong. Merging into
  a gradebook that already holds a student is a regrade: the chunk's rows replace that
  student's, everyone else's rows and every manual entry are kept (a late chunk, or a
  student graded again on another machine).
- The merged config is the first chunk's (``jobs`` may differ between chunks; it changes
  nothing about the grades); each chunk's folder is kept in the merged warnings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import GradingError
from .execute import ExecutionConfig
from .grade import CellResult, GradeReport, GradeResult
from .manifest import verify_gradebook
from .secret import DEFAULT_SECRET
from .submissions import SubmissionProblem

__all__ = ["MergeError", "merge_gradebooks", "report_from_json"]

_CONFIG_FIELDS = set(ExecutionConfig.__dataclass_fields__)


class MergeError(GradingError):
    """The chunks cannot be merged (the message names the chunk and what to do)."""


def report_from_json(data: dict) -> GradeReport:
    """The `GradeReport` that ``gradebook.json`` (`GradeReport.as_dict`) was written from."""
    results = tuple(
        GradeResult(
            r["student"],
            r["lab"],
            r["submission"],
            tuple(CellResult(**c) for c in r["cells"]),
            r.get("sha256", ""),
            tuple(r.get("notes", ())),
        )
        for r in data["results"]
    )
    problems = tuple(SubmissionProblem(**p) for p in data["problems"])
    record = data.get("config", {})
    fields: dict[str, Any] = {  # JSON values, checked by ExecutionConfig
        k: (tuple(tuple(e) for e in v) if k == "env" else v)
        for k, v in record.items()
        if k in _CONFIG_FIELDS
    }
    config = ExecutionConfig(**fields)
    sources = tuple((s["lab"], s["path"], s["sha256"]) for s in data.get("sources", []))
    return GradeReport(
        results,
        problems,
        tuple(data.get("warnings", ())),
        config,
        sources,
        record.get("sandbox_used", ""),
        unenforced=tuple(record.get("budgets_not_enforced", ())),
    )


def merge_gradebooks(chunk_dirs: Sequence[Path | str], secret: str) -> GradeReport:
    """One report from the verified gradebooks in `chunk_dirs` (see the module docstring)."""
    if not chunk_dirs:
        raise MergeError("--merge needs at least one gradebook folder")
    reports: list[tuple[Path, GradeReport]] = []  # (gradebook folder, its report)
    seen: dict[tuple[str, str], Path] = {}  # (student, lab) -> the folder that graded it
    for chunk in map(Path, chunk_dirs):
        check = verify_gradebook(chunk, secret)
        if not check.ok:
            raise MergeError(
                f"{chunk}: not merged, it fails verification: " + "; ".join(check.problems)
            )
        data = json.loads((chunk / "gradebook.json").read_text(encoding="utf-8"))
        report = report_from_json(data)
        if check.keyed != (secret != DEFAULT_SECRET):
            raise MergeError(
                f"{chunk}: graded with {'a' if check.keyed else 'the public default'} "
                "secret, unlike this merge; merge with the secret every chunk "
                "was graded with"
            )
        if reports:
            first = reports[0][1]
            if {s[::2] for s in report.sources} != {s[::2] for s in first.sources}:
                raise MergeError(
                    f"{chunk}: graded against other source labs than "
                    f"{reports[0][0]} (their SHA-256 differ); grade every chunk "
                    "with the same --source"
                )
        for result in report.results:
            key = (result.student, result.lab)
            if key in seen:
                raise MergeError(
                    f"{chunk}: {result.student}'s lab {result.lab} was also "
                    f"graded in {seen[key]}; give each submission to one chunk"
                )
            seen[key] = chunk
        reports.append((chunk, report))
    first = reports[0][1]
    return GradeReport(
        results=tuple(r for _, rep in reports for r in rep.results),
        problems=tuple(p for _, rep in reports for p in rep.problems),
        warnings=tuple(f"{chunk}: {w}" for chunk, rep in reports for w in rep.warnings),
        config=first.config.with_secret(secret),
        sources=first.sources,
        sandbox=",".join(sorted({rep.sandbox for _, rep in reports if rep.sandbox})),
        unenforced=tuple(dict.fromkeys(u for _, rep in reports for u in rep.unenforced)),
    )
