"""Command-line entry points of `mlinfra_lab.grading`: ``release``, ``grade``, ``validate``.

Contract: `register(commands, bench)` adds the three instructor commands to ``mlinfra-lab``;
each handler returns 0 on success, 1 when it finished but found problems (an input that could
not be graded, a grader that cannot fail), and raises `CommandError` for a usage error.
Heavy modules (nbformat, the grading package) are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mlinfra_lab.cli import CommandError

if TYPE_CHECKING:
    from .execute import ExecutionConfig

GRADE_EPILOG = """\
Which lab and which student:
  The lab is read from the notebook's metadata (mlinfra.lab, written by 'mlinfra-lab
  release'); if a student's tool dropped it, the file name must contain the lab name.
  The student is the file name without the lab name: alice.ipynb and
  alice_00_warmup.ipynb are both 'alice'. A file named just after the lab takes its
  folder's name, so submissions/alice/00_warmup.ipynb is 'alice' (a folder per student).
  A folder argument is searched recursively for *.ipynb.

What is graded:
  Every grader cell of the source lab is restored by cell id (visible and hidden tests;
  an edited or deleted grader changes nothing), the notebook runs under
  'pytest --nbval-lax', and each grader cell scores its points if it ran without an
  exception, else 0 with its assertion message. A crashing or hanging cell (see
  --timeout) scores what passed; the rest of the batch is still graded.

Output: GRADEBOOK_DIR/gradebook.csv (student, lab, exercise, points, max, message) and
gradebook.json (plus per-cell detail). Inputs that cannot be graded are printed one line
each and make the exit status 1 after the rest is graded.
"""


def _execution_config(args: argparse.Namespace) -> ExecutionConfig:
    """The `ExecutionConfig` of ``--timeout`` and ``--jobs``; `CommandError` if out of range."""
    from .execute import ExecutionConfig

    if args.timeout <= 0:
        raise CommandError("--timeout must be a positive number of seconds")
    if args.jobs < 1:
        raise CommandError("--jobs must be at least 1")
    return ExecutionConfig(cell_timeout=args.timeout, jobs=args.jobs)


def _release(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .errors import GradingError
    from .release import release_dir, release_notebook

    src, out = Path(args.src), Path(args.out)
    try:
        written = (release_dir(src, out) if src.is_dir()
                   else [release_notebook(src, out if out.suffix else out / src.name)])
    except GradingError as err:
        raise CommandError(str(err)) from err
    for path in written:
        print(f"released {path}")
    return 0


def _grade(args: argparse.Namespace) -> int:
    from .errors import GradingError
    from .grade import grade_submissions
    from .gradebook import write_gradebook

    config = _execution_config(args)
    try:
        report = grade_submissions(args.submissions, args.source, config, progress=True)
    except GradingError as err:
        raise CommandError(str(err)) from err
    csv_path, json_path = write_gradebook(report, args.out)
    for result in report.results:
        print(f"{result.student:20s} {result.lab:24s} {result.points:g} / {result.max_points:g}")
    for line in report.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for problem in report.problems:
        print(f"not graded: {problem}", file=sys.stderr)
    print(f"gradebook: {csv_path} and {json_path}")
    return 0 if report.ok else 1


def _validate(args: argparse.Namespace) -> int:
    from .errors import GradingError
    from .validate import validate_labs

    config = _execution_config(args)
    try:
        report = validate_labs(args.labs, config, progress=True)
    except GradingError as err:
        raise CommandError(str(err)) from err
    for line in report.checked:
        print(f"ok: {line}")
    for line in report.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for problem in report.problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 0 if report.ok else 1


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``release``, ``grade`` and ``validate`` to the ``mlinfra-lab`` command."""
    release = commands.add_parser(
        "release", help="write student versions of labs (solutions and hidden tests removed)",
        description="Write the student version of a lab notebook, or of every *.ipynb of a "
        "folder: solution spans become 'raise NotImplementedError(...)', hidden-test spans "
        "are removed, outputs are cleared, grader cells keep their ids and metadata plus a "
        "checksum of the source grader, and the notebook records its lab name.")
    release.add_argument("src", metavar="SRC", help="a lab notebook or a folder of them")
    release.add_argument("out", metavar="OUT", help="the folder to write into (or, for one "
                         "notebook, a .ipynb file name)")
    release.set_defaults(func=_release)

    grade = commands.add_parser(
        "grade", help="grade submitted lab notebooks with nbval; write a gradebook",
        description="Grade student notebooks against the instructor source labs.",
        epilog=GRADE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    grade.add_argument("submissions", metavar="SUBMISSION", nargs="+",
                       help="submitted notebooks, or folders of them")
    grade.add_argument("--source", required=True, metavar="LABS",
                       help="the instructor labs: a folder (labs/) or one notebook")
    grade.add_argument("--out", required=True, metavar="GRADEBOOK_DIR",
                       help="folder for gradebook.csv and gradebook.json")
    grade.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                       help="per-cell time limit; a cell running longer is interrupted "
                       "and fails (default: 60)")
    grade.add_argument("--jobs", type=int, default=1, metavar="N",
                       help="notebooks run side by side (default: 1; more helps only with "
                       "spare cores)")
    grade.set_defaults(func=_grade)

    validate = commands.add_parser(
        "validate", help="check every grader passes on the source and fails on the release",
        description="For every lab with grader cells, run the source and its released "
        "version under nbval: each grader cell must pass on the source and fail on the "
        "release. Exits 1 naming the lab, exercise and cell id of any grader that fails on "
        "the source or cannot fail. Labs without grader cells only get a warning.")
    validate.add_argument("labs", metavar="LABS_DIR", help="a folder of labs, or one lab")
    validate.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                          help="per-cell time limit (default: 300)")
    validate.add_argument("--jobs", type=int, default=1, metavar="N",
                          help="notebooks run side by side (default: 1)")
    validate.set_defaults(func=_validate)
