"""Merge the instructor's points and comments into a gradebook.

Contract: grading writes ``manual.csv`` beside the gradebook (`manual_sheet.manual_sheet_rows`:
student, lab, exercise, cell_id, max, points, comment, answer; points empty while pending). The
instructor fills in points (and comments); `sheet_entries(report, sheet)` checks every row
against the gradebook and returns the entries to store; `merge_manual_scores(gradebook_dir,
scores_csv, secret)` verifies the gradebook against its manifest, appends those entries to
its database (who, when, which sheet) and rewrites every view with a fresh manifest,
returning the report and how many entries it stored (``grade --manual SCORES.csv --out
GRADEBOOK_DIR``). `ManualScoreError` names the sheet's line and what to fix.

Design decisions:
- Verify first, as `merge` does: an edited gradebook must not come out with a valid seal.
  The one file allowed to differ is ``manual.csv`` itself when it is the sheet being merged
  (an instructor fills it in where grading wrote it): it is input, and it is rewritten.
- The sheet is matched on (student, lab, cell_id), with the exercise as a fallback key when
  cell_id is left out; a row for a cell that is not a written answer in this gradebook is
  an error, not ignored: a typo must not silently drop a student's points. An empty points
  cell leaves the answer pending, so the sheet can be merged more than once.
- Points are for written answers only; a comment may be left on any graded cell of the
  student's lab (a row naming an auto-graded cell_id with a comment and no points). Both
  are entries in the database, apart from the machine's scores: a regrade never loses one.
  A comment cell left empty keeps the previous comment.
- A row carries the digest of the answer it showed (``answer_sha256``); a row whose answer
  was replaced since (a resubmission graded after the sheet was written) is refused, so a
  mark is never credited to a text it was not given for. A sheet without that column (typed
  by hand) is bound to the answer the gradebook holds when it is merged.
- Only what changed is stored: the sheet grading writes carries the points and comments
  already merged, so a sheet written back and merged again would otherwise store every
  mark anew under the new ``--by``, and the history would credit it to the wrong grader.
  A value equal to the gradebook's current one is left out.
- Text that a spreadsheet would run as a formula was written with ``'`` where a cell could
  begin (`formula.csv_safe`); the sheet is read back with or without it (spreadsheets drop
  it when they save).
"""

from __future__ import annotations

import csv
import getpass
import math
from pathlib import Path

from .errors import GradingError
from .formula import csv_unescape
from .grade import GradeReport
from .gradebook_db import ManualEntry
from .manual import answer_digest
from .views import BookSession

__all__ = [
    "ManualScoreError",
    "merge_manual_scores",
    "sheet_entries",
]

Entry = tuple[str, str, str, float | None, str | None]  # student, lab, cell id, points, comment


class ManualScoreError(GradingError):
    """A scores sheet that cannot be merged (the message names the line and the fix)."""


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 4)


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


def sheet_entries(report: GradeReport, sheet: Path) -> list[Entry]:
    """The entries of the filled-in `sheet` for the gradebook `report` (see the module
    docstring); `ManualScoreError` names the first row that matches nothing or gives
    points out of range."""
    index: dict[tuple[str, str, str], tuple[int, int]] = {}
    for r, graded in enumerate(report.results):
        for c, graded_cell in enumerate(graded.cells):
            index[(graded.student, graded.lab, graded_cell.cell_id)] = (r, c)
            if graded_cell.manual:
                key = (graded.student, graded.lab, "exercise:" + graded_cell.exercise)
                index.setdefault(key, (r, c))
    entries: list[Entry] = []
    for line, row in _read_sheet(sheet):
        points_text = (row.get("points") or "").strip()
        comment = csv_unescape((row.get("comment") or "").strip()) or None
        if not points_text and not comment:
            continue  # still pending
        student, lab = row.get("student") or "", row.get("lab") or ""
        cell_id = (row.get("cell_id") or "").strip()
        exercise = (row.get("exercise") or "").strip()
        which = f"cell {cell_id}" if cell_id else f"exercise {exercise}"
        keys = [
            (name, lb, cell_id or "exercise:" + csv_unescape(exercise))  # as written, then
            for name, lb in ((student, lab), (csv_unescape(student), csv_unescape(lab)))
        ]
        found = next((index[k] for k in keys if k in index), None)  # without the ' escape
        result = report.results[found[0]] if found else None
        cell = result.cells[found[1]] if result and found else None
        if result is None or cell is None or (points_text and not cell.manual):
            raise ManualScoreError(
                f"{sheet}:{line}: no written answer of student {student!r} in lab {lab!r} "
                f"({which}) in this gradebook; copy student, lab and cell_id from manual.csv "
                "(a cell graded by its tests takes a comment, not points)"
            )
        marked = (row.get("answer_sha256") or "").strip()
        if marked and cell.manual and marked != answer_digest(cell.answer):
            raise ManualScoreError(
                f"{sheet}:{line}: the answer of student {student!r} in lab {lab!r} ({which}) "
                "is not the text this sheet showed (a resubmission was graded since); take "
                "the new manual.csv and score the new answer there"
            )
        points = None
        if points_text:
            try:
                points = float(points_text)
            except ValueError:
                points = math.nan
            if not 0 <= points <= cell.max_points:
                raise ManualScoreError(
                    f"{sheet}:{line}: points {points_text!r} for {student}'s "
                    f"{cell.exercise}: give a number from 0 to {_number(cell.max_points)}"
                )
        entries.append((result.student, result.lab, cell.cell_id, points, comment))
    return entries


def _changes(entries: list[Entry], current: dict[tuple[str, str, str], ManualEntry]) -> list[Entry]:  # fmt: skip
    """`entries` less what the gradebook already holds: a points or comment value equal to
    the current one becomes None, so a sheet merged again credits nobody anew."""
    changed: list[Entry] = []
    for student, lab, cell_id, points, comment in entries:
        was = current.get((student, lab, cell_id))
        if was is not None:
            points = None if points == was.points else points
            comment = None if comment is not None and comment == was.comment else comment
        changed.append((student, lab, cell_id, points, comment))
    return changed


def merge_manual_scores(
    gradebook_dir: Path | str, scores_csv: Path | str, secret: str, by: str | None = None
) -> tuple[GradeReport, int]:
    """Store the entries of `scores_csv` in the verified gradebook of `gradebook_dir` (by
    `by`, default the login name) and rewrite its views; (the report, entries stored)."""
    folder, sheet = Path(gradebook_dir), Path(scores_csv)
    in_place = sheet.resolve() == (folder / "manual.csv").resolve()  # filled in where it lay
    with BookSession(folder, secret, filled_in=in_place) as book:
        entries = sheet_entries(book.report(), sheet)
        assert book.state is not None
        entries = _changes(entries, book.state.manual)
        stored = book.db.add_manual(entries, by=by or getpass.getuser(), sheet=str(sheet))
        report = book.commit()
    return report, stored
