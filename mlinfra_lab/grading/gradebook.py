"""Write a `GradeReport` as a gradebook: CSV for spreadsheets, JSON with every detail.

Contract: `write_gradebook(report, out_dir)` writes ``gradebook.csv`` (one row per student,
lab and exercise: student, lab, exercise, points, max, message) and ``gradebook.json`` (the
same rows, the per-cell results, the problems, the warnings and the grading config) into
`out_dir`, and returns both paths.

Design decisions:
- One CSV row per exercise, not per grader cell: an exercise is what the instructor
  announced points for; the JSON keeps the per-cell detail (cell ids, restore notes).
- Points are written as integers when they are whole, so a spreadsheet shows ``2`` not ``2.0``.
- Inputs that could not be graded are not CSV rows (they have no lab or exercise); they are
  in the JSON's ``problems`` and were printed by the command.
- The JSON records the config and the date, so a grade can be traced to how it was made.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path

from .grade import GradeReport

__all__ = ["COLUMNS", "gradebook_rows", "write_gradebook"]

COLUMNS = ("student", "lab", "exercise", "points", "max", "message")


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 4)


def gradebook_rows(report: GradeReport) -> list[dict]:
    """One dict per (student, lab, exercise), keys `COLUMNS`, in grading order."""
    rows = []
    for result in report.results:
        for exercise, (points, max_points, message) in result.exercises().items():
            rows.append({"student": result.student, "lab": result.lab, "exercise": exercise,
                         "points": _number(points), "max": _number(max_points),
                         "message": message})
    return rows


def write_gradebook(report: GradeReport, out_dir: Path | str) -> tuple[Path, Path]:
    """Write ``gradebook.csv`` and ``gradebook.json`` into `out_dir`; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = gradebook_rows(report)
    csv_path, json_path = out / "gradebook.csv", out / "gradebook.json"
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    payload = {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "columns": list(COLUMNS),
        "rows": rows,
        **report.as_dict(),
    }
    json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return csv_path, json_path
