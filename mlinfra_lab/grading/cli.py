"""Command-line entry points of `mlinfra_lab.grading`: ``release``, ``grade``, ``validate``.

Contract: `register(commands, bench)` adds the instructor commands to ``mlinfra-lab``
(``collect``'s parser and handler are `cli_collect`'s; and ``bench grading``, see `bench`; the flags of regrades, late policy, feedback and
exports, and their handlers, are `cli_book`'s);
each handler returns 0 on success, 1 when it finished but found problems (an input that could
not be graded, a grader that cannot fail, an edited gradebook for ``grade --verify``), raises
`CommandError` for a usage error and lets a `GradingError` reach `mlinfra_lab.cli.main`, which
prints it on one line.
Heavy modules (nbformat, the grading package) are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mlinfra_lab.errors import CommandError

from .cli_book import BOOK_EPILOG, add_book_flags
from .cli_collect import add_collect_command
from .sandbox import SANDBOX_KINDS

if TYPE_CHECKING:
    from .execute import ExecutionConfig

# the budgets' defaults, as the flags give them (see `budgets`; kept here so --help stays
# instant: the two are checked equal by the tests)
DEFAULT_MEMORY_GIB = 4.0
DEFAULT_NOTEBOOK_S = 600.0
DEFAULT_MAX_MB = 20.0
DEFAULT_MAX_CELLS = 500
DEFAULT_MAX_PROCS = 512
DEFAULT_DISK_GIB = 1.0

GRADE_EPILOG = """\
Which lab and which student:
  The lab is read from the notebook's metadata (mlinfra.lab, written by 'mlinfra-lab
  release'); if a student's tool dropped it, the file name must contain the lab name.
  Under a folder argument, a notebook in a sub-folder belongs to that collection folder:
  submissions/alice/00_warmup.ipynb is 'alice' (a folder per student); if its file name
  names someone else (submissions/bob/alice_00_warmup.ipynb) it is reported, not graded.
  A notebook directly in a folder argument, or given as a file, is named by the file name
  without the lab name: alice.ipynb and alice_00_warmup.ipynb are both 'alice' (a file
  named just after the lab takes its folder's name). Two files for one student and lab:
  one is graded with a note naming the other, which is reported. A folder argument is
  searched recursively for *.ipynb. A Canvas or Moodle download: 'mlinfra-lab collect'
  first (identity from the LMS's ids or a roster; see 'mlinfra-lab collect --help').

Inputs that are refused (one line each, the rest is graded):
  symbolic links (never followed, also inside folders), anything that is not a regular
  file, a copy of a source lab, a file over --max-size or a notebook over --max-cells.
  Messages never quote a file's contents. Notebooks older than nbformat 4 are upgraded
  (their grader cells found by the release's checksums) or reported.

What is graded:
  Every grader cell and every cell tagged 'readonly' of the source lab is restored by
  cell id (visible and hidden tests; an edited or deleted one changes nothing), the
  notebook runs cell by cell in a fresh kernel, and each grader cell scores its points if
  the kernel replied 'ok' and broadcast no error, else 0 with its last exception line.
  Before each grader cell, IPython's error handling, transformers and hooks and Python's
  builtins are put back as they were before the notebook ran. A crashing or hanging cell
  (see --timeout) scores what passed; the rest of the batch is still graded.

Reproducing a verdict (--write-restored DIR; a dispute, an appeal):
  Grading keeps nbval's rule for a cell (pytest --nbval-lax: a cell that raises fails, no
  output is compared) but drives each kernel itself over jupyter's protocol, so that it
  reads both the reply and the broadcast errors, runs the judge and holds the budgets, with
  no outcome passing through a file the kernel could write. DIR/STUDENT/LAB.ipynb is the
  submission with the source graders put back, their visible tests only (no hidden test,
  no seed, no secret). 'pytest --nbval-lax --nbval-cell-timeout=600 DIR/STUDENT/LAB.ipynb'
  reruns it in a plain kernel: a grader that scored passes there; one that fails there
  scored 0 with the same message; one that passes there and scored 0 failed what is not
  there (a hidden test, the judge, the forbid guard) or a budget.

The judge (on unless --no-judge): the student's kernel is the student's interpreter, where
  a function can patch numpy while it runs or return an object whose comparisons always
  agree. So each grader runs a second time, in a kernel of its own that never runs a line
  of the submission: the values the student's functions returned to the grader in the
  first kernel (numbers, strings, containers, arrays, tensors, and the course's own
  dataclasses; nothing else crosses) are replayed to the same grader code there. A
  grader scores only if it passes in both kernels; a failure only the judge saw reads
  "judged outside your kernel: ...". It costs a second kernel per notebook and a second
  run of each grader's own code.

The sandbox (--sandbox; each notebook gets its own, and nothing of it survives):
  bwrap (bubblewrap, apt-get install bubblewrap; what 'auto' picks where it works): the
  kernel sees the operating system, this Python and the mlinfra_lab package read-only,
  and an empty working folder: not --source, not the other submissions, not the
  gradebook; its own processes only; no network; as root it runs as a throwaway user.
  rlimit (the fallback, with a warning): resource limits, a fresh folder, a new session
  and, as root where that user can run this Python, a throwaway user; it hides no files
  and, without root, not the grader's processes. The book's page for instructors says
  what each stops and what it does not.

The course's own implementations:
  A grader cell whose metadata lists 'forbid' (the course's own implementations of the
  answer, e.g. ["mlinfra_lab.attention.online_softmax"]) runs under a guard: if anything
  it runs calls a listed function, by any name, the cell fails with
  "ForbiddenCallError: exercise X: your code called ...; write it yourself".

The secret:
  Hidden tests draw their inputs from grading_rng/grading_seed, seeded by the grading
  secret: --secret S, else $MLINFRA_GRADE_SECRET, else the public default that release and
  validate use. Grade with your own secret (prefer the environment variable: a command
  line shows in the process list and the shell history), so that answers hard-coded
  from reading the hidden tests fail. The secret never reaches a kernel: the grading
  process derives one seed per exercise from it and passes only those values; it is
  never printed, and the gradebook records only whether it was the default.

Budgets (each overrun is a message in the gradebook; the batch goes on):
  --memory-limit: the resident memory of all of a sandbox's processes together (a
  control group: memfd, shared-memory and tmpfs pages counted; where none can be made,
  the grader samples the same every 50 ms and kills the sandbox past it), and the
  address space of each kernel (RLIMIT_AS). Past it the cell fails and the sandbox
  stops (0 for the cells it did not run). A kernel that imports torch and triton reserves about 1.7 GB
  of address space (2 cores; more with more cores). The default is 4 GiB, and off on a
  machine with an NVIDIA GPU (CUDA reserves address space it never uses): there, limit
  memory with the batch scheduler. --max-procs: processes and threads of one sandbox
  (pids.max; without control groups, RLIMIT_NPROC on its throwaway user when run as root). --disk-limit: size of its tmpfs home, /tmp and /dev/shm (bubblewrap as
  root). --notebook-timeout: a notebook's later cells fail once it has run that long
  (the running cell is bounded by --timeout). Each cell's output past 1 MiB is dropped
  (grading keeps no outputs). A budget this machine cannot hold (no writable control
  group, say) is named once before grading starts and recorded in the gradebook.

At scale: split the submissions into chunks, grade each chunk as its own job (one
machine: --jobs N; a cluster: one batch-scheduler job per chunk, same --source and
secret), then 'grade --merge CHUNK_DIR... --out GRADEBOOK_DIR' verifies every chunk
and stores them in one gradebook with a fresh manifest (into an existing gradebook: the
chunks' students are replaced, everyone else and every manual entry is kept).

Written answers (markdown cells tagged 'manual' in the source labs) are not run: grading
lists each in GRADEBOOK_DIR/manual.csv with the student's text and empty points and
comment columns. Fill them in, then 'grade --manual manual.csv --out GRADEBOOK_DIR' merges
them (verified first; empty points stay pending, so you can merge more than once; a row
naming an auto-graded cell_id may carry a comment, never points).

Output: GRADEBOOK_DIR/gradebook.csv (student, lab, exercise, points, max, message,
comment; text that a spreadsheet would run as a formula starts with '), gradebook.json
(plus per-cell detail and who graded or entered what, when), gradebook.sqlite (the
record the others are views of) and manifest.json (SHA-256 of them, of every submission
as graded and of the
source labs, sealed with an HMAC keyed by the grading secret; with the public default
secret it is only checksummed). Each file is replaced atomically. 'grade --verify
GRADEBOOK_DIR' (with the same secret) checks them: exit 1 naming any edited file, 0 when
intact. Inputs that cannot be graded are printed one line each and make the exit status 1
after the rest is graded.
"""


def _execution_config(args: argparse.Namespace, default_secret: str) -> ExecutionConfig:
    """The `ExecutionConfig` of ``--timeout``, ``--jobs`` and ``--secret`` (else
    `default_secret`); `CommandError` if one is out of range."""
    from .execute import ExecutionConfig

    if args.timeout <= 0:
        raise CommandError("--timeout must be a positive number of seconds")
    if args.jobs < 1:
        raise CommandError("--jobs must be at least 1")
    if args.secret is not None and not args.secret:
        raise CommandError("--secret must not be empty")
    config = ExecutionConfig(
        cell_timeout=args.timeout, jobs=args.jobs, sandbox=args.sandbox, judge=args.judge
    )
    return config.with_secret(args.secret or default_secret)


def _release(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .release import release_dir, release_notebook

    src, out = Path(args.src), Path(args.out)
    written = (
        release_dir(src, out)
        if src.is_dir()
        else [release_notebook(src, out if out.suffix else out / src.name)]
    )
    for path in written:
        print(f"released {path}")
    return 0


def _budgets(args: argparse.Namespace, config: ExecutionConfig) -> ExecutionConfig:
    """`config` with the budgets of the ``grade`` flags (0 switches one off)."""
    from dataclasses import replace

    from .budgets import default_memory_limit

    if args.memory_limit is None:  # 4 GiB, or no limit where CUDA needs the address space
        limit = default_memory_limit()
        args.memory_limit = (limit or 0) / (1 << 30)
        if limit is None:
            print(
                "warning: an NVIDIA GPU is present, so the kernels get no address-space "
                "limit (CUDA reserves more than it uses); limit memory with cgroups or "
                "your batch scheduler, or pass --memory-limit GIB",
                file=sys.stderr,
            )
    for flag, value in (
        ("--memory-limit", args.memory_limit),
        ("--max-size", args.max_size),
        ("--notebook-timeout", args.notebook_timeout),
        ("--max-cells", args.max_cells),
        ("--max-procs", args.max_procs),
        ("--disk-limit", args.disk_limit),
    ):
        if value < 0:
            raise CommandError(f"{flag} must be 0 (no limit) or a positive number")
    if 0 < args.memory_limit < 0.5:
        raise CommandError(
            "--memory-limit must be at least 0.5 (GiB): a Python kernel "
            "alone reserves several hundred MB of address space"
        )
    return replace(
        config,
        memory_limit=int(args.memory_limit * (1 << 30)) or None,
        notebook_timeout=args.notebook_timeout or None,
        max_bytes=int(args.max_size * 10**6) or None,
        max_cells=args.max_cells or None,
        max_procs=args.max_procs or None,
        disk_limit=int(args.disk_limit * (1 << 30)) or None,
    )


def _verify(args: argparse.Namespace, secret: str) -> int:
    from .manifest import MANIFEST_NAME, verify_gradebook

    if args.submissions or args.source or args.out:
        raise CommandError("--verify GRADEBOOK_DIR takes no submissions, --source or --out")
    result = verify_gradebook(args.verify, secret)
    for line in result.notes:
        print(f"note: {line}", file=sys.stderr)
    for line in result.problems:
        print(f"FAIL: {line}", file=sys.stderr)
    if not result.ok:
        return 1
    how = (
        "its HMAC, keyed by the grading secret"
        if result.keyed
        else "checksums only, not keyed: graded with the public default secret, so anyone who "
        "can write the folder could have rewritten the manifest too"
    )
    print(f"ok: {args.verify}: the gradebook files match {MANIFEST_NAME} ({how})")
    return 0


def _merge(args: argparse.Namespace, secret: str) -> int:
    from .cli_book import merge_run
    from .errors import GradingError

    if not args.out or args.submissions or args.source:
        raise CommandError(
            "grade --merge CHUNK_DIR... takes gradebook folders and --out "
            "GRADEBOOK_DIR only (no submissions, no --source)"
        )
    try:
        return merge_run(args, secret)
    except GradingError as err:
        raise CommandError(str(err)) from err


def _manual(args: argparse.Namespace, secret: str) -> int:
    from .cli_book import manual_run
    from .errors import GradingError

    if not args.out or args.submissions or args.source or args.merge:
        raise CommandError(
            "grade --manual SCORES.csv takes the gradebook folder as --out "
            "GRADEBOOK_DIR only (no submissions, no --source, no --merge)"
        )
    try:
        return manual_run(args, secret)
    except GradingError as err:
        raise CommandError(str(err)) from err


def _grade(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from .cli_book import grade_run, views_run, wants_views
    from .manifest import MANIFEST_NAME
    from .manual import PENDING
    from .secret import DEFAULT_SECRET, SECRET_ENV

    if args.verify is not None:
        if args.secret is not None and not args.secret:
            raise CommandError("--secret must not be empty")
        return _verify(args, args.secret or os.environ.get(SECRET_ENV) or DEFAULT_SECRET)
    if args.manual:
        return _manual(args, args.secret or os.environ.get(SECRET_ENV) or DEFAULT_SECRET)
    if args.merge:
        return _merge(args, args.secret or os.environ.get(SECRET_ENV) or DEFAULT_SECRET)
    if args.out and not args.submissions and not args.source and wants_views(args):
        return views_run(args, args.secret or os.environ.get(SECRET_ENV) or DEFAULT_SECRET)
    if not args.submissions or not args.source or not args.out:
        raise CommandError(
            "grade needs SUBMISSION..., --source LABS and --out GRADEBOOK_DIR "
            "(or --verify GRADEBOOK_DIR, or --out GRADEBOOK_DIR with --feedback, "
            "--export, --summary or --due)"
        )
    if args.student and args.force:
        raise CommandError("--student regrades those students, --force everyone: give one")
    config = _budgets(args, _execution_config(args, os.environ.get(SECRET_ENV) or DEFAULT_SECRET))
    if args.write_restored:
        _refuse_restored_inside(args)
    report = grade_run(args, config, args.secret or os.environ.get(SECRET_ENV) or DEFAULT_SECRET)
    if args.write_restored:
        _write_restored(args, config)
    csv_path = Path(args.out) / "gradebook.csv"
    json_path = Path(args.out) / "gradebook.json"
    for result in report.results:
        by_hand = sum(
            c.max_points for c in result.cells if c.manual and c.message.startswith(PENDING)
        )
        print(
            f"{result.student:20s} {result.lab:24s} {result.points:g} / {result.max_points:g}"
            + (
                f" ({by_hand:g} of them for written answers, to grade by hand: manual.csv)"
                if by_hand
                else ""
            )
        )
    for line in report.warnings:
        print(f"warning: {line}", file=sys.stderr)
    if not config.record()["non_default_secret"]:
        print(
            "warning: graded with the public default secret, so hidden-test inputs are "
            "those anyone can compute; grade with --secret or $MLINFRA_GRADE_SECRET",
            file=sys.stderr,
        )
    for problem in report.problems:
        print(f"not graded: {problem}", file=sys.stderr)
    print(f"gradebook: {csv_path} and {json_path}")
    manifest = csv_path.parent / MANIFEST_NAME
    if config.record()["non_default_secret"]:
        print(
            f"manifest: {manifest}, sealed with an HMAC keyed by the grading secret "
            "(check it with 'mlinfra-lab grade --verify' and the same secret)"
        )
    else:
        print(
            f"manifest: {manifest}, only checksummed, not keyed (the public default "
            "secret): it catches accidental edits, not someone who rewrites it too"
        )
    return 0 if report.ok else 1


def _refuse_restored_inside(args: argparse.Namespace) -> None:
    """Refuse ``--write-restored`` inside a submissions or source folder, before grading."""
    from .errors import GradingError
    from .restored import refuse_inside

    try:
        refuse_inside(args.write_restored, [*args.submissions, args.source])
    except GradingError as err:
        raise CommandError(str(err)) from err


def _write_restored(args: argparse.Namespace, config: ExecutionConfig) -> None:
    """``grade --write-restored DIR``: each submission's restored notebook, for nbval."""
    from .cli_book import _students
    from .restored import write_restored

    run = write_restored(
        args.submissions,
        args.source,
        args.write_restored,
        config.max_bytes,
        config.max_cells,
        _students(args.student),  # with --student, those students' only
    )
    for path, why in run.skipped:
        print(f"warning: --write-restored: {path}: {why}", file=sys.stderr)
    print(
        f"--write-restored: {len(run.written)} restored notebooks (graders back, hidden tests "
        f"left out) under {args.write_restored}; rerun one with: pytest --nbval-lax "
        f"{args.write_restored}/STUDENT/LAB.ipynb"
    )


def _validate(args: argparse.Namespace) -> int:
    from .secret import DEFAULT_SECRET
    from .validate import validate_labs

    config = _execution_config(args, DEFAULT_SECRET)
    report = validate_labs(args.labs, config, progress=True)
    for line in report.checked:
        print(f"ok: {line}")
    for line in report.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for problem in report.problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 0 if report.ok else 1


def _bench(args: argparse.Namespace) -> int:
    from .bench import bench_command

    return bench_command(args)


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``release``, ``grade`` and ``validate`` to the ``mlinfra-lab`` command, and
    ``bench grading`` (`mlinfra_lab.cli.BENCH_TARGETS` lists it with this module, so that
    ``mlinfra-lab bench grading`` loads this one; its help is `bench.BENCH_HELP`)."""
    from .bench import BENCH_HELP, add_bench_args

    target = bench.add_parser("grading", help=BENCH_HELP, description=BENCH_HELP)
    add_bench_args(target)
    target.set_defaults(func=_bench)
    release = commands.add_parser(
        "release",
        help="write student versions of labs (solutions and hidden tests removed)",
        description="Write the student version of a lab notebook, or of every *.ipynb of a "
        "folder: solution spans become 'raise NotImplementedError(...)', hidden-test spans "
        "are removed, outputs are cleared, grader cells keep their ids and metadata plus a "
        "checksum of the source grader, and the notebook records its lab name.",
    )
    release.add_argument("src", metavar="SRC", help="a lab notebook or a folder of them")
    release.add_argument(
        "out",
        metavar="OUT",
        help="the folder to write into (or, for one notebook, a .ipynb file name)",
    )
    release.set_defaults(func=_release)

    grade = commands.add_parser(
        "grade",
        help="grade submitted lab notebooks, each in a sandbox; write a gradebook",
        description="Grade student notebooks against the instructor source labs.",
        epilog=GRADE_EPILOG + "\n" + BOOK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    grade.add_argument(
        "submissions",
        metavar="SUBMISSION",
        nargs="*",
        help="submitted notebooks, or folders of them",
    )
    grade.add_argument(
        "--source",
        metavar="LABS",
        help="the instructor labs: a folder (labs/) or one notebook (required)",
    )
    grade.add_argument(
        "--out",
        metavar="GRADEBOOK_DIR",
        help="folder for gradebook.csv, gradebook.json and manifest.json (required)",
    )
    grade.add_argument(
        "--verify",
        metavar="GRADEBOOK_DIR",
        default=None,
        help="grade nothing: check a gradebook against its manifest (with "
        "the secret it was graded with); exit 1 naming any edited file",
    )
    grade.add_argument(
        "--merge",
        metavar="CHUNK_DIR",
        nargs="+",
        default=None,
        help="grade nothing: merge the gradebooks of chunks graded apart "
        "(each verified first, with the secret) into --out",
    )
    grade.add_argument(
        "--manual",
        metavar="SCORES.csv",
        default=None,
        help="grade nothing: merge the points of hand-graded written answers "
        "(manual.csv, filled in) into the gradebook of --out (verified "
        "first, with the secret)",
    )
    grade.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="per-cell time limit; a cell running longer is interrupted and fails (default: 60)",
    )
    grade.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="notebooks run side by side (default: 1; more helps only with spare cores)",
    )
    grade.add_argument(
        "--no-judge",
        dest="judge",
        action="store_false",
        help="run each grader in the student's kernel only, not again in a judge "
        "kernel (faster, and foolable by a notebook that patches its own interpreter)",
    )
    grade.add_argument(
        "--sandbox",
        choices=SANDBOX_KINDS,
        default="auto",
        help="where each notebook runs: bwrap (bubblewrap), rlimit (the "
        "fallback) or auto (bwrap where it works; default)",
    )
    grade.add_argument(
        "--secret",
        default=None,
        metavar="S",
        help="the grading secret; per-exercise seeds of the hidden tests' inputs are "
        "derived from it outside the kernels, which get only the seeds "
        "(default: $MLINFRA_GRADE_SECRET, else the public default)",
    )
    grade.add_argument(
        "--memory-limit",
        type=float,
        default=None,
        metavar="GIB",
        help="memory of one sandbox's processes together, and address space of each "
        "kernel, in GiB "
        f"(default: {DEFAULT_MEMORY_GIB:g}, none where an NVIDIA GPU is "
        "present; 0: no limit)",
    )
    grade.add_argument(
        "--notebook-timeout",
        type=float,
        default=DEFAULT_NOTEBOOK_S,
        metavar="SECONDS",
        help="wall time of one notebook, kernel start "
        f"included (default: {DEFAULT_NOTEBOOK_S:g}; 0: no limit)",
    )
    grade.add_argument(
        "--max-size",
        type=float,
        default=DEFAULT_MAX_MB,
        metavar="MB",
        help=f"largest submission file graded (default: {DEFAULT_MAX_MB:g}; 0: no limit)",
    )
    grade.add_argument(
        "--max-cells",
        type=int,
        default=DEFAULT_MAX_CELLS,
        metavar="N",
        help=f"most cells in a graded notebook (default: {DEFAULT_MAX_CELLS}; 0: no limit)",
    )
    grade.add_argument(
        "--max-procs",
        type=int,
        default=DEFAULT_MAX_PROCS,
        metavar="N",
        help="processes and threads of one sandbox together (pids.max of its control "
        f"group; default: {DEFAULT_MAX_PROCS}; 0: no limit)",
    )
    grade.add_argument(
        "--disk-limit",
        type=float,
        default=DEFAULT_DISK_GIB,
        metavar="GIB",
        help="size of each of a sandbox's tmpfs (home, /tmp, /dev/shm), in GiB "
        f"(default: {DEFAULT_DISK_GIB:g}; 0: no limit)",
    )
    grade.add_argument(
        "--write-restored",
        metavar="DIR",
        default=None,
        help="also write each submission's restored notebook (the source graders back in "
        "place, their visible tests only: no hidden test, no secret) as DIR/STUDENT/LAB.ipynb; "
        "'pytest --nbval-lax DIR/STUDENT/LAB.ipynb' then reruns its visible tests, cell by "
        "cell, as grading did (a dispute or an appeal). With --student, those students' "
        "only. DIR must be outside the submissions and source folders",
    )
    add_book_flags(grade)
    grade.set_defaults(func=_grade)

    validate = commands.add_parser(
        "validate",
        help="check every grader passes on the source and fails on the release "
        "and on every wrong answer",
        description="For every lab with grader cells, run (as grade runs them) the source, its "
        "released version, and one variant per raw cell tagged 'wrong-answer' (the source "
        "with that wrong answer in place of the solution cell it replaces): each grader "
        "must pass on the source (inside its 'forbid' guard) and fail on the release, and "
        "each wrong answer must fail at least one grader of its exercise. Exits 1 naming "
        "the lab, exercise and cell of every grader that fails on the source or cannot "
        "fail, every wrong answer the graders miss, every exercise without a wrong "
        "answer, and every grader whose judge would take from the student's kernel a name "
        "that a cell of yours binds outside a solution and outside a read-only cell (a "
        "tolerance a submission could change). Labs without grader cells only get a warning.",
    )
    validate.add_argument("labs", metavar="LABS_DIR", help="a folder of labs, or one lab")
    validate.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="per-cell time limit (default: 300)",
    )
    validate.add_argument(
        "--jobs", type=int, default=1, metavar="N", help="notebooks run side by side (default: 1)"
    )
    validate.add_argument(
        "--no-judge",
        dest="judge",
        action="store_false",
        help="run each grader in the student's kernel only, not again in a judge "
        "kernel (faster, and foolable by a notebook that patches its own interpreter)",
    )
    validate.add_argument(
        "--sandbox",
        choices=SANDBOX_KINDS,
        default="auto",
        help="where each notebook runs (as for grade; default: auto)",
    )
    validate.add_argument(
        "--secret",
        default=None,
        metavar="S",
        help="run the hidden tests under this grading secret, to check "
        "they pass on the solutions with inputs other than the default's "
        "(default: the public default secret)",
    )
    validate.set_defaults(func=_validate)
    add_collect_command(commands)
