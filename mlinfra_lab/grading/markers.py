"""Read a lab notebook's markers: solution spans, hidden-test spans, grader and read-only cells.

Contract: `grader_cells(nb)` returns the lab's graded cells (id, exercise, points, ``forbid``
list, full and visible text, checksum) in notebook order, `readonly_cells(nb)` the cells
tagged ``readonly``, and `replace_solutions` / `strip_hidden` turn an instructor cell's text
into its student version; any malformed marker raises `MarkerError` naming the cell. (The
``wrong-answer`` cells are read by `variants`.)

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
- ``"forbid": ["mlinfra_lab.attention.online_softmax", ...]`` in a grader's metadata lists
  the course's own implementations of the answer; here it is only checked for shape (a
  list of ``mlinfra_lab.`` names): `submissions.read_source_lab` resolves the names, and
  `forbid` refuses their calls while the grader runs.
- A ``readonly`` code cell holds code a grader runs (a wrapper, a helper) that the student
  must not change: grading restores it by id like a grader, the release marks it
  non-editable, and every later grader re-runs its text first (so a student cell that
  redefines the helper further down changes nothing; its line magics are not re-run). It
  holds no markers, no cell magic, and is never a grader too.
- A read-only cell with ``"launcher": true`` in its metadata runs the student's code in a way
  the judge cannot (a Triton launch, say; see `judge`): its text is re-run before later
  graders in the student's kernel only, and the functions it defines are judged by their
  results, like the student's own. Every other read-only text is re-run in both kernels.
- The text a grader runs in the student's kernel calls `judge_record.arm` (`ARM_LINE`)
  between the read-only texts and the grader's own: the student's functions are recorded
  from there on, with the read-only helpers already rebound. The judge runs, before its
  read-only texts, the top-level imports of the other code cells above (solutions left
  out): the instructor's imports, not whatever the student bound to ``np``.
- The grader's own text runs as the body of a run-once function (`scope`): what
  it binds is gone when it ends, except the names a later grader of the lab reads.
- The checksum is SHA-256 of the full source text of a grader (hidden tests included): the
  release stores it, so the grader can tell a submission made from an older release.

Caveat: markers in markdown cells are rejected rather than interpreted (nbgrader allows
written answers there; this course grades code only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from .errors import MarkerError
from .forbid import PACKAGE_PREFIX, guard_source
from .judge_names import imports_read, top_level_imports
from .scope import exported_names, scoped_source

__all__ = [
    "ARM_LINE",
    "GRADER_TAG",
    "HIDDEN_BEGIN",
    "READONLY_TAG",
    "SOLUTION_BEGIN",
    "GraderCell",
    "ReadonlyCell",
    "checksum",
    "clear_outputs",
    "grader_cells",
    "has_markers",
    "has_tag",
    "is_grader",
    "is_launcher",
    "is_readonly",
    "points_and_exercise",
    "require_unique_id",
    "readonly_cells",
    "replace_solutions",
    "solution_exercise",
    "strip_hidden",
]

SOLUTION_BEGIN = "### BEGIN SOLUTION"
SOLUTION_END = "### END SOLUTION"
HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"
GRADER_TAG = "grader"
READONLY_TAG = "readonly"
LAUNCHER_KEY = "launcher"
ARM_LINE = "__import__('mlinfra_lab.grading.judge_record', fromlist=['arm']).arm()"
_ALL_MARKERS = (SOLUTION_BEGIN, SOLUTION_END, HIDDEN_BEGIN, HIDDEN_END)


@dataclass(frozen=True)
class GraderCell:
    """One graded cell of a source lab."""

    cell_id: str
    exercise: str  # the exercise ID from metadata; several cells may share one
    points: float  # awarded when the cell runs without an exception
    index: int  # position among all the notebook's cells
    source: str  # full instructor text, hidden tests included
    forbid: tuple[str, ...] = ()  # course functions the code under test must not call
    preamble: tuple[str, ...] = ()  # texts of the readonly cells above it, re-run first
    launchers: tuple[bool, ...] = ()  # per preamble text: a launcher (student's kernel only)
    imports: tuple[str, ...] = ()  # top-level imports of the setup cells above (judge only)
    exports: tuple[str, ...] = ()  # names it binds that a later grader reads (see `scope`)

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

    @property
    def run_source(self) -> str:
        """The text grading runs: the readonly cells above it, then the source as the body
        of a run-once function (`scope`: its values and helpers die with it), all inside
        the `forbid` guard when it has a list (a student cell that redefines a readonly
        helper between the two is undone right before the grader uses it)."""
        return self._guarded((*self.preamble, ARM_LINE, scoped_source(self.source, self.exports)))

    @property
    def judge_source(self) -> str:
        """The text the judge runs (see `judge`): the imports of the instructor's setup cells
        above that bind a name the rest reads, the read-only texts that are not launchers,
        then the source. No `forbid` guard: no student code runs there to call the course's
        functions (a replayed call returns what the student's kernel, guarded, recorded)."""
        launchers = self.launchers or (False,) * len(self.preamble)
        kept = [
            text for text, launcher in zip(self.preamble, launchers, strict=True) if not launcher
        ]
        imports = "\n".join(imports_read(list(self.imports), "\n\n".join((*kept, self.source))))
        return "\n\n".join((imports, *kept, self.source) if imports else (*kept, self.source))

    def _guarded(self, parts: tuple[str, ...]) -> str:
        text = "\n\n".join(parts)
        if not self.forbid:
            return text
        return guard_source(text, self.forbid, self.exercise)


@dataclass(frozen=True)
class ReadonlyCell:
    """One ``readonly`` cell of a source lab: restored by id at grading, never scored."""

    cell_id: str
    index: int  # position among all the notebook's cells
    source: str

    @property
    def visible(self) -> str:
        return self.source

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
                raise MarkerError(
                    f"{where}: '{begin}' on line {i + 1} before the '{end}' "
                    f"of the span opened on line {start + 1}; close it first"
                )
            start = i
        elif token == end:
            if start is None:
                raise MarkerError(f"{where}: '{end}' on line {i + 1} without a '{begin}' before it")
            yield start, i
            start = None
    if start is not None:
        raise MarkerError(
            f"{where}: '{begin}' on line {start + 1} is never closed; add a '{end}' line"
        )


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


def clear_outputs(cells: list[Any]) -> None:
    """Empty the outputs and execution counts of the code cells of `cells`, in place."""
    for cell in cells:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None


def has_tag(cell: Any, tag: str) -> bool:
    """True when `cell`'s ``metadata.tags`` holds `tag`, whatever the cell type."""
    tags = cell.get("metadata", {}).get("tags", [])
    return isinstance(tags, list) and tag in tags


def is_grader(cell: Any) -> bool:
    """True for a code cell tagged ``grader``."""
    return cell.get("cell_type") == "code" and has_tag(cell, GRADER_TAG)


def is_launcher(cell: Any, where: str = "readonly cell") -> bool:
    """True for a ``readonly`` cell whose metadata says ``"launcher": true`` (see docstring)."""
    flag = cell.get("metadata", {}).get(LAUNCHER_KEY, False)
    if not isinstance(flag, bool):
        raise MarkerError(f"{where}: metadata '{LAUNCHER_KEY}' must be true or false, got {flag!r}")
    if flag and not is_readonly(cell):
        raise MarkerError(f"{where}: only a 'readonly' cell can be a '{LAUNCHER_KEY}'")
    return flag


def is_readonly(cell: Any) -> bool:
    """True for a code cell tagged ``readonly``."""
    return cell.get("cell_type") == "code" and has_tag(cell, READONLY_TAG)


def _forbid_list(meta: dict, where: str) -> tuple[str, ...]:
    names = meta.get("forbid", [])
    if not isinstance(names, list) or not all(
        isinstance(n, str) and n.startswith(PACKAGE_PREFIX) for n in names
    ):
        raise MarkerError(
            f"{where}: metadata 'forbid' must be a list of dotted names of the "
            'course package, e.g. ["mlinfra_lab.attention.online_softmax"], '
            f"got {names!r}"
        )
    return tuple(names)


def require_unique_id(
    cell_id: str | None, where: str, seen: set[str], why: str, kind: str = "cell"
) -> None:
    """Refuse a marked cell without an id, or with one already in `seen` (then add it):
    grading finds marked cells by id. `why` ends the message (`` so ... by id``)."""
    if not cell_id:
        raise MarkerError(
            f"{where} has no cell id; re-save the notebook with nbformat >= 4.5" + why
        )
    if cell_id in seen:
        raise MarkerError(f"{where}: the id is used twice; give each {kind} its own id")
    seen.add(cell_id)


def points_and_exercise(meta: dict, where: str, zero_allowed: bool = True) -> tuple[float, str]:
    """A marked cell's ``points`` (a number, >= 0, or > 0 when `zero_allowed` is False) and
    ``exercise`` (a non-empty name, stripped) from its metadata; `MarkerError` naming `where`."""
    points, exercise = meta.get("points"), meta.get("exercise")
    if (
        isinstance(points, bool)
        or not isinstance(points, int | float)
        or points < 0
        or (points == 0 and not zero_allowed)
    ):
        raise MarkerError(
            f"{where}: metadata 'points' must be a number "
            f"{'>=' if zero_allowed else '>'} 0, got {points!r}"
        )
    if not isinstance(exercise, str) or not exercise.strip():
        raise MarkerError(f"{where}: metadata 'exercise' must name the exercise, got {exercise!r}")
    return float(points), exercise.strip()


def grader_cells(nb: Any, lab: str = "lab") -> list[GraderCell]:
    """The grader cells of notebook `nb`, validated; raises `MarkerError` naming the cell."""
    found: list[GraderCell] = []
    seen: set[str] = set()
    preamble: list[str] = []  # readonly cells met so far, re-run before each later grader
    launchers: list[bool] = []
    imports: list[str] = []  # of the other code cells above, solutions left out
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") == "code" and not is_readonly(cell) and not is_grader(cell):
            text = cell.get("source", "")
            if has_markers(text):
                text = replace_solutions(text, "?", f"{lab}: cell {cell.get('id')}")
            imports.extend(i for i in top_level_imports(text) if i not in imports)
        if is_readonly(cell) and not is_grader(cell):  # line magics (%matplotlib) stay behind
            preamble.append(
                "\n".join(
                    line
                    for line in cell.get("source", "").splitlines()
                    if not line.lstrip().startswith(("%", "!"))
                )
            )
            launchers.append(is_launcher(cell, f"{lab}: readonly cell {cell.get('id')}"))
        if not is_grader(cell):
            continue
        cell_id = cell.get("id")
        where = f"{lab}: grader cell {cell_id or f'#{index}'}"
        require_unique_id(
            cell_id,
            where,
            seen,
            " (e.g. nbformat.validator.normalize) so graders have ids",
            "grader cell",
        )
        meta = cell.get("metadata", {})
        points, exercise = points_and_exercise(meta, where)
        text = cell.get("source", "")
        if any(line.strip() in (SOLUTION_BEGIN, SOLUTION_END) for line in text.splitlines()):
            raise MarkerError(
                f"{where}: a grader cell cannot hold a solution span; move the "
                "solution into a cell of its own"
            )
        list(_spans(text.splitlines(), HIDDEN_BEGIN, HIDDEN_END, where))  # validates
        forbid = _forbid_list(meta, where)
        if forbid and text.lstrip().startswith("%%"):
            raise MarkerError(
                f"{where}: a grader with 'forbid' runs inside a guard block, "
                "so it cannot start with a cell magic; remove the magic"
            )
        if has_tag(cell, READONLY_TAG):
            raise MarkerError(
                f"{where} is tagged both 'grader' and '{READONLY_TAG}'; a grader "
                "is already restored at grading: remove the readonly tag"
            )
        found.append(
            GraderCell(
                cell_id,
                exercise,
                points,
                index,
                text,
                forbid,
                tuple(preamble),
                tuple(launchers),
                tuple(imports),
            )
        )
    exports = exported_names([g.source for g in found])
    return [replace(g, exports=tuple(sorted(e))) for g, e in zip(found, exports, strict=True)]


def readonly_cells(nb: Any, lab: str = "lab") -> list[ReadonlyCell]:
    """The ``readonly`` cells of `nb`, validated; raises `MarkerError` naming the cell."""
    found: list[ReadonlyCell] = []
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if not has_tag(cell, READONLY_TAG) or is_grader(cell):
            continue  # a grader tagged readonly is reported by grader_cells
        cell_id = cell.get("id")
        where = f"{lab}: readonly cell {cell_id or f'#{index}'}"
        if cell.get("cell_type") != "code":
            raise MarkerError(
                f"{where} is a {cell.get('cell_type')} cell; the "
                f"'{READONLY_TAG}' tag is for code cells a grader runs"
            )
        require_unique_id(cell_id, where, seen, " so read-only cells can be restored by id")
        if has_markers(cell.get("source", "")):
            raise MarkerError(
                f"{where} holds solution or hidden-test markers; a read-only "
                "cell is restored from the source as is: move the markers out"
            )
        if cell.get("source", "").lstrip().startswith("%%"):
            raise MarkerError(
                f"{where} starts with a cell magic; graders re-run read-only "
                "cells as Python code: remove the magic"
            )
        found.append(ReadonlyCell(cell_id, index, cell.get("source", "")))
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
