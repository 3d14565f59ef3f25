"""The package's one error convention: every error raised on purpose is an `MlinfraError`.

Contract: each chapter's exception classes subclass `MlinfraError` (directly, or through
the chapter's own base such as `GradingError` or `TrackingError`), so a notebook can catch
everything the course raises on purpose with one ``except``, and ``mlinfra-lab`` catches it
once, in `mlinfra_lab.cli.main`: it prints ``mlinfra-lab COMMAND: error: MESSAGE`` on one
line (newlines become `` | ``) to stderr and exits with status 2. Anything else is a bug
and keeps its traceback.

Conventions for a new error class:
- Name the problem (`LockfileError`, `RankLostError`), write a docstring saying when it is
  raised, and a message that says what to do about it (the file, the flag, the fix).
- Also subclass the built-in category it belongs to (``ValueError`` for a bad input,
  ``LookupError``/``KeyError`` for a missing name, ``RuntimeError`` for a failed run,
  ``AssertionError`` for a failed check), so callers that catch built-ins keep working:
  ``class ArtifactError(MlinfraError, ValueError)``.
- A command handler does not translate chapter errors: it lets them reach `cli.main`. It
  raises `CommandError` only for a command-line problem that argparse cannot express
  (``--timeout must be positive``) or to turn a built-in error (an ``OSError`` reading a
  file named on the command line) into a sentence.

This module imports nothing, so any module can import it at no cost, including code that
runs inside a student's kernel (`mlinfra_lab.grading.forbid`).
"""

__all__ = ["CommandError", "MlinfraError"]


class MlinfraError(Exception):
    """Base class of every error `mlinfra_lab` raises on purpose; its message says what to do."""


class CommandError(MlinfraError):
    """A command-line usage problem argparse cannot check; the message names the flag."""
