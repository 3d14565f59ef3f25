"""Read a lab notebook's markers: solution spans, hidden-test spans and grader cells.

Contract: `grader_cells(nb)` returns the lab's graded cells (id, exercise, points, full and
visible text, checksum) in notebook order, and `replace_solutions` / `strip_hidden` turn an
instructor cell's text into its student version; any malformed marker raises `MarkerError`
naming the cell.

Design decisions:
- The markers are nbgrader's (`### BEGIN SOLUTION` ... `### END SOLUTION`,
  `### BEGIN HIDDEN TESTS` ... `### END HIDDEN TESTS`), matched on a whole stripped line,
  so an instructor can move a lab between nbgrader and this tool.
- A grader cell is a *code* cell tagged ``grader`` whose metadata carries
  ``"points": N`` and ``"exercise": "ID"``. It is identified by its nbformat-4.5 cell ``id``:
  grading restores graders by id, so a grader without an id is an error, as are duplicate ids.
- Solutions are replaced by one ``raise NotImplementedError("<exercise>: ...")`` line at the
  indentation of the ``BEGIN`` marker, so a solution span inside a function body keeps the
  function syntactically valid. The exercise named is the solution cell's own
  ``metadata.exercise`` if it has one, else the exercise of the next grader cell.
- Hidden tests may only sit in grader cells (grading restores grader cells only: a hidden
  span elsewhere would be lost), and solution spans never in grader cells.
- The checksum is SHA-256 of the full source text of a grader (hidden tests included): the
  release stores it, so the grader can tell a submission made from an older release.

Caveat: markers in markdown cells are rejected rather than interpreted (nbgrader allows
written answers there; this course grades code only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .errors import MarkerError

__all__ = [
    "GRADER_TAG",
    "HIDDEN_BEGIN",
    "GraderCell",
    "checksum",
    "grader_cells",
    "has_markers",
    "is_grader",
    "replace_solutions",
    "solution_exercise",
    "strip_hidden",
]

SOLUTION_BEGIN = "### BEGIN SOLUTION"
SOLUTION_END = "### END SOLUTION"
HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"
GRADER_TAG = "grader"
_ALL_MARKERS = (SOLUTION_BEGIN, SOLUTION_END, HIDDEN_BEGIN, HIDDEN_END)


@dataclass(frozen=True)
class GraderCell:
    """One graded cell of a source lab."""

    cell_id: str
    exercise: str  # the exercise ID from metadata; several cells may share one
    points: float  # awarded when the cell runs without an exception
    index: int  # position among all the notebook's cells
    source: str  # full instructor text, hidden tests included

    @property
    def visible(self) -> str:
        """The text a student sees: the source without its hidden-test spans."""
        return strip_hidden(self.source, where=f"grader cell {self.cell_id}")

    @property
    def has_hidden(self) -> bool:
        return any(line.strip() == HIDDEN_BEGIN for line in self.source.splitlines())

    @property
    def checksum(self) -> str:
        return checksum(self.source)


def checksum(text: str) -> str:
    """``"sha256:<hex>"`` of `text` (UTF-8)."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _spans(lines: list[str], begin: str, end: str, where: str) -> Iterator[tuple[int, int]]:
    """Yield (begin_line, end_line) index pairs of `begin`/`end` spans; no nesting allowed."""
    start: int | None = None
    for i, line in enumerate(lines):
        token = line.strip()
        if token == begin:
            if start is not None:
                raise MarkerError(f"{where}: '{begin}' on line {i + 1} before the '{end}' "
                                  f"of the span opened on line {start + 1}; close it first")
            start = i
        elif token == end:
            if start is None:
                raise MarkerError(f"{where}: '{end}' on line {i + 1} without a '{begin}' "
                                  "before it")
            yield start, i
            start = None
    if start is not None:
        raise MarkerError(f"{where}: '{begin}' on line {start + 1} is never closed; "
                          f"add a '{end}' line")


def has_markers(source: str) -> bool:
    """True when any solution or hidden-test marker line is in `source`."""
    return any(line.strip() in _ALL_MARKERS for line in source.splitlines())


def replace_solutions(source: str, exercise: str, where: str = "cell") -> str:
    """Replace each solution span (markers included) by a `NotImplementedError` line."""
    lines = source.splitlines()
    spans = list(_spans(lines, SOLUTION_BEGIN, SOLUTION_END, where))
    for begin, end in reversed(spans):
        indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
        stub = f'{indent}raise NotImplementedError("{exercise}: write your solution here")'
        lines[begin : end + 1] = [stub]
    return "\n".join(lines)


def strip_hidden(source: str, where: str = "cell") -> str:
    """Remove each hidden-test span (markers included) and the blank lines it leaves at the end."""
    lines = source.splitlines()
    for begin, end in reversed(list(_spans(lines, HIDDEN_BEGIN, HIDDEN_END, where))):
        del lines[begin : end + 1]
    return "\n".join(lines).rstrip()


def is_grader(cell: Any) -> bool:
    """True for a code cell tagged ``grader``."""
    tags = cell.get("metadata", {}).get("tags", [])
    return cell.get("cell_type") == "code" and isinstance(tags, list) and GRADER_TAG in tags


def grader_cells(nb: Any, lab: str = "lab") -> list[GraderCell]:
    """The grader cells of notebook `nb`, validated; raises `MarkerError` naming the cell."""
    found: list[GraderCell] = []
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if not is_grader(cell):
            continue
        cell_id = cell.get("id")
        where = f"{lab}: grader cell {cell_id or f'#{index}'}"
        if not cell_id:
            raise MarkerError(f"{where} has no cell id; re-save the notebook with nbformat "
                              ">= 4.5 (e.g. nbformat.validator.normalize) so graders have ids")
        if cell_id in seen:
            raise MarkerError(f"{where}: the id is used twice; give each grader cell its own id")
        seen.add(cell_id)
        meta = cell.get("metadata", {})
        points, exercise = meta.get("points"), meta.get("exercise")
        if isinstance(points, bool) or not isinstance(points, int | float) or points < 0:
            raise MarkerError(f"{where}: metadata 'points' must be a number >= 0, "
                              f"got {points!r}")
        if not isinstance(exercise, str) or not exercise.strip():
            raise MarkerError(f"{where}: metadata 'exercise' must name the exercise, "
                              f"got {exercise!r}")
        text = cell.get("source", "")
        if any(line.strip() in (SOLUTION_BEGIN, SOLUTION_END) for line in text.splitlines()):
            raise MarkerError(f"{where}: a grader cell cannot hold a solution span; move the "
                              "solution into a cell of its own")
        list(_spans(text.splitlines(), HIDDEN_BEGIN, HIDDEN_END, where))  # validates
        found.append(GraderCell(cell_id, exercise.strip(), float(points), index, text))
    return found


def solution_exercise(nb: Any, index: int) -> str:
    """Name of the exercise a solution in cell `index` belongs to (see module docstring)."""
    own = nb.cells[index].get("metadata", {}).get("exercise")
    if isinstance(own, str) and own.strip():
        return own.strip()
    for cell in nb.cells[index + 1 :]:
        exercise = cell.get("metadata", {}).get("exercise")
        if is_grader(cell) and isinstance(exercise, str) and exercise.strip():
            return exercise.strip()
    return "this exercise"
