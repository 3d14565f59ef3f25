"""Plausible wrong answers kept in a source lab, and the notebooks that try them on the graders.

Contract: `wrong_answers(nb, lab, graders)` returns the lab's ``wrong-answer`` cells (id,
exercise, the mistake, the id of the cell it replaces, its text), validated: a malformed one
raises `MarkerError` naming the cell. `variant_notebook(nb, graders, wrong)` is the notebook
`validate` runs for one wrong answer: the source with the replaced cell's text set to the
wrong answer, cut after the exercise's last grader; `source_run(nb, graders)` is the source
as `validate` runs it. Both drop every wrong-answer cell, clear outputs and run each grader
that has ``forbid`` metadata inside its guard, as grading does.

Design decisions:
- A wrong answer is a *raw* cell tagged ``wrong-answer`` with metadata
  ``{"exercise": ID, "why": "<the mistake, one line>", "replaces": CELL_ID}``: nothing
  executes a raw cell (nbval, Jupyter Book, "Run all"), so the source still runs clean. A
  code cell with that tag is an error, not silently skipped.
- Its text is the *whole* replacement text of the replaced cell (markers not needed), so
  what runs is exactly what the instructor reads.
- ``replaces`` defaults to the exercise's one solution cell: a code cell with a
  ``### BEGIN SOLUTION`` line whose exercise (`markers.solution_exercise`) is this one. An
  exercise with several solution cells needs ``replaces``; it must name a code cell that is
  not a grader and comes before the exercise's last grader.
- The variant stops after the exercise's last grader: later exercises may build on this
  one, and what they do says nothing about this wrong answer (it also saves time).
- A wrong answer is caught when any grader of its exercise fails (or never runs): the
  exercise then scores less than full, which is all a wrong answer must get.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import MarkerError
from .markers import (
    SOLUTION_BEGIN,
    GraderCell,
    clear_outputs,
    has_tag,
    is_grader,
    solution_exercise,
)

__all__ = [
    "WRONG_ANSWER_TAG",
    "WrongAnswer",
    "is_wrong_answer",
    "source_run",
    "variant_notebook",
    "without_wrong_answers",
    "wrong_answers",
]

WRONG_ANSWER_TAG = "wrong-answer"


@dataclass(frozen=True)
class WrongAnswer:
    """One ``wrong-answer`` cell of a source lab."""

    cell_id: str
    exercise: str
    why: str  # the mistake, in one line
    replaces: str  # id of the code cell whose text it replaces
    source: str  # the full replacement text


def is_wrong_answer(cell: Any) -> bool:
    """True for any cell tagged ``wrong-answer`` (a valid one is a raw cell)."""
    return has_tag(cell, WRONG_ANSWER_TAG)


def _solution_cells(nb: Any, exercise: str) -> list[str]:
    return [
        cell.get("id")
        for i, cell in enumerate(nb.cells)
        if cell.get("cell_type") == "code"
        and not is_wrong_answer(cell)
        and any(ln.strip() == SOLUTION_BEGIN for ln in cell.get("source", "").splitlines())
        and solution_exercise(nb, i) == exercise
    ]


def _replaced(nb: Any, meta: dict, exercise: str, last_grader: int, where: str) -> str:
    """The id of the cell a wrong answer replaces (see the module docstring)."""
    replaces = meta.get("replaces")
    if replaces is None:
        solutions = _solution_cells(nb, exercise)
        if len(solutions) != 1 or not solutions[0]:
            raise MarkerError(
                f"{where}: exercise '{exercise}' has {len(solutions)} solution "
                "cells with an id; say which cell this wrong answer replaces "
                "with metadata 'replaces': CELL_ID"
            )
        replaces = solutions[0]
    index = next((i for i, c in enumerate(nb.cells) if c.get("id") == replaces), None)
    if not isinstance(replaces, str) or index is None:
        raise MarkerError(
            f"{where}: metadata 'replaces' is {replaces!r}, which is not the id "
            "of a cell of this notebook"
        )
    cell = nb.cells[index]
    if cell.get("cell_type") != "code" or is_grader(cell) or is_wrong_answer(cell):
        raise MarkerError(
            f"{where}: 'replaces' names cell {replaces}, which is not a code "
            "cell of the student's (a grader, a markdown or a wrong-answer cell)"
        )
    if index > last_grader:
        raise MarkerError(
            f"{where}: 'replaces' names cell {replaces}, which comes after the "
            f"last grader of exercise '{exercise}', so no grader would test it"
        )
    return replaces


def wrong_answers(nb: Any, lab: str, graders: Sequence[GraderCell]) -> list[WrongAnswer]:
    """The wrong-answer cells of `nb`, in notebook order; `MarkerError` naming a bad one."""
    last_grader: dict[str, int] = {}
    for g in graders:
        last_grader[g.exercise] = max(last_grader.get(g.exercise, -1), g.index)
    found: list[WrongAnswer] = []
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if not is_wrong_answer(cell):
            continue
        cell_id = cell.get("id")
        where = f"{lab}: wrong-answer cell {cell_id or f'#{index}'}"
        if cell.get("cell_type") != "raw":
            raise MarkerError(
                f"{where} is a {cell.get('cell_type')} cell; make it a raw cell "
                "(cell type 'raw') so that running the source never executes it"
            )
        if not cell_id or cell_id in seen:
            raise MarkerError(
                f"{where}: needs an id of its own (nbformat >= 4.5), so that validate can name it"
            )
        seen.add(cell_id)
        meta = cell.get("metadata", {})
        exercise, why = meta.get("exercise"), meta.get("why")
        if not isinstance(exercise, str) or exercise.strip() not in last_grader:
            raise MarkerError(
                f"{where}: metadata 'exercise' is {exercise!r}, which no grader "
                f"cell grades; use one of {sorted(last_grader)}"
            )
        exercise = exercise.strip()
        if not isinstance(why, str) or not why.strip():
            raise MarkerError(
                f"{where}: metadata 'why' must say in one line what the mistake "
                "is (validate prints it when the graders miss it)"
            )
        replaces = _replaced(nb, meta, exercise, last_grader[exercise], where)
        found.append(WrongAnswer(cell_id, exercise, why.strip(), replaces, cell.get("source", "")))
    return found


def without_wrong_answers(nb: Any) -> Any:
    """A copy of `nb` without its wrong-answer cells, outputs cleared."""
    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if not is_wrong_answer(c)]
    clear_outputs(out.cells)
    return out


def _guard(nb: Any, graders: Sequence[GraderCell]) -> Any:
    by_id = {g.cell_id: g for g in graders}
    for cell in nb.cells:
        if cell.get("id") in by_id:
            cell.source = by_id[cell.get("id")].run_source
    return nb


def source_run(nb: Any, graders: Sequence[GraderCell]) -> Any:
    """The source lab as validated: no wrong answers, no outputs, graders guarded."""
    return _guard(without_wrong_answers(nb), graders)


def variant_notebook(nb: Any, graders: Sequence[GraderCell], wrong: WrongAnswer) -> Any:
    """The source with `wrong` in place of the cell it replaces, cut after its last grader."""
    out = source_run(nb, graders)
    ids = [c.get("id") for c in out.cells]
    last = max(ids.index(g.cell_id) for g in graders if g.exercise == wrong.exercise)
    out.cells = out.cells[: last + 1]
    out.cells[ids.index(wrong.replaces)].source = wrong.source
    return out
