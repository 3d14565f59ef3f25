"""Written answers graded by hand: the cells that hold them and the student's text.

Contract: in a source lab, a *markdown* cell tagged ``manual`` with ``"points": N`` and
``"exercise": "ID"`` in its metadata (and a cell ``id``) is a written answer. Its text in the
source is the instructor's model answer or rubric: `release` replaces it with `PLACEHOLDER`,
so it is never published. `manual_cells(nb)` reads and validates them (`MarkerError` names
the cell); `answer_of(submission_nb, cell)` is the student's text for that cell ("" when the
cell is missing, not markdown, or still the placeholder), capped at `MAX_ANSWER_CHARS`.
Grading scores each 0 of N, pending (`PENDING`), and lists the answer in the gradebook;
`manual_scores` merges the instructor's points. `answer_digest(text)` names the text a hand
mark was given for (``sha256:`` and the hex digest).

Design decisions:
- Markdown, not code: a written answer is never executed, so a manual cell can carry no
  exploit into the kernel, and grading never restores it (it is the student's work).
- A hand mark is bound to the text it marked: the gradebook stores `answer_digest` of the
  answer with every entry, and an entry whose digest is not the current answer's no longer
  counts (the answer is pending again; the entry and its text stay in the history). The
  ``sha256:`` prefix keeps a spreadsheet from reading the digest as a number.
- Found by cell id, like graders: a student who moves the cell keeps the answer; one who
  deletes it or turns it into code has answered nothing (the gradebook says so).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .errors import MarkerError
from .markers import has_tag, points_and_exercise, require_unique_id

__all__ = [
    "MANUAL_TAG",
    "MAX_ANSWER_CHARS",
    "PENDING",
    "PLACEHOLDER",
    "ManualCell",
    "answer_digest",
    "answer_of",
    "is_manual",
    "manual_cells",
]

MANUAL_TAG = "manual"
PLACEHOLDER = "_Your answer here (graded by hand)._"
PENDING = "needs manual grading: see manual.csv"
MAX_ANSWER_CHARS = 20_000


@dataclass(frozen=True)
class ManualCell:
    """One written-answer cell of a source lab."""

    cell_id: str
    exercise: str
    points: float
    index: int  # position among all the notebook's cells
    model_answer: str  # the source's text: never released


def is_manual(cell: Any) -> bool:
    """True for a cell tagged ``manual`` (validated by `manual_cells`)."""
    return has_tag(cell, MANUAL_TAG)


def manual_cells(nb: Any, lab: str = "lab") -> list[ManualCell]:
    """The written-answer cells of `nb`, validated; raises `MarkerError` naming the cell."""
    found: list[ManualCell] = []
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if not is_manual(cell):
            continue
        cell_id = cell.get("id")
        where = f"{lab}: manual cell {cell_id or f'#{index}'}"
        if cell.get("cell_type") != "markdown":
            raise MarkerError(
                f"{where} is a {cell.get('cell_type')} cell; written answers "
                "are markdown cells (nothing in them is run)"
            )
        require_unique_id(cell_id, where, seen, " so answers can be found by id")
        points, exercise = points_and_exercise(cell.get("metadata", {}), where, zero_allowed=False)
        if any(has_tag(cell, t) for t in ("grader", "readonly")):
            raise MarkerError(
                f"{where} is also tagged grader or readonly; a written answer is only 'manual'"
            )
        found.append(ManualCell(cell_id, exercise, points, index, cell.get("source", "")))
    return found


def answer_digest(text: str) -> str:
    """The name of the answer `text` that a hand mark is bound to."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def answer_of(nb: Any, cell: ManualCell) -> str:
    """The student's answer in submission `nb` for `cell` ("" when there is none)."""
    for c in nb.cells:
        if c.get("id") == cell.cell_id:
            text = c.get("source", "") if c.get("cell_type") == "markdown" else ""
            text = text.strip()
            if text == PLACEHOLDER:
                return ""
            if len(text) > MAX_ANSWER_CHARS:
                return text[:MAX_ANSWER_CHARS] + f" [cut at {MAX_ANSWER_CHARS} characters]"
            return text
    return ""
