"""Grade into a gradebook that persists: only who needs it, keeping everything else.

Contract: `grade_into_book(book, submissions, source, config, options)` finds the
submissions, picks the ones to grade (`RegradeOptions`: the named students, every one with
``force``, else those new or changed since they were graded), grades them with
`grade.grade_submissions`, and stores their results, problems and submission times in the
open `views.BookSession` `book`; every other row of the database, and every manual entry,
is kept. It returns a `RegradeRun` saying what it graded and what it kept.

Design decisions:
- Without ``--student`` or ``--force`` a run grades what is new: a (student, lab) the
  gradebook has not graded, or whose file's SHA-256 differs from the one graded (a fixed or
  late resubmission). Re-running the same command after a late submission arrives grades
  that one notebook.
- Which student a file is stays decided by the layout of the folders given (see
  `submissions`). To grade only some of them, their files are copied into a temporary
  ``STUDENT/LAB.ipynb`` tree (the same bytes, so the same SHA-256) and that tree is graded,
  so that naming cannot change between the two readings; the results are then put back
  under the original paths.
- A source lab whose SHA-256 differs from the one the gradebook was graded against is
  refused unless ``--force`` (a fixed grader means every submission of that lab is
  regraded: rows graded against different hidden tests are not comparable).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .execute import ExecutionConfig
from .grade import GradeReport, grade_submissions
from .gradebook_db import Policy
from .late import DEFAULT_CAP_PCT, DEFAULT_PCT_PER_DAY, submission_time
from .submissions import Submission, find_submissions, load_source_labs
from .views import BookError, BookSession, store_report

__all__ = ["RegradeOptions", "RegradeRun", "grade_into_book", "set_policies"]


@dataclass(frozen=True)
class RegradeOptions:
    """What a ``grade`` run into an existing gradebook grades and records."""

    students: frozenset[str] = frozenset()  # regrade exactly these (empty: see `force`)
    force: bool = False  # regrade every submission found
    submitted_at: str | None = None  # the submission time of every file (default: mtime)
    by: str = ""  # who runs it (the login name)
    progress: bool = False


@dataclass
class RegradeRun:
    """What one run did."""

    report: GradeReport  # of what it graded (students as the layout names them)
    kept: list[tuple[str, str]] = field(default_factory=list)  # unchanged, not regraded
    labs: set[str] = field(default_factory=set)  # labs of the submissions found


def _select(
    found: list[Submission],
    graded: dict[tuple[str, str], str],
    options: RegradeOptions,
    refused: set[str],
) -> tuple[list[Submission], list[tuple[str, str]]]:
    if options.students:
        named = {s.student for s in found}
        missing = sorted(options.students - named - refused)  # refused: reported, not lost
        if missing:
            raise BookError(
                f"--student {', '.join(missing)}: no gradable submission of "
                f"{'them' if len(missing) > 1 else 'this student'} among the files given "
                f"(students found: {', '.join(sorted(named)[:10]) or 'none'})"
            )
        return [s for s in found if s.student in options.students], []
    if options.force:
        return list(found), []
    pick = [s for s in found if graded.get((s.student, s.lab)) != s.sha256]
    return pick, [(s.student, s.lab) for s in found if s not in pick]


def _grade_copies(
    chosen: list[Submission], source: Path | str, config: ExecutionConfig, progress: bool
) -> GradeReport:
    """Grade `chosen` from a ``STUDENT/LAB.ipynb`` copy tree; paths and names put back."""
    with tempfile.TemporaryDirectory(prefix="mlinfra-regrade-") as tmp:
        back: dict[str, Submission] = {}
        for picked in chosen:
            copy = Path(tmp) / picked.student / f"{picked.lab}.ipynb"
            copy.parent.mkdir(exist_ok=True)
            shutil.copyfile(picked.path, copy, follow_symlinks=False)
            back[str(copy)] = picked
        report = grade_submissions([tmp], source, config, progress=progress)

    def restore(text: str) -> str:
        for copy, sub in back.items():
            text = text.replace(copy, str(sub.path))
        return text

    results = []
    for r in report.results:
        sub = back.get(r.submission)
        if sub is None:
            continue
        notes = (*sub.notes, *(restore(n) for n in r.notes if n not in sub.notes))
        results.append(replace(r, student=sub.student, submission=str(sub.path), notes=notes))
    problems = [
        replace(p, path=str(back[p.path].path), student=back[p.path].student)
        if p.path in back
        else replace(p, path=restore(p.path))
        for p in report.problems
    ]
    return replace(
        report,
        results=tuple(results),
        problems=tuple(problems),
        warnings=tuple(restore(w) for w in report.warnings),
    )


def grade_into_book(
    book: BookSession,
    submissions: Sequence[Path | str],
    source: Path | str,
    config: ExecutionConfig,
    options: RegradeOptions,
) -> RegradeRun:
    """Grade into `book` (see the module docstring)."""
    labs = load_source_labs(source)
    stored = book.db.source_digests()
    changed = sorted(
        name for name, lab in labs.items() if name in stored and stored[name] != lab.sha256
    )
    found, problems = find_submissions(submissions, labs, config.max_bytes, config.max_cells)
    if changed and not options.force:
        raise BookError(
            f"source lab {', '.join(changed)} changed since this gradebook was graded (its "
            "SHA-256 differs): regrade every submission with --force, or grade into a new --out"
        )
    chosen, kept = _select(found, book.db.graded(), options, {p.student for p in problems})
    if options.students:
        problems = [p for p in problems if p.student in options.students]
    if not chosen:
        report = GradeReport((), tuple(problems), config=config)
    elif len(chosen) == len(found) and not options.students:
        report = grade_submissions(submissions, source, config, progress=options.progress)
    else:
        report = _grade_copies(chosen, source, config, options.progress)
        seen = {p.path for p in report.problems}
        report = replace(report, problems=(*report.problems, *(p for p in problems if p.path not in seen)))  # fmt: skip
    report = replace(
        report, sources=tuple((n, str(lab.path), lab.sha256) for n, lab in labs.items())
    )
    times = {(r.student, r.lab): submission_time(r.submission, options.submitted_at) for r in report.results}  # fmt: skip
    store_report(book.db, report, command="grade", by=options.by, submitted_at=times)
    return RegradeRun(report, kept, {s.lab for s in found} | {p.lab for p in problems if p.lab})


def set_policies(
    book: BookSession,
    dues: Sequence[tuple[str | None, str]],
    labs: set[str],
    *,
    pct_per_day: float | None,
    cap_pct: float | None,
    grace_s: float | None,
    by: str,
) -> list[Policy]:
    """Store the deadline of each ``--due`` (a lab's, or of every lab in `labs`, else of
    every lab the gradebook holds) with the penalty flags; a flag left out keeps the lab's
    stored value (else the default). `BookError` when a ``--due`` names an unknown lab."""
    state = book.db.state()
    known = {s.lab for s in state.submissions} | labs
    if not dues and any(v is not None for v in (pct_per_day, cap_pct, grace_s)):
        dues = [(lab, p.due) for lab, p in state.policies.items()]
        if not dues:
            raise BookError("--late-penalty, --late-cap and --grace need a --due")
    stored = []
    for lab, due in dues:
        targets = [lab] if lab else sorted(labs or known)
        if lab and lab not in known:
            raise BookError(f"--due {lab}=...: no lab {lab!r} in this gradebook or run")
        if not targets:
            raise BookError("--due: no lab to set it for; name one as --due LAB=WHEN")
        for name in targets:
            old = state.policies.get(name)
            policy = Policy(
                name,
                due,
                pct_per_day
                if pct_per_day is not None
                else (old.pct_per_day if old else DEFAULT_PCT_PER_DAY),  # fmt: skip
                cap_pct if cap_pct is not None else (old.cap_pct if old else DEFAULT_CAP_PCT),
                grace_s if grace_s is not None else (old.grace_s if old else 0.0),
            )
            book.db.set_policy(policy, by=by)
            stored.append(policy)
    return stored
