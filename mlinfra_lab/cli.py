"""The ``mlinfra-lab`` command: one entry point whose sub-commands each chapter registers.

Contract: ``main(argv)`` parses the command line, runs one sub-command and returns its exit
status (0 on success); an `MlinfraError` (every error the package raises on purpose, see
`mlinfra_lab.errors`) is printed as one line, not a traceback, with exit status 2.

Design decisions:
- Each sub-package owns its commands in its own ``cli.py`` with one function,
  ``register(commands, bench)``: ``commands`` is the top-level sub-parser collection
  (``scaling``, ``train``, ``track``, ``release``, ...) and ``bench`` the collection under
  ``mlinfra-lab bench`` (``attention``, ``tracking``, ``staleness``). A handler is attached
  with ``parser.set_defaults(func=handler)`` and receives the parsed namespace.
- Errors are caught once, here: handlers let a chapter's errors through and raise
  `CommandError` only for a flag that argparse cannot check.
- Topic ``cli`` modules import nothing heavy at module level, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from mlinfra_lab.errors import CommandError, MlinfraError

__all__ = ["CommandError", "build_parser", "main"]

TOPIC_CLIS = (
    "mlinfra_lab.grading.cli",
    "mlinfra_lab.attention.cli",
    "mlinfra_lab.scaling.cli",
    "mlinfra_lab.ci.cli",
    "mlinfra_lab.tracking.cli",
    "mlinfra_lab.staleness.cli",
)


def _info(args: argparse.Namespace) -> int:
    from mlinfra_lab.runtime import describe

    info = describe()
    if args.json:
        import json

        print(json.dumps(info.as_dict(), indent=2))
    else:
        print(info)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The full parser: `info`, `bench ...` and every topic's commands."""
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
        importlib.import_module(module).register(commands, bench)
    return parser


def _one_line(err: BaseException) -> str:
    """`err`'s message on one line (a ``KeyError``'s without the quotes ``str`` adds)."""
    text = str(err.args[0]) if isinstance(err, KeyError) and len(err.args) == 1 else str(err)
    return " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mlinfra-lab`` with `argv` (default: ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
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
