"""The ``grade`` flags of the instructor's journey after grading: regrades, late policy,
feedback, exports and the class summary.

Contract: `add_book_flags(grade_parser)` adds the flags; `grade_run(args, config, secret)`
grades into the gradebook of ``--out`` (`regrade`), `views_run(args, secret)` changes or
rewrites a gradebook without grading (``grade --out GRADEBOOK_DIR`` with only these flags),
`manual_run` and `merge_run` store hand-graded points and merged chunks in it; each prints
what it did and returns the exit status (1 when an input of this run was not graded).
`wants_views(args)` tells whether a command line asks for any of these outputs.

Design decisions:
- Every output is written after the database and its views are committed, from the same
  report, so a feedback file or an export never shows a score the gradebook does not hold.
- Flags parse before anything runs (a bad ``--due`` costs no grading).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from mlinfra_lab.errors import CommandError

if TYPE_CHECKING:
    from .execute import ExecutionConfig
    from .grade import GradeReport
    from .views import BookSession

__all__ = ["BOOK_EPILOG", "add_book_flags", "grade_run", "manual_run", "merge_run", "views_run", "wants_views"]  # fmt: skip

EXPORT_FORMATS = ("canvas", "moodle", "csv")  # == export.FORMATS (checked by the tests)

BOOK_EPILOG = """\
The gradebook persists (GRADEBOOK_DIR/gradebook.sqlite, sealed in the manifest; the CSV and
JSON files are views of it, rewritten after every change):
  Grading into a folder that holds a gradebook grades only what is new: a student's lab it
  has not graded, or whose file changed since (a late or fixed resubmission); every other
  row is kept. --student NAME (repeatable, or a comma list) regrades exactly those
  students; --force regrades every submission found (needed after a source lab changed).
  Points and comments entered by hand (--manual) are kept apart from the machine's scores
  and survive every regrade, --force included; each score and entry records who (--by,
  default your login name) and when. The folder is verified before any change: an edited
  file, another secret, or a manual.csv filled in but not merged is refused by name.

Late submissions (the policy; the penalty is a row 'late penalty' of its own):
  Each submission's time is its file's modification time, or --submitted-at WHEN.
  --due [LAB=]WHEN sets a lab's deadline (ISO 8601; no zone means UTC; without LAB= every
  lab of the run). Every day or part of a day past the deadline (plus --grace seconds)
  costs --late-penalty percent (default 10) of the points earned in that lab, written
  answers included, capped at --late-cap percent (default 100). A new --due or rate
  re-prices every stored submission without regrading ('grade --out DIR --due ...').

After grading, or alone with --out (no submissions):
  --feedback             GRADEBOOK_DIR/feedback/STUDENT/LAB.md and .html per student
  --release-feedback D   each student's reports into D/STUDENT/LAB-feedback.md and .html
                         (D = the submissions folder of a folder-per-student layout)
  --export FORMAT        GRADEBOOK_DIR/export-FORMAT.csv, one row per student and a total
                         per lab: canvas (Canvas gradebook import), moodle (Moodle's CSV
                         grade import) or csv; --roster CSV fills in the LMS identifiers
  --summary              GRADEBOOK_DIR/summary.txt and summary.png (histograms)
"""


def _students(values: list[str] | None) -> frozenset[str]:
    return frozenset(n.strip() for v in values or () for n in v.split(",") if n.strip())


def add_book_flags(grade: argparse.ArgumentParser) -> None:
    """Add the flags of `BOOK_EPILOG` to the ``grade`` parser."""
    grade.add_argument(
        "--student",
        action="append",
        metavar="NAME",
        help="regrade only this student (repeatable, or NAME,NAME); the rest is kept",
    )
    grade.add_argument(
        "--force", action="store_true", help="regrade every submission found, changed or not"
    )
    grade.add_argument(
        "--by", metavar="NAME", help="who is grading, for the record (default: login name)"
    )
    grade.add_argument(
        "--submitted-at",
        metavar="WHEN",
        help="the submission time of every file of this run (default: the file's mtime)",
    )
    grade.add_argument(
        "--due", action="append", metavar="[LAB=]WHEN", help="a lab's deadline (ISO 8601)"
    )
    grade.add_argument(
        "--late-penalty",
        type=float,
        metavar="PCT",
        help="percent of the points earned lost per day or part of a day late (default 10)",
    )
    grade.add_argument(
        "--late-cap", type=float, metavar="PCT", help="the most a late lab loses (default 100)"
    )
    grade.add_argument(
        "--grace", type=float, metavar="SECONDS", help="time after --due that is not late"
    )
    grade.add_argument(
        "--feedback", action="store_true", help="write each student's feedback report"
    )
    grade.add_argument(
        "--release-feedback",
        metavar="DEST",
        help="write each student's feedback into DEST/STUDENT/",
    )
    grade.add_argument(
        "--export",
        action="append",
        choices=EXPORT_FORMATS,
        help="write an LMS import file: canvas, moodle or csv (repeatable)",
    )
    grade.add_argument("--roster", metavar="CSV", help="student -> LMS identifiers, for --export")
    grade.add_argument(
        "--canvas-column",
        action="append",
        metavar="LAB=TITLE (ID)",
        help="the Canvas export's column for LAB: an existing assignment's 'Title (id)', so "
        "the import updates it instead of creating one (repeatable)",
    )
    grade.add_argument(
        "--summary", action="store_true", help="write the class summary (text and histograms)"
    )


def wants_views(args: argparse.Namespace) -> bool:
    """True when the command line asks for an output or a policy change of this module."""
    return bool(
        args.feedback or args.release_feedback or args.export or args.summary or args.due
        or any(v is not None for v in (args.late_penalty, args.late_cap, args.grace))
    )  # fmt: skip


def _policy_flags(args: argparse.Namespace) -> list[tuple[str | None, str]]:
    from .late import parse_due, parse_time

    for flag, value in (("--late-penalty", args.late_penalty), ("--late-cap", args.late_cap),
                        ("--grace", args.grace)):  # fmt: skip
        if value is not None and value < 0:
            raise CommandError(f"{flag} must be 0 or more")
    if args.submitted_at:
        parse_time(args.submitted_at, "--submitted-at")
    return [parse_due(d) for d in args.due or ()]


def _outputs(args: argparse.Namespace, book: BookSession, report: GradeReport) -> None:
    from pathlib import Path

    assert book.state is not None
    times = {(s.student, s.lab): s.submitted_at for s in book.state.submissions}
    out = Path(args.out)
    sealed: list[Path] = []  # what this command wrote into the gradebook folder
    if args.feedback or args.release_feedback:
        from .feedback import refused, release_feedback, write_feedback

        not_graded = refused(report)

        for flag, (written, skipped) in (
            (
                "--feedback",
                write_feedback(report, book.comments, out, times) if args.feedback else ([], []),
            ),  # fmt: skip
            (
                "--release-feedback",
                release_feedback(report, book.comments, args.release_feedback, times)
                if args.release_feedback
                else ([], []),
            ),  # fmt: skip
        ):
            if flag == "--feedback":
                sealed += written
            if written:
                print(f"{flag}: {len(written) // 2} reports (Markdown and HTML) under {written[0].parent.parent}")  # fmt: skip
                for student, lab in sorted(not_graded):
                    print(f"{flag}: {student!r} {lab}: not graded, the report says why")
            for student, why in skipped:
                print(f"warning: {flag}: {student!r} skipped: {why}", file=sys.stderr)
            if skipped:
                print(f"{flag}: {len(skipped)} skipped (listed above); the others were written")
    if args.export:
        from .export import canvas_columns, read_roster, write_export

        roster = read_roster(args.roster) if args.roster else None
        columns = canvas_columns(args.canvas_column or ())
        for fmt in args.export:
            sealed.append(write_export(report, fmt, out / f"export-{fmt}.csv", roster, columns))
            print(f"--export {fmt}: {sealed[-1]}")
    if args.summary:
        from .class_summary import write_summary

        summary = write_summary(report, out)
        sealed += summary
        print("--summary: " + " and ".join(str(p) for p in summary))
    if sealed:
        from .manifest import seal_outputs

        seal_outputs(out, book.secret, sealed)


def grade_run(args: argparse.Namespace, config: ExecutionConfig, secret: str) -> GradeReport:
    """Grade into ``--out`` (see `regrade`), set any policy, write the outputs asked for;
    the report of what this run graded (its results as the gradebook now holds them)."""
    from .regrade import RegradeOptions, grade_into_book, set_policies
    from .views import BookSession

    dues = _policy_flags(args)
    by = args.by or getpass.getuser()
    options = RegradeOptions(_students(args.student), args.force, args.submitted_at, by, True)
    with BookSession(args.out, secret, create=True) as book:
        run = grade_into_book(book, args.submissions, args.source, config, options)
        if dues or any(v is not None for v in (args.late_penalty, args.late_cap, args.grace)):
            set_policies(book, dues, run.labs, pct_per_day=args.late_penalty,
                         cap_pct=args.late_cap, grace_s=args.grace, by=by)  # fmt: skip
        report = book.commit()
        _outputs(args, book, report)
    if run.kept:
        print(
            f"kept {len(run.kept)} submissions graded before and unchanged since "
            "(--student NAME or --force to regrade them)"
        )
    stored = {(r.student, r.lab): r for r in report.results}  # manual points, late penalty
    graded = tuple(stored.get((r.student, r.lab), r) for r in run.report.results)
    return replace(run.report, results=graded)


def views_run(args: argparse.Namespace, secret: str) -> int:
    """Change the policy of, or write outputs from, the gradebook of ``--out``."""
    from .regrade import set_policies
    from .views import BookSession

    dues = _policy_flags(args)
    by = args.by or getpass.getuser()
    with BookSession(args.out, secret) as book:
        if dues or any(v is not None for v in (args.late_penalty, args.late_cap, args.grace)):
            for p in set_policies(book, dues, set(), pct_per_day=args.late_penalty,
                                  cap_pct=args.late_cap, grace_s=args.grace, by=by):  # fmt: skip
                print(f"{p.lab}: due {p.due}, -{p.pct_per_day:g}% a day late, at most -{p.cap_pct:g}%")  # fmt: skip
        report = book.commit()
        _outputs(args, book, report)
    print(f"gradebook: {len(report.results)} graded submissions in {args.out}")
    return 0


def manual_run(args: argparse.Namespace, secret: str) -> int:
    """``grade --manual SCORES.csv --out GRADEBOOK_DIR`` (then any outputs asked for)."""
    from .manual import PENDING
    from .manual_scores import merge_manual_scores

    report, merged = merge_manual_scores(args.out, args.manual, secret, by=args.by)
    pending = sum(
        c.manual and c.message.startswith(PENDING) for r in report.results for c in r.cells
    )
    print(
        f"merged {merged} hand-graded answers and comments from {args.manual}; {pending} "
        f"answers still pending -> {args.out}/gradebook.csv"
    )
    if wants_views(args):
        views_run(args, secret)
    return 0


def merge_run(args: argparse.Namespace, secret: str) -> int:
    """``grade --merge CHUNK_DIR... --out GRADEBOOK_DIR``: the chunks into the gradebook."""
    from .merge import merge_gradebooks
    from .views import BookSession, store_report

    report = merge_gradebooks(args.merge, secret)
    with BookSession(args.out, secret, create=True) as book:
        store_report(book.db, report, command="merge", by=args.by or getpass.getuser())
        merged = book.commit()
        if wants_views(args):
            _outputs(args, book, merged)
    print(
        f"merged {len(args.merge)} gradebooks: {len(report.results)} graded submissions, "
        f"{len(report.problems)} not graded -> {args.out}/gradebook.csv"
    )
    return 0 if report.ok else 1
