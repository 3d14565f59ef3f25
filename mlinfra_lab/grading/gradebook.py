"""Write a `GradeReport` as a gradebook: CSV for spreadsheets, JSON with every detail, and
a sealed manifest.

Contract: `write_gradebook(report, out_dir, secret)` writes ``gradebook.csv`` (one row per
student, lab and exercise: student, lab, exercise, points, max, message, comment),
``gradebook.json`` (the same rows, the per-cell results, the problems, the warnings, the
source labs and the grading config) and ``manifest.json`` (see `manifest`) into `out_dir`,
each atomically, and returns the paths of the CSV and the JSON.

Design decisions:
- One CSV row per exercise, not per grader cell: an exercise is what the instructor
  announced points for; the JSON keeps the per-cell detail (cell ids, restore notes).
- Points are written as integers when they are whole, so a spreadsheet shows ``2`` not ``2.0``.
- A student and lab that were identified but not graded (a second file, a file name that
  disagrees with its folder, a budget) get one CSV row with empty points and the reason,
  so the spreadsheet shows the student rather than leaving a silent gap; inputs with no
  student or lab (not a notebook, a link) are only in the JSON's ``problems`` and were
  printed by the command.
- Notes about a whole submission (output cut, upgraded from nbformat 3, a disputed name)
  are added to the message of its first exercise row.
- CSV cells are escaped against formula injection (`formula.csv_safe`: OWASP's rule after
  stripping spaces, and after every separator a spreadsheet might split on), so a student
  folder named ``=1+1`` or ``x; =1+1`` stays text in a spreadsheet. The JSON keeps the
  values as they are.
- The JSON records the config and the date, so a grade can be traced to how it was made.
- These files are views: the record is ``gradebook.sqlite`` (see
  `gradebook_db`), sealed in the same manifest, and `views` rewrites every file from it
  after each change. The ``comment`` column holds the instructor's comments (``grade
  --manual`` with a comment column), joined per exercise.
- Written answers (see `manual`) also go to ``manual.csv``, one row per answer with its
  text and an empty points column: the sheet the instructor fills in and merges back with
  ``grade --manual``. It is sealed in the manifest like the other two files.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from pathlib import Path

from .formula import csv_safe
from .grade import GradeReport
from .manifest import write_files
from .manual_sheet import SHEET_COLUMNS, manual_sheet_rows
from .secret import SECRET_ENV, current_secret

__all__ = ["COLUMNS", "Comments", "csv_safe", "gradebook_rows", "write_gradebook"]

Comments = dict[tuple[str, str, str], str]  # (student, lab, cell id) -> instructor's comment

COLUMNS = ("student", "lab", "exercise", "points", "max", "message", "comment")


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 4)


def gradebook_rows(report: GradeReport, comments: Comments | None = None) -> list[dict]:
    """One dict per (student, lab, exercise), keys `COLUMNS`, in grading order, then one
    per identified student and lab that was not graded (empty points). `comments`: the
    instructor's, per (student, lab, cell id) (see `gradebook_db`), joined per exercise."""
    comments = comments or {}
    rows = []
    for result in report.results:
        said: dict[str, list[str]] = {}
        for c in result.cells:
            text = comments.get((result.student, result.lab, c.cell_id), "")
            if text:
                said.setdefault(c.exercise, []).append(text)
        for k, (exercise, (points, max_points, message)) in enumerate(result.exercises().items()):
            if k == 0 and result.notes:
                message = " | ".join(filter(None, (message, *result.notes)))
            rows.append(
                {
                    "student": result.student,
                    "lab": result.lab,
                    "exercise": exercise,
                    "points": _number(points),
                    "max": _number(max_points),
                    "message": message,
                    "comment": " | ".join(said.get(exercise, ())),
                }
            )
    graded = {(r.student, r.lab) for r in report.results}
    missing: dict[tuple[str, str], list[str]] = {}
    for problem in report.problems:
        key = (problem.student, problem.lab)
        if problem.student and problem.lab and key not in graded:
            missing.setdefault(key, []).append(f"not graded: {problem}")
    for (student, lab), messages in missing.items():
        rows.append(
            {
                "student": student,
                "lab": lab,
                "exercise": "",
                "points": "",
                "max": "",
                "message": " | ".join(messages),
                "comment": "",
            }
        )
    return rows


def _csv(columns: tuple[str, ...], rows: list[dict]) -> bytes:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows({k: csv_safe(v) for k, v in row.items()} for row in rows)
    return text.getvalue().encode("utf-8")


def write_gradebook(
    report: GradeReport,
    out_dir: Path | str,
    secret: str | None = None,
    *,
    comments: Comments | None = None,
    extra_files: dict[str, bytes] | None = None,
    extra_json: dict | None = None,
) -> tuple[Path, Path]:
    """Write ``gradebook.csv``, ``gradebook.json`` and ``manifest.json`` into `out_dir`,
    each atomically, the manifest sealed with `secret` (default: the secret the report was
    graded with); return the paths of the CSV and the JSON. `extra_files` (name -> bytes,
    the database) are written and sealed with them; `extra_json` is added to the JSON."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = gradebook_rows(report, comments)
    payload = {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "columns": list(COLUMNS),
        "rows": rows,
        **report.as_dict(),
        **(extra_json or {}),
    }
    if secret is None:
        secret = dict(report.config.env).get(SECRET_ENV) or current_secret()
    files = {
        "gradebook.csv": _csv(COLUMNS, rows),
        "gradebook.json": (json.dumps(payload, indent=2) + "\n").encode("utf-8"),
    }
    sheet = manual_sheet_rows(report, comments)
    if sheet:  # the written answers, for the instructor to score (``grade --manual``)
        files["manual.csv"] = _csv(SHEET_COLUMNS, sheet)
    write_files(out, {**files, **(extra_files or {})}, report, secret)
    return out / "gradebook.csv", out / "gradebook.json"
