"""``mlinfra-lab collect``: an LMS submissions download into the folders ``grade`` reads.

Contract: `add_collect_command(commands)` adds the ``collect`` command; its handler runs
`collect.collect_download`, prints one line per notebook taken, set aside or refused, and
returns 0, or 1 when something was refused (the rest is still collected). A bad call raises
`CommandError`; a download that cannot be read at all reaches ``mlinfra-lab``'s ``main`` as
a `GradingError`, printed on one line.
"""

from __future__ import annotations

import argparse

from mlinfra_lab.errors import CommandError

__all__ = ["COLLECT_EPILOG", "COLLECT_HELP", "add_collect_command"]

COLLECT_HELP = "turn a Canvas or Moodle submissions download into the folders grade reads"

COLLECT_EPILOG = """\
Examples:
  mlinfra-lab collect submissions.zip --lab 00_warmup --out submissions/
  mlinfra-lab collect moodle-download/ --lab 00_warmup --out submissions/ \\
      --roster roster.csv --report collect-00_warmup.json
  mlinfra-lab grade submissions/ --source labs/ --out gradebook/

What it reads (one assignment's download, a zip or the folder you extracted it to):
  Canvas ("Download Submissions"): smithjane_12345_678901_00_warmup.ipynb, i.e.
  <lastfirst>[_late]_<user id>_<upload number>_<the file's name>.
  Moodle ("Download all submissions"): Jane Smith_4321_assignsubmission_file_/<files>,
  or flat files Jane Smith_4321_assignsubmission_file_<file name>.
  Only notebooks (*.ipynb) are taken; other files are counted as skipped.

Who a notebook belongs to:
  The LMS's id in the name (Canvas's user id, Moodle's participant id), never the name
  the student gave the file. Without --roster the student's folder is that id
  (submissions/12345/00_warmup.ipynb). With --roster (a CSV with 'student' and 'id'
  columns, or Canvas's own gradebook export: its 'ID' is the user id, its 'SIS Login
  ID' the student) the folder is the roster's student, and an id not on the roster is
  refused. Pass the same roster to 'grade --export' later.

One notebook per student:
  Versions of one notebook (names equal once Canvas's -1, -2, Colab's 'Copy of ' and a
  browser's ' (1)' are taken off): the latest is taken, by Canvas's upload number, then
  its -N; the others are listed as set aside. Two different notebooks for one student, or
  versions the LMS does not order: all are refused and nothing is written for that
  student, so a notebook collected earlier (and the marks stored for it) stays; keep the
  one to grade and collect again.

Refused, each with its reason (the rest is collected; exit status 1):
  names that leave the folder (absolute, '..', backslashes: a zip slip), names with
  control characters or bidirectional overrides, symbolic links (a zip entry or a file),
  hard links (a file with several names), entries named twice, encrypted entries,
  notebooks over --max-size, and every notebook once those read add up to --max-total;
  more than --max-entries entries stops the whole download (a zip bomb is caught by the
  inflated size, counted while reading, not only by what the zip declares).

Written: OUT/<student>/<lab>.ipynb, replaced only when the bytes differ, with the time the
download gives the file (the late policy reads it; a zip stores local time).
"""


def _collect(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from .collect import collect_download
    from .download import Limits
    from .export import read_roster
    from .manifest import atomic_write

    for flag, value in (
        ("--max-size", args.max_size),
        ("--max-total", args.max_total),
        ("--max-entries", args.max_entries),
    ):
        if value < 0:
            raise CommandError(f"{flag} must be 0 (no limit) or a positive number")
    limits = Limits(
        max_bytes=int(args.max_size * 10**6) or None,
        max_total=int(args.max_total * 10**6) or None,
        max_entries=args.max_entries or None,
    )
    roster = read_roster(args.roster) if args.roster else None
    report = collect_download(args.download, args.out, args.lab, roster, args.lms, limits)
    for t in report.taken:
        print(f"took      {t.student:12s} {t.source} -> {t.target} ({t.status})")
        for note in t.notes:
            print(f"          note: {note}")
    for r in report.set_aside:
        print(f"set aside {r}")
    for r in report.refused:
        print(f"REFUSED   {r}")
    if report.skipped:
        shown = ", ".join(report.skipped[:3]) + (", ..." if len(report.skipped) > 3 else "")
        n = len(report.skipped)
        print(f"skipped   {n} file{'s' if n != 1 else ''} that are not notebooks ({shown})")
    print(
        f"collected {len(report.taken)} students' {args.lab} into {args.out} "
        f"({report.lms or 'no LMS naming found'}); {len(report.refused)} refused, "
        f"{len(report.set_aside)} set aside"
    )
    if args.report:
        text = json.dumps(report.as_dict(), indent=2, ensure_ascii=False) + "\n"
        atomic_write(Path(args.report), text.encode("utf-8"))
        print(f"report: {args.report}")
    return 0 if report.ok else 1


def add_collect_command(commands: argparse._SubParsersAction) -> None:
    """Add ``mlinfra-lab collect`` to `commands`."""
    from .budgets import DEFAULT_MAX_BYTES
    from .download import DEFAULT_MAX_ENTRIES, DEFAULT_MAX_TOTAL
    from .lms_names import LMS_KINDS

    collect = commands.add_parser(
        "collect",
        help=COLLECT_HELP,
        description="Collect one assignment's submissions from a Canvas or Moodle download "
        "(zip or folder) into OUT/<student>/<lab>.ipynb, the layout 'mlinfra-lab grade' "
        "reads, taking each student's identity from the LMS's naming or a roster.",
        epilog=COLLECT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    collect.add_argument("download", metavar="DOWNLOAD", help="the LMS's zip, or its folder")
    collect.add_argument(
        "--lab",
        required=True,
        help="the lab this assignment is (the source notebook's name without .ipynb, e.g. "
        "00_warmup): every notebook taken is written as <lab>.ipynb",
    )
    collect.add_argument(
        "--out", required=True, metavar="DIR", help="the submissions folder to write into"
    )
    collect.add_argument(
        "--roster",
        metavar="CSV",
        help="LMS id -> student: 'student' and 'id' columns, or Canvas's gradebook export",
    )
    collect.add_argument(
        "--lms",
        choices=LMS_KINDS,
        default="auto",
        help="whose naming to read (default: auto, either; a download mixing both is refused)",
    )
    collect.add_argument("--report", metavar="FILE", help="also write the report as JSON to FILE")
    collect.add_argument(
        "--max-size",
        type=float,
        default=DEFAULT_MAX_BYTES / 10**6,
        metavar="MB",
        help="largest notebook taken (default: %(default)g, as grade's; 0: no limit)",
    )
    collect.add_argument(
        "--max-total",
        type=float,
        default=DEFAULT_MAX_TOTAL / 10**6,
        metavar="MB",
        help="notebooks read from the download, inflated, together (default: "
        "%(default)g; 0: no limit)",
    )
    collect.add_argument(
        "--max-entries",
        type=int,
        default=DEFAULT_MAX_ENTRIES,
        metavar="N",
        help="entries (files and folders) in the download (default: %(default)d; 0: no limit)",
    )
    collect.set_defaults(func=_collect)
