"""Prove a lab's graders can fail: on the release, and on every wrong answer the source keeps.

Contract: `validate_labs(labs)` runs, for every lab that has grader cells, the instructor
source, its released student version (as grading would run it: graders restored, hidden
tests included) and one variant per ``wrong-answer`` cell (see `variants`), all in one
batch run as grading runs them (`execute`: nbval's ``--nbval-lax`` rule for a cell, each
kernel driven by the grading process), and returns a `ValidationReport` whose ``problems`` name the lab, exercise and
cell of: every grader that fails on the source or passes on the release, every wrong answer
that passes all the graders of its exercise (with its ``why``), every exercise without a
wrong answer, and every non-grader cell that errors on the source.

Design decisions:
- A grader that passes on the release cannot fail: it checks constants, or code the student
  does not write, so it would give points for nothing. A grader that fails on the source
  would take points from a correct answer. Both are errors.
- Failing on a `NotImplementedError` stub proves little; failing on a plausible wrong answer
  (an off-by-one tile, a missing rescale, a call to the course's own implementation) proves
  the grader checks the answer. So every exercise must carry at least one.
- Graders run as grading runs them: a grader with ``forbid`` metadata runs inside its guard
  on the source too, so a grader that itself calls a forbidden function (or a package
  function that calls one) fails here, on the instructor's side, not on every student.
- The kernels get ``config.env`` (``validate --secret S`` checks the hidden tests pass on the
  solutions under another secret; the default is `secret.DEFAULT_SECRET`).
- A lab without grader cells is a warning, not an error (placeholder labs), and so is a lab
  without hidden tests (the course asks each lab to have some).
- A grader whose judge (see `judge`) would take a name the instructor's own cell binds
  outside a solution and outside a read-only cell (a tolerance, a helper) is an error:
  the judge replays what the student's kernel holds under that name, which a submission
  can change. Found from the text alone, before anything runs.
- Malformed markers (an unclosed span, a grader without points, a wrong answer that is not
  a raw cell, a ``forbid`` name that does not resolve) are errors of that lab; the other
  labs are still validated.
- All notebooks run in one batch (``config.jobs`` side by side, see `execute`), each in a
  folder of its own under a temporary folder, like a submission.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import GradingError
from .execute import CellOutcome, ExecutionConfig, run_notebooks
from .judge_names import JudgeNames, scan
from .markers import has_markers, is_grader, is_readonly
from .release import lab_notebooks, release_node
from .restore import restore_graders
from .submissions import SourceLab, read_source_lab
from .variants import WRONG_ANSWER_TAG, source_run, variant_notebook

__all__ = ["ValidationProblem", "ValidationReport", "validate_labs"]


@dataclass(frozen=True)
class ValidationProblem:
    """One grader (or lab, exercise, wrong answer) that does not do its job."""

    lab: str
    exercise: str
    cell_id: str
    problem: str

    def __str__(self) -> str:
        where = f"lab {self.lab}"
        if self.exercise:
            where += f", exercise {self.exercise}"
        if self.cell_id:
            where += f", cell {self.cell_id}"
        return f"{where}: {self.problem}"


@dataclass(frozen=True)
class ValidationReport:
    """What `validate_labs` found: per-lab summary lines, problems and warnings."""

    checked: tuple[str, ...]  # "lab X: N grader cells ..." lines of the labs without problems
    problems: tuple[ValidationProblem, ...]
    warnings: tuple[str, ...]
    config: ExecutionConfig = field(default_factory=ExecutionConfig)

    @property
    def ok(self) -> bool:
        return not self.problems


def _read(path: Path) -> tuple[SourceLab, Any]:
    lab = read_source_lab(path)
    return lab, release_node(lab.notebook, lab.name)


def _missing_wrong_answers(lab: SourceLab) -> list[ValidationProblem]:
    covered = {w.exercise for w in lab.wrong_answers}
    exercises = dict.fromkeys(g.exercise for g in lab.graders)  # lab order, no repeats
    return [
        ValidationProblem(
            lab.name,
            exercise,
            "",
            f"no wrong answer to prove its graders: add a raw cell tagged '{WRONG_ANSWER_TAG}' "
            f'with metadata {{"exercise": "{exercise}", "why": "<the mistake>"}} holding '
            "a plausible wrong answer (the full text of the solution cell it replaces)",
        )
        for exercise in exercises
        if exercise not in covered
    ]


def _names_the_student_controls(lab: SourceLab) -> list[ValidationProblem]:
    """Graders whose judge takes from the student's kernel a name that an instructor cell
    (no solution span, not read-only) binds: the judge would replay the student's value of
    the lab's own constant or helper, which a submission can change (see `judge`)."""
    problems: list[ValidationProblem] = []
    graders = {g.cell_id: g for g in lab.graders}
    names = JudgeNames()
    bound_by: dict[str, str] = {}  # name -> id of the instructor cell that binds it
    reported: set[str] = set()
    for cell in lab.notebook.cells:
        if cell.get("cell_type") != "code" or is_readonly(cell):
            continue
        text = cell.get("source", "")
        grader = graders.get(cell.get("id")) if is_grader(cell) else None
        if grader is not None:
            for name in names.take(grader.judge_source):
                if name in bound_by and name not in reported:
                    reported.add(name)
                    problems.append(
                        ValidationProblem(
                            lab.name,
                            grader.exercise,
                            grader.cell_id,
                            f"the judge takes {name!r} from the student's kernel, but your cell "
                            f"{bound_by[name]} (not a solution, not read-only) binds it, so a "
                            "submission can change it: tag that cell 'readonly', or bind "
                            f"{name!r} in the grader",
                        )
                    )
        elif not is_grader(cell):
            _, bound = scan(text)
            for name in bound:
                if has_markers(text):
                    bound_by.pop(name, None)  # the student's own (a solution cell binds it)
                else:
                    bound_by[name] = str(cell.get("id"))
    return problems


def _check(lab: SourceLab, ran: Callable[[str], dict[str, CellOutcome]]) -> list[ValidationProblem]:
    """The problems of one lab, given `ran(run)`: the outcomes of run "source", "release",
    or "wrong:<cell id>"."""
    problems = []
    for g in lab.graders:
        on_source, on_release = ran("source").get(g.cell_id), ran("release").get(g.cell_id)
        if on_source is None or not on_source.passed:
            why = on_source.message if on_source else "it never ran"
            problems.append(
                ValidationProblem(
                    lab.name,
                    g.exercise,
                    g.cell_id,
                    f"fails on the source (with the solutions): {why}",
                )
            )
        if on_release is not None and on_release.passed:
            problems.append(
                ValidationProblem(
                    lab.name,
                    g.exercise,
                    g.cell_id,
                    "passes on the released notebook, so it cannot fail: it must call the "
                    "student's code",
                )
            )
    grader_ids = {g.cell_id for g in lab.graders}
    for cell_id, outcome in ran("source").items():
        if cell_id not in grader_ids and outcome.outcome == "failed":
            problems.append(
                ValidationProblem(
                    lab.name,
                    "",
                    cell_id,
                    f"a non-grader cell errors on the source: {outcome.message}",
                )
            )
    for wrong in lab.wrong_answers:
        outcomes = ran(f"wrong:{wrong.cell_id}")
        graders = [g for g in lab.graders if g.exercise == wrong.exercise]
        if all(outcomes.get(g.cell_id) is not None and outcomes[g.cell_id].passed for g in graders):
            problems.append(
                ValidationProblem(
                    lab.name,
                    wrong.exercise,
                    wrong.cell_id,
                    f"this wrong answer ({wrong.why}) passes every grader of the exercise; make "
                    "a grader catch it",
                )
            )
    return problems


def validate_labs(
    labs: Path | str, config: ExecutionConfig | None = None, progress: bool = False
) -> ValidationReport:
    """Validate every lab of `labs` (a notebook or a folder of them); `progress` shows a bar."""
    import nbformat

    config = config or ExecutionConfig()
    problems: list[ValidationProblem] = []
    warnings: list[str] = []
    runnable: list[tuple[SourceLab, Any]] = []  # (lab, its released notebook)
    for path in lab_notebooks(labs):
        try:
            lab, released = _read(path)
        except GradingError as err:
            problems.append(ValidationProblem(path.stem, "", "", str(err)))
            continue
        if not lab.graders:
            warnings.append(f"lab {lab.name}: no grader cells (a placeholder?); nothing to check")
            continue
        if not any(g.has_hidden for g in lab.graders):
            warnings.append(
                f"lab {lab.name}: no grader has hidden tests; add one "
                "(### BEGIN HIDDEN TESTS ... ### END HIDDEN TESTS)"
            )
        problems.extend(_names_the_student_controls(lab))
        runnable.append((lab, released))
    runs: dict[tuple[str, str], Path] = {}  # (lab, "source" | "release" | "wrong:ID") -> path
    with tempfile.TemporaryDirectory(prefix="mlinfra-validate-") as tmp:
        for k, (lab, released) in enumerate(runnable):
            notebooks = {
                "source": source_run(lab.notebook, lab.graders),
                "release": restore_graders(released, lab)[0],
            }
            for wrong in lab.wrong_answers:
                notebooks[f"wrong:{wrong.cell_id}"] = variant_notebook(
                    lab.notebook, lab.graders, wrong
                )
            for j, (run, nb) in enumerate(notebooks.items()):
                target = Path(tmp) / f"{k:03d}" / f"{j:03d}" / f"{lab.name}.ipynb"
                target.parent.mkdir(parents=True)
                nbformat.write(nb, str(target))
                runs[lab.name, run] = target.resolve()
        texts = {lab.name: {g.cell_id: g.judge_source for g in lab.graders} for lab, _ in runnable}
        outcomes = run_notebooks(
            list(runs.values()),
            config,
            judge_texts={path: texts[name] for (name, _), path in runs.items()},
            progress=(
                f"validating {len(runnable)} labs ({len(runs)} notebooks)"
                if progress and runs
                else None
            ),
        )
    checked = []
    for lab, _ in runnable:

        def ran(run: str, lab: SourceLab = lab) -> dict[str, CellOutcome]:
            return outcomes.get(runs[lab.name, run], {})

        found = _missing_wrong_answers(lab) + _check(lab, ran)
        problems += found
        if not found:
            checked.append(
                f"lab {lab.name}: {len(lab.graders)} grader cells pass on the "
                f"source and fail on the release and on {len(lab.wrong_answers)} "
                "wrong answers"
            )
    return ValidationReport(tuple(checked), tuple(problems), tuple(warnings), config)
