"""Prove a lab's graders can fail: each must pass on the source and fail on the release.

Contract: `validate_labs(labs)` runs every lab that has grader cells twice under nbval (the
instructor source, and its released student version, where every solution raises
`NotImplementedError`) and returns a `ValidationReport` whose ``problems`` name the lab,
exercise and cell id of every grader that fails on the source or passes on the release.

Design decisions:
- A grader that passes on the release cannot fail: it checks constants, or code the student
  does not write, so it would give points for nothing. A grader that fails on the source
  would take points from a correct answer. Both are errors.
- A lab without grader cells is a warning, not an error (placeholder labs), and so is a lab
  without hidden tests (the course asks each lab to have some).
- Malformed markers (an unclosed span, a grader without points) are errors of that lab; the
  other labs are still validated.
- All notebooks run in one nbval batch, one after the other (see `execute` for why not in
  parallel on 2 cores). The source is run from a copy with cleared outputs, in a temporary
  folder, like a submission.
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import GradingError
from .execute import ExecutionConfig, run_notebooks
from .release import clear_outputs, lab_notebooks, release_node
from .submissions import SourceLab, read_source_lab

__all__ = ["ValidationProblem", "ValidationReport", "validate_labs"]


@dataclass(frozen=True)
class ValidationProblem:
    """One grader (or lab) that does not do its job."""

    lab: str
    exercise: str
    cell_id: str
    problem: str

    def __str__(self) -> str:
        where = f"lab {self.lab}"
        if self.cell_id:
            where += f", exercise {self.exercise}, cell {self.cell_id}"
        return f"{where}: {self.problem}"


@dataclass(frozen=True)
class ValidationReport:
    """What `validate_labs` found: per-lab summary lines, problems and warnings."""

    checked: tuple[str, ...]  # "lab: N grader cells ok" lines
    problems: tuple[ValidationProblem, ...]
    warnings: tuple[str, ...]
    config: ExecutionConfig = field(default_factory=ExecutionConfig)

    @property
    def ok(self) -> bool:
        return not self.problems


def validate_labs(
    labs: Path | str, config: ExecutionConfig | None = None, progress: bool = False
) -> ValidationReport:
    """Validate every lab of `labs` (a notebook or a folder of them); `progress` shows a bar."""
    import nbformat

    config = config or ExecutionConfig()
    problems: list[ValidationProblem] = []
    warnings: list[str] = []
    runnable: list[tuple[SourceLab, object]] = []  # (lab, its released notebook)
    for path in lab_notebooks(labs):
        try:
            lab = read_source_lab(path)
            released = release_node(lab.notebook, lab.name)
        except GradingError as err:
            problems.append(ValidationProblem(path.stem, "", "", str(err)))
            continue
        if not lab.graders:
            warnings.append(f"lab {lab.name}: no grader cells (a placeholder?); nothing to check")
            continue
        if not any(g.has_hidden for g in lab.graders):
            warnings.append(f"lab {lab.name}: no grader has hidden tests; add one "
                            "(### BEGIN HIDDEN TESTS ... ### END HIDDEN TESTS)")
        runnable.append((lab, released))
    checked = []
    with tempfile.TemporaryDirectory(prefix="mlinfra-validate-") as tmp:
        pairs = []
        for lab, released in runnable:
            src_path = Path(tmp) / "source" / f"{lab.name}.ipynb"
            rel_path = Path(tmp) / "release" / f"{lab.name}.ipynb"
            source = copy.deepcopy(lab.notebook)
            clear_outputs(source.cells)
            for target, nb in ((src_path, source), (rel_path, released)):
                target.parent.mkdir(exist_ok=True)
                nbformat.write(nb, str(target))
            pairs.append((lab, src_path.resolve(), rel_path.resolve()))
        outcomes = run_notebooks([p for _, s, r in pairs for p in (s, r)], config, progress=(
            f"validating {len(pairs)} labs" if progress and pairs else None))
    for lab, src_path, rel_path in pairs:
        bad = 0
        for g in lab.graders:
            on_source = outcomes.get(src_path, {}).get(g.cell_id)
            on_release = outcomes.get(rel_path, {}).get(g.cell_id)
            if on_source is None or not on_source.passed:
                why = on_source.message if on_source else "it never ran"
                problems.append(ValidationProblem(
                    lab.name, g.exercise, g.cell_id,
                    f"fails on the source (with the solutions): {why}"))
                bad += 1
            if on_release is not None and on_release.passed:
                problems.append(ValidationProblem(
                    lab.name, g.exercise, g.cell_id,
                    "passes on the released notebook, so it cannot fail: it must call the "
                    "student's code"))
                bad += 1
        grader_ids = {g.cell_id for g in lab.graders}
        for cell_id, outcome in outcomes.get(src_path, {}).items():
            if cell_id not in grader_ids and outcome.outcome == "failed":
                problems.append(ValidationProblem(
                    lab.name, "", cell_id,
                    f"a non-grader cell errors on the source: {outcome.message}"))
                bad += 1
        if not bad:
            checked.append(f"lab {lab.name}: {len(lab.graders)} grader cells pass on the "
                           "source and fail on the release")
    return ValidationReport(tuple(checked), tuple(problems), tuple(warnings), config)
