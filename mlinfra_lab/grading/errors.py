"""Exceptions of the lab-grading tools, each with a message that says what to do.

Contract: every failure the grading tools can explain raises a subclass of `GradingError`;
the command line prints its message on one line. Problems with one *submission* (a file
that is not a notebook, a notebook of an unknown lab) are not raised out of
`grade_submissions`: they are collected as `SubmissionProblem` records so the rest of the
batch is still graded.

`ForbiddenCallError` and `CallGuardError` are raised inside a student's kernel, by the guard
that a grader with ``forbid`` metadata runs under (see `forbid`); this module imports
only `mlinfra_lab.errors` (which imports nothing), so that guard stays cheap to import there.
"""

from __future__ import annotations

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "CallGuardError",
    "ExecutionError",
    "ForbiddenCallError",
    "GraderRaceError",
    "GradingError",
    "JudgeError",
    "MarkerError",
    "SourceLabError",
    "SubmissionError",
    "WireError",
]


class GradingError(MlinfraError):
    """Base class of everything the grading tools raise on purpose."""


class MarkerError(GradingError):
    """A lab's solution/hidden-test markers or grader metadata are malformed (instructor fix)."""


class SourceLabError(GradingError):
    """The instructor's source labs cannot be found or read."""


class SubmissionError(GradingError):
    """One submission cannot be graded (not a notebook, unknown lab, missing path)."""


class ExecutionError(GradingError):
    """No notebook can run here: a grading kernel cannot start (ipykernel not installed)."""


class ForbiddenCallError(GradingError):
    """A grader's code called a function its ``forbid`` list names (the student's fix)."""


class CallGuardError(GradingError):
    """The guard of a ``forbid`` grader could not be installed or was removed while it ran."""


class GraderRaceError(GradingError):
    """A student function returned with code of its own still running beside the grader (a
    trace function, a thread): the call fails (see `judge_record`)."""


class JudgeError(GradingError):
    """The judge could not check a grader with what the student's kernel reported (see `judge`)."""


class WireError(JudgeError):
    """A judge record is malformed or holds a value the judge does not accept (see `judge_wire`)."""
