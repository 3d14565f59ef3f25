"""The ``mlinfra-lab`` command: one entry point whose sub-commands each chapter registers.

Contract: ``main(argv)`` parses the command line, runs one sub-command and returns its exit
status (0 on success); an `MlinfraError` (every error the package raises on purpose, see
`mlinfra_lab.errors`) is printed as one line, not a traceback, with exit status 2. Only the
chapter whose command runs is imported: ``mlinfra-lab --help`` imports no chapter (no
torch, no SQLAlchemy), ``mlinfra-lab track ...`` imports only `mlinfra_lab.tracking`.

Design decisions:
- Each sub-package owns its commands in its own ``cli.py`` with one function,
  ``register(commands, bench)``: ``commands`` is the top-level sub-parser collection
  (``scaling``, ``train``, ``track``, ``release``, ...) and ``bench`` the collection under
  ``mlinfra-lab bench`` (every target of `BENCH_TARGETS`). A handler is attached with
  ``parser.set_defaults(func=handler)`` and receives the parsed namespace.
- Importing ``mlinfra_lab.X.cli`` first runs ``mlinfra_lab/X/__init__.py``, and some of
  those import their chapter (torch, nbformat). So `COMMANDS` and `BENCH_TARGETS` name,
  for each command, the module that registers it and its one-line help: `main` imports
  only the module of the command on its command line and lists the others from these
  tables (a test keeps the tables' help equal to what the chapters register).
- Errors are caught once, here: handlers let a chapter's errors through and raise
  `CommandError` only for a flag that argparse cannot check.
- The instructors' commands (``release``, ``collect``, ``grade``, ``validate``) need the
  ``grading`` extra (nbval, nbclient, ipykernel, pytest), which a student's ``pip install mlinfra-lab``
  does not bring. `EXTRAS` names the extra each command module needs; before loading one,
  `main` checks that the extra's distributions (read from the installed package's own
  metadata, so pyproject.toml stays the one list) are installed, and otherwise says, on
  one line, what to install: ``pip install "mlinfra-lab[grading]"``. Even ``--help`` says
  it, since the commands cannot run.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
import types
from collections.abc import Iterable, Sequence

from mlinfra_lab.errors import CommandError, MlinfraError

__all__ = [
    "BENCH_TARGETS",
    "COMMANDS",
    "EXTRAS",
    "CommandError",
    "MissingExtraError",
    "build_parser",
    "main",
    "missing_extra",
]

DISTRIBUTION = "mlinfra-lab"

_GRADING = "mlinfra_lab.grading.cli"
_ATTENTION = "mlinfra_lab.attention.cli"
_SCALING = "mlinfra_lab.scaling.cli"
_CI = "mlinfra_lab.ci.cli"
_TRACKING = "mlinfra_lab.tracking.cli"
_STALENESS = "mlinfra_lab.staleness.cli"

# The chapters' command-line modules, in the order their commands are listed.
TOPIC_CLIS = (_GRADING, _ATTENTION, _SCALING, _CI, _TRACKING, _STALENESS)

# command -> (the module that registers it, its one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "release": (_GRADING, "write student versions of labs (solutions and hidden tests removed)"),
    "grade": (_GRADING, "grade submitted lab notebooks, each in a sandbox; write a gradebook"),
    "collect": (
        _GRADING,
        "turn a Canvas or Moodle submissions download into the folders grade reads",
    ),
    "validate": (
        _GRADING,
        "check every grader passes on the source and fails on the release and on every "
        "wrong answer",
    ),
    "scaling": (_SCALING, "profile DDP scaling, benchmark all-reduce, diagnose a slowdown"),
    "train": (_CI, "run the tiny seeded training run CI uses (chapter 3)"),
    "ci": (_CI, "CI checks: lock file, artifacts, flaky runs, references (chapter 3)"),
    "track": (_TRACKING, "query and maintain the experiment-tracking store"),
    "staleness": (_STALENESS, "asynchronous-training staleness simulator"),
}

# `mlinfra-lab bench TARGET` -> (the module that registers it, its one-line help)
BENCH_TARGETS: dict[str, tuple[str, str]] = {
    "attention": (
        _ATTENTION,
        "time the Triton flash attention against SDPA backends, eager and a matmul",
    ),
    "scaling": (_SCALING, "all-reduce bandwidth sweep and alpha-beta fit"),
    "ci": (
        _CI,
        "time the CI tiers: tiny run in-process and in a fresh process, lock, artifacts",
    ),
    "tracking": (_TRACKING, "this tracking store against MLflow, side by side (SQLite)"),
    "staleness": (
        _STALENESS,
        "time the async parameter-server simulator (64 workers x 20,000 updates)",
    ),
    "grading": (
        _GRADING,
        "grade a generated class of 200 warm-up submissions: feedback, Canvas export",
    ),
}


# command module -> the extra of `DISTRIBUTION` its commands need
EXTRAS: dict[str, str] = {_GRADING: "grading"}


class MissingExtraError(MlinfraError, ImportError):
    """A command needs an extra of the package that is not installed; says what to install."""

    def __init__(self, extra: str, missing: Iterable[str]) -> None:
        self.extra, self.missing = extra, sorted(missing)
        super().__init__(
            f"this command needs the {extra!r} extra, which is not installed here "
            f"(missing: {', '.join(self.missing)}); install it with: "
            f'pip install "{DISTRIBUTION}[{extra}]"'
        )


def missing_extra(extra: str) -> list[str]:
    """The distributions of ``mlinfra-lab[extra]`` that are not installed.

    Read from the installed package's metadata; empty when all are installed, or when the
    package runs from a source tree without metadata (then an import error decides).
    """
    from packaging.requirements import Requirement

    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    missing = []
    for line in requires:
        req = Requirement(line)
        if req.marker is None or not req.marker.evaluate({"extra": extra}):
            continue
        try:
            importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(req.name)
    return missing


def _load(module: str) -> types.ModuleType:
    """Import a command module, first checking the extra it needs (`EXTRAS`)."""
    extra = EXTRAS.get(module)
    if extra is not None and (missing := missing_extra(extra)):
        raise MissingExtraError(extra, missing)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if extra is None or (err.name or "").startswith("mlinfra_lab"):
            raise
        raise MissingExtraError(extra, [err.name or "?"]) from err


def _info(args: argparse.Namespace) -> int:
    from mlinfra_lab.runtime import describe

    info = describe()
    if args.json:
        import json

        print(json.dumps(info.as_dict(), indent=2))
    else:
        print(info)
    return 0


def _modules_for(argv: Sequence[str]) -> set[str]:
    """The chapter modules the command line `argv` needs: none for ``--help`` or ``info``."""
    words = [a for a in argv if not a.startswith("-")]
    if not words:
        return set()
    if words[0] == "bench":
        target = words[1] if len(words) > 1 else ""
        return {BENCH_TARGETS[target][0]} if target in BENCH_TARGETS else set()
    return {COMMANDS[words[0]][0]} if words[0] in COMMANDS else set()


def _placeholder(commands: argparse._SubParsersAction, name: str, module: str, text: str) -> None:
    """List `name` with its help without importing `module`; `main` loads it if chosen."""
    p = commands.add_parser(name, help=text, description=text, add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(chapter_cli=module)


def build_parser(modules: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser of `info`, `bench ...` and every chapter's commands.

    `modules`: the chapter modules (of `TOPIC_CLIS`) whose commands get their full
    parsers; the commands of the others are listed by name and help only. Default: all.
    """
    load = set(TOPIC_CLIS if modules is None else modules)
    parser = argparse.ArgumentParser(
        prog="mlinfra-lab",
        description=(
            "Tools of the mlinfra course: benchmarks, the scaling profiler, the tiny "
            "training entry point, the tracking store and the lab grader."
        ),
        epilog="Run 'mlinfra-lab COMMAND --help' for the options of one command.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    info = commands.add_parser("info", help="describe the runtime (device, versions)")
    info.add_argument("--json", action="store_true", help="print as JSON")
    info.set_defaults(func=_info)
    bench_parser = commands.add_parser(
        "bench", help="run a benchmark and write its results as JSON"
    )
    bench = bench_parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    for module in TOPIC_CLIS:
        if module in load:
            try:
                _load(module).register(commands, bench)
                continue
            except MissingExtraError:
                if modules is not None:  # asked for by name: main says what to install
                    raise
        for table, subparsers in ((COMMANDS, commands), (BENCH_TARGETS, bench)):
            for name, (owner, text) in table.items():
                if owner == module:
                    _placeholder(subparsers, name, module, text)
    return parser


def _one_line(err: BaseException) -> str:
    """`err`'s message on one line (a ``KeyError``'s without the quotes ``str`` adds)."""
    text = str(err.args[0]) if isinstance(err, KeyError) and len(err.args) == 1 else str(err)
    return " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mlinfra-lab`` with `argv` (default: ``sys.argv[1:]``); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(_modules_for(argv)).parse_args(argv)
        chapter = getattr(args, "chapter_cli", None)
        if chapter is not None:  # a command line _modules_for did not foresee: load, reparse
            args = build_parser({chapter}).parse_args(argv)
    except MissingExtraError as err:
        words = [a for a in argv if not a.startswith("-")]
        print(f"mlinfra-lab {' '.join(words[:1])}: error: {err}", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except MlinfraError as err:
        print(f"mlinfra-lab {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
