"""Merge the instructor's points for written answers into a gradebook.

Contract: grading writes ``manual.csv`` beside the gradebook (`manual_sheet_rows`: student,
lab, exercise, cell_id, max, points, answer; points empty while pending). The instructor
fills in points; `merge_manual_scores(gradebook_dir, scores_csv, secret)` verifies the
gradebook against its manifest, reads the sheet and returns the report with those points
(and how many it merged); ``grade --manual SCORES.csv --out GRADEBOOK_DIR`` then rewrites the
gradebook with a fresh manifest. `ManualScoreError` names the sheet's line and what to fix.

Design decisions:
- Verify first, as `merge` does: an edited gradebook must not come out with a valid seal.
  The one file allowed to differ is ``manual.csv`` itself when it is the sheet being merged
  (an instructor fills it in where grading wrote it): it is input, and it is rewritten.
- The sheet is matched on (student, lab, cell_id), with the exercise as a fallback key when
  cell_id is left out; a row for a cell that is not a written answer in this gradebook is
  an error, not ignored: a typo must not silently drop a student's points. An empty points
  cell leaves the answer pending, so the sheet can be merged more than once.
- Text that a spreadsheet would run as a formula was written with a leading ``'``; the
  sheet is read back with or without it (spreadsheets drop it when they save).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from .errors import GradingError
from .grade import GradeReport
from .manifest import verify_gradebook
from .manual import PENDING
from .merge import report_from_json

__all__ = ["SHEET_COLUMNS", "ManualScoreError", "manual_sheet_rows", "merge_manual_scores"]

SHEET_COLUMNS = ("student", "lab", "exercise", "cell_id", "max", "points", "answer")


class ManualScoreError(GradingError):
    """A scores sheet that cannot be merged (the message names the line and the fix)."""


def manual_sheet_rows(report: GradeReport) -> list[dict[str, Any]]:
    """One row per written answer in `report` (`SHEET_COLUMNS`); points empty while pending."""
    rows = []
    for result in report.results:
        for c in result.cells:
            if c.manual:
                rows.append(
                    {
                        "student": result.student,
                        "lab": result.lab,
                        "exercise": c.exercise,
                        "cell_id": c.cell_id,
                        "max": _number(c.max_points),
                        "points": "" if c.message.startswith(PENDING) else _number(c.points),
                        "answer": c.answer,
                    }
                )
    return rows


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 4)


def _unescape(value: str) -> str:
    return value[1:] if value.startswith("'") else value


def _read_sheet(path: Path) -> list[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            columns = set(reader.fieldnames or ())
            missing = {"student", "lab", "points"} - columns
            if missing or not {"cell_id", "exercise"} & columns:
                raise ManualScoreError(
                    f"{path}: needs the columns student, lab, cell_id (or exercise) and "
                    f"points, as in the manual.csv that grading wrote; found "
                    f"{sorted(columns) or 'none'}"
                )
            return [(n, row) for n, row in enumerate(reader, start=2)]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ManualScoreError(
            f"{path}: cannot read the scores sheet ({err}); give the "
            "manual.csv that grading wrote, with the points filled in"
        ) from None


def merge_manual_scores(
    gradebook_dir: Path | str, scores_csv: Path | str, secret: str
) -> tuple[GradeReport, int]:
    """The verified gradebook in `gradebook_dir` with the points of `scores_csv` merged in,
    and how many answers were scored (see the module docstring)."""
    folder, sheet = Path(gradebook_dir), Path(scores_csv)
    in_place = sheet.resolve() == (folder / "manual.csv").resolve()  # filled in where it lay
    check = verify_gradebook(folder, secret, frozenset({"manual.csv"}) if in_place else frozenset())
    if not check.ok:
        raise ManualScoreError(
            f"{folder}: not merged, it fails verification: " + "; ".join(check.problems)
        )
    report = report_from_json(json.loads((folder / "gradebook.json").read_text("utf-8")))
    index: dict[tuple[str, str, str], tuple[int, int]] = {}
    for r, result in enumerate(report.results):
        for c, cell in enumerate(result.cells):
            if cell.manual:
                index[(result.student, result.lab, cell.cell_id)] = (r, c)
                index.setdefault((result.student, result.lab, "exercise:" + cell.exercise), (r, c))
    scores: dict[tuple[int, int], float] = {}
    for line, row in _read_sheet(sheet):
        points_text = (row.get("points") or "").strip()
        if not points_text:
            continue  # still pending
        student, lab = row.get("student") or "", row.get("lab") or ""
        cell_id = (row.get("cell_id") or "").strip()
        exercise = (row.get("exercise") or "").strip()
        which = f"cell {cell_id}" if cell_id else f"exercise {exercise}"
        keys = [
            (name, lb, cell_id or "exercise:" + _unescape(exercise))  # as written, then
            for name, lb in ((student, lab), (_unescape(student), _unescape(lab)))
        ]
        found = next((index[k] for k in keys if k in index), None)  # without the ' escape
        if found is None:
            raise ManualScoreError(
                f"{sheet}:{line}: no written answer of student {student!r} in lab {lab!r} "
                f"({which}) in {folder}; copy student, lab and cell_id from manual.csv"
            )
        r, c = found
        cell = report.results[r].cells[c]
        try:
            points = float(points_text)
        except ValueError:
            points = math.nan
        if not 0 <= points <= cell.max_points:
            raise ManualScoreError(
                f"{sheet}:{line}: points {points_text!r} for {student}'s "
                f"{cell.exercise}: give a number from 0 to "
                f"{_number(cell.max_points)}"
            )
        scores[(r, c)] = points
    results = list(report.results)
    for (r, c), points in scores.items():
        cells = list(results[r].cells)
        cells[c] = replace(
            cells[c],
            points=points,
            passed=points == cells[c].max_points,
            message=f"graded by hand: {_number(points)} / {_number(cells[c].max_points)}",
        )
        results[r] = replace(results[r], cells=tuple(cells))
    return replace(report, results=tuple(results)), len(scores)
