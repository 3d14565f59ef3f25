"""The ``manual.csv`` sheet grading writes for the instructor: its columns and its rows.

Contract: `manual_sheet_rows(report, comments)` is one row per written answer of `report`
(`SHEET_COLUMNS`: student, lab, exercise, cell_id, max, points, comment, answer,
answer_sha256); points are empty while the answer is pending, the comment is the
instructor's latest, ``answer_sha256`` names the text shown (`manual.answer_digest`), so a
sheet filled in for an answer since replaced is refused rather than credited to the new one.
`manual_scores` reads the sheet back once the points are filled in.

Design decisions:
- Its own module, below both the writer (`gradebook`) and the reader (`manual_scores`,
  which opens the gradebook folder through `views`, which writes it through `gradebook`):
  the sheet's format is the one thing they share, so neither imports the other.
"""

from __future__ import annotations

from typing import Any

from .grade import GradeReport
from .manual import PENDING, answer_digest

__all__ = ["SHEET_COLUMNS", "manual_sheet_rows"]

SHEET_COLUMNS = ("student", "lab", "exercise", "cell_id", "max", "points", "comment", "answer", "answer_sha256")  # fmt: skip


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 4)


def manual_sheet_rows(
    report: GradeReport, comments: dict[tuple[str, str, str], str] | None = None
) -> list[dict[str, Any]]:
    """One row per written answer in `report` (`SHEET_COLUMNS`); points empty while pending,
    the comment the instructor's latest (`comments`, by student, lab and cell id)."""
    comments = comments or {}
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
                        "comment": comments.get((result.student, result.lab, c.cell_id), ""),
                        "answer": c.answer,
                        "answer_sha256": answer_digest(c.answer),
                    }
                )
    return rows
