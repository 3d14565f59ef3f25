"""Grade lab submissions: restore the graders, run each notebook in its kernel, score each grader.

Contract: `grade_submissions(paths, source, config)` returns a `GradeReport`: per submission,
each source grader cell's points if the cell ran without an exception (and its judge
agreed), else 0 with the assertion message; inputs that cannot be graded are listed in
``report.problems`` (one line each) and never stop the batch. Nothing is written;
`write_gradebook` does that.

Design decisions:
- A cell's verdict is nbval's under ``--nbval-lax`` (it fails when it raises; no output is
  compared), but the notebooks are run by `execute` / `kernel_runner`, which drive each
  kernel over jupyter's protocol, not by nbval: grading needs both of the kernel's signals,
  the judge, the budgets, and no outcome passing through a file (see `kernel_runner`). What
  nbval can rerun is the restored notebook (`restored`, ``grade --write-restored``): the
  graders' visible tests, with the same verdicts.
- The score of a grader is all or nothing: the cell passed (points) or not (0). Partial
  credit is several grader cells sharing one exercise.
- Written answers (markdown cells tagged ``manual``) are not run: each is listed with the
  student's text, 0 of its points and "needs manual grading", until the instructor's
  points are merged (`manual_scores`).
- A grader that did not run (the kernel died, the batch's safety timeout) scores 0 with a
  message saying so, like a failed one: a submission "scores what passed".
- Each submission runs in its own kernel and sandbox (see `execute`, `sandbox`); the
  prepared notebooks (with the hidden tests) stay in a temporary folder outside every
  sandbox: the grading process sends their cells one by one, so no kernel can read them.
- A note on a restored read-only cell (edited, deleted) is added to the message of the
  next grader of the lab, the one that runs it, so it shows in that exercise's row.
- The kernels get the grading secret through ``config.env`` (``grade --secret``); the
  report records only whether it was the default (`ExecutionConfig.record`).
- A notebook whose lab has no grader cells is graded to 0 of 0 and listed with a warning,
  not a problem: placeholder labs exist while the course is being written.
- Budgets (see `budgets`): the file-size and cell-count limits are applied when the
  submissions are read (a problem, not graded); a cell that ran out of memory says so with
  the limit and its flag; remarks about a whole submission (its output was cut, it was
  upgraded from nbformat 3, another file claimed the same student) are its ``notes``,
  printed as warnings and shown in the gradebook.
- Messages about a submission never quote its contents (see `submissions`); its path,
  notes and student name pass `hygiene` first (no terminal escape reaches the
  console or the gradebook). A notebook whose run raised in the grading process is listed
  as not graded, with the reason, and the others are graded (`execute.CRASHED`).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .budgets import memory_message, procs_message
from .execute import CRASHED, CellOutcome, ExecutionConfig, run_notebooks
from .hygiene import printable
from .manual import PENDING, ManualCell, answer_of
from .restore import RestoreNote, restore_graders
from .sandbox import Sandbox, make_sandbox
from .submissions import SourceLab, SubmissionProblem, find_submissions, load_source_labs

__all__ = [
    "CellResult",
    "GradeConfig",
    "GradeReport",
    "GradeResult",
    "grade_submissions",
    "pending_result",
]

GradeConfig = ExecutionConfig  # the grading knobs are the execution knobs (per-cell timeout)


@dataclass(frozen=True)
class CellResult:
    """The score of one grader cell in one submission."""

    cell_id: str
    exercise: str
    points: float
    max_points: float
    passed: bool
    message: str  # why it failed, and/or what was restored; "" when it simply passed
    manual: bool = False  # a written answer, scored by hand (see `manual`)
    answer: str = ""  # the student's text of a written answer


@dataclass(frozen=True)
class GradeResult:
    """The graded cells of one submission."""

    student: str
    lab: str
    submission: str  # path as given
    cells: tuple[CellResult, ...]
    sha256: str = ""  # of the submitted file as graded
    notes: tuple[str, ...] = ()  # about the whole submission (budgets, upgrade, a dispute)

    @property
    def points(self) -> float:
        return sum(c.points for c in self.cells)

    @property
    def max_points(self) -> float:
        return sum(c.max_points for c in self.cells)

    def exercises(self) -> dict[str, tuple[float, float, str]]:
        """Per exercise, in lab order: (points, max, messages joined by ' | ')."""
        rows: dict[str, list] = {}
        for c in self.cells:
            row = rows.setdefault(c.exercise, [0.0, 0.0, []])
            row[0] += c.points
            row[1] += c.max_points
            if c.message:
                row[2].append(c.message)
        return {ex: (p, m, " | ".join(msgs)) for ex, (p, m, msgs) in rows.items()}


@dataclass(frozen=True)
class GradeReport:
    """Everything one `grade_submissions` call found."""

    results: tuple[GradeResult, ...]
    problems: tuple[SubmissionProblem, ...]
    warnings: tuple[str, ...] = ()
    config: ExecutionConfig = field(default_factory=ExecutionConfig)
    sources: tuple[tuple[str, str, str], ...] = ()  # (lab, path, sha256) of the source labs
    sandbox: str = ""  # the sandbox the kernels ran in ("bwrap", "rlimit")
    unenforced: tuple[str, ...] = ()  # budgets this machine could not enforce, one line each

    @property
    def ok(self) -> bool:
        """True when every input could be graded (scores do not matter here)."""
        return not self.problems

    def as_dict(self) -> dict:
        return {
            "config": self.config.record()
            | {"sandbox_used": self.sandbox, "budgets_not_enforced": list(self.unenforced)},
            "results": [
                asdict(r) | {"points": r.points, "max": r.max_points} for r in self.results
            ],
            "problems": [asdict(p) for p in self.problems],
            "warnings": list(self.warnings),
            "sources": [
                {"lab": lab, "path": path, "sha256": digest} for lab, path, digest in self.sources
            ],
        }


def _notes_per_grader(lab: SourceLab, notes: dict[str, RestoreNote]) -> dict[str, str]:
    """The restore notes to show per grader id: its own, then the read-only cells' it runs."""
    messages = {g.cell_id: [notes[g.cell_id].message] for g in lab.graders}
    for cell in lab.readonly:
        after = [g for g in lab.graders if g.index > cell.index] or list(lab.graders[-1:])
        if after and notes[cell.cell_id].message:
            messages[after[0].cell_id].append(notes[cell.cell_id].message)
    return {cell_id: "; ".join(m for m in msgs if m) for cell_id, msgs in messages.items()}


def _score(
    outcome: CellOutcome | None,
    points: float,
    note: str,
    memory_limit: int | None,
    max_procs: int | None = None,
) -> tuple[float, bool, str]:
    if outcome is None:
        message = "not run: the notebook stopped before this grader cell"
    elif outcome.passed:
        return points, True, note
    else:
        message = memory_message(outcome.message or f"grader cell {outcome.outcome}", memory_limit)
        message = procs_message(message, max_procs)
    return 0.0, False, f"{message}; {note}" if note else message


def pending_result(cell: ManualCell, answer: str) -> CellResult:
    """The gradebook entry of a written answer before the instructor has scored it."""
    message = PENDING if answer else f"{PENDING} (no answer: the cell is empty or missing)"
    return CellResult(
        cell.cell_id, cell.exercise, 0.0, cell.points, False, message, manual=True, answer=answer
    )


def sandbox_warnings(sandbox: Sandbox) -> list[str]:
    """What a report says about a sandbox weaker than bubblewrap."""
    if sandbox.kind == "bwrap":
        return []
    lines = [
        f"kernels ran in the '{sandbox.kind}' fallback sandbox: it hides neither the file "
        "system nor, without root, the grader's processes (install bubblewrap: "
        "apt-get install bubblewrap)"
    ]
    return lines + ([sandbox.warning] if sandbox.warning else [])


def grade_submissions(
    submissions: Sequence[Path | str],
    source: Path | str,
    config: ExecutionConfig | None = None,
    progress: bool = False,
    sandbox: Sandbox | None = None,
) -> GradeReport:
    """Grade `submissions` (notebooks or folders of them) against the labs of `source`,
    each in its own `sandbox` (default: ``make_sandbox(config.sandbox)``)."""
    import nbformat

    config = config or ExecutionConfig()
    sandbox = sandbox or make_sandbox(config.sandbox)
    labs = load_source_labs(source)
    found, problems = find_submissions(submissions, labs, config.max_bytes, config.max_cells)
    missing = sandbox.limits_missing(config.memory_limit, config.max_procs, config.disk_limit)
    if progress:  # the command line: say it once, before anything runs
        for line in missing:
            print(f"warning: {line}", file=sys.stderr)
    warnings = sandbox_warnings(sandbox)
    warnings += [
        f"{printable(s.path)}: lab '{s.lab}' has no grader cells; scored 0 of 0"
        for s in found
        if not labs[s.lab].graders
    ]
    warnings += [f"{printable(s.path)}: {printable(note)}" for s in found for note in s.notes]
    with tempfile.TemporaryDirectory(prefix="mlinfra-grade-") as tmp:
        prepared, notes, graded = [], [], []
        for k, sub in enumerate(found):
            path = Path(tmp) / f"{k:04d}" / f"{sub.lab}.ipynb"
            try:
                nb, note = restore_graders(sub.notebook, labs[sub.lab])
                path.parent.mkdir()
                nbformat.write(nb, str(path))
            # a malformed cell in a student's file must not stop the batch: report it
            except Exception as err:  # noqa: BLE001
                problems.append(
                    SubmissionProblem(
                        str(sub.path),
                        "cannot prepare the notebook for grading (a malformed "
                        f"cell: {type(err).__name__})",
                        sub.student,
                        sub.lab,
                        sub.sha256,
                    )
                )
                continue
            prepared.append(path.resolve())
            notes.append(note)
            graded.append(sub)
        texts = {  # per lab, once: the same for every submission of it
            name: {g.cell_id: g.judge_source for g in labs[name].graders}
            for name in {sub.lab for sub in graded}
        }
        outcomes = run_notebooks(
            prepared,
            config,
            sandbox=sandbox,
            judge_texts={path: texts[sub.lab] for path, sub in zip(prepared, graded, strict=True)},
            progress=(f"grading {len(prepared)} notebooks" if progress and prepared else None),
        )
    results = []
    for sub, path, note in zip(graded, prepared, notes, strict=True):
        ran = outcomes.get(path, {})
        if CRASHED in ran:  # not graded, with the reason; the rest of the batch is
            problems.append(
                SubmissionProblem(
                    str(sub.path),
                    f"{ran[CRASHED].message}; not graded, the other submissions were",
                    sub.student,
                    sub.lab,
                    sub.sha256,
                )
            )
            continue
        cells = []
        messages = _notes_per_grader(labs[sub.lab], note)
        for g in labs[sub.lab].graders:
            points, passed, message = _score(
                ran.get(g.cell_id),
                g.points,
                messages[g.cell_id],
                config.memory_limit,
                config.max_procs,
            )
            cells.append(CellResult(g.cell_id, g.exercise, points, g.points, passed, message))
        cells += [pending_result(m, answer_of(sub.notebook, m)) for m in labs[sub.lab].manual]
        budget_notes = [o.message for o in ran.values() if o.outcome == "note"]
        warnings += [f"{printable(sub.path)}: {note}" for note in budget_notes]
        results.append(
            GradeResult(
                sub.student,
                sub.lab,
                printable(sub.path),
                tuple(cells),
                sub.sha256,
                tuple(printable(n) for n in (*sub.notes, *budget_notes)),
            )
        )
    sources = tuple((lab.name, str(lab.path), lab.sha256) for lab in labs.values())
    return GradeReport(
        tuple(results),
        tuple(problems),
        tuple(warnings),
        config,
        sources,
        sandbox.kind,
        tuple(missing),
    )
