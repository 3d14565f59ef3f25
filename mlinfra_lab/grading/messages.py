"""The failure message a gradebook keeps for a grader: the grader's words, never its source.

Contract: ``failure_message(message, grader_text)`` is what the gradebook shows for a failed
grader whose kernel (or judge) said `message`: one line (line breaks shown as `` / ``),
control characters escaped (`hygiene.printable`), at most `MAX_FAILURE_CHARS` characters,
and `WITHHELD` instead when it quotes a line of the grader's hidden tests (`quotes_hidden`).
``student_raised(ename, evalue)`` is the judge's message for an exception the student's
own code raised (replayed from the record), and ``student_text(message)`` the student
kernel's own line for it, which the gradebook keeps where both kernels failed on it (it
names the exception's real class): at most `MAX_STUDENT_CHARS` characters, so a student
exception cannot carry a long payload.

Why: a student function can read the grader's text in its own kernel (the
cell's source is in ``linecache``; its frame is on the stack) and raise it; the kernel's
last exception line then carried the hidden tests into ``gradebook.csv``, which goes back
to students as feedback.

Design decisions:
- Hidden lines are compared with all white space removed (so re-spacing a line does not
  hide it), and only lines of at least `MIN_QUOTED_CHARS` such characters count: a short
  line (``### END``) could occur in an honest message.
- An assertion message the grader formats (``f"... got {got}"``) is the grader's own words
  with the student's values in it: kept, capped and escaped. What cannot be told apart from
  an honest value (a string the student's function returned, encoded) is bounded by the
  cap, not detected.
- Standard library and `hygiene` only.
"""

from __future__ import annotations

from .hygiene import printable
from .markers import HIDDEN_BEGIN, HIDDEN_END

__all__ = [
    "MAX_FAILURE_CHARS",
    "MAX_STUDENT_CHARS",
    "MIN_QUOTED_CHARS",
    "WITHHELD",
    "failure_message",
    "hidden_lines",
    "quotes_hidden",
    "student_raised",
    "student_text",
]

MAX_FAILURE_CHARS = 400
MAX_STUDENT_CHARS = 160
MIN_QUOTED_CHARS = 12
WITHHELD = (
    "the failure message quoted the grader's hidden tests, so it is withheld; the grader failed"
)


def _squash(text: str) -> str:
    return "".join(text.split())


def hidden_lines(grader_text: str) -> list[str]:
    """The lines of `grader_text`'s hidden-test spans, white space removed, long enough."""
    lines, inside = [], False
    for line in grader_text.splitlines():
        token = line.strip()
        if token == HIDDEN_BEGIN:
            inside = True
        elif token == HIDDEN_END:
            inside = False
        elif inside and len(_squash(line)) >= MIN_QUOTED_CHARS:
            lines.append(_squash(line))
    return lines


def quotes_hidden(message: str, grader_text: str) -> bool:
    """True when `message` holds a line of `grader_text`'s hidden tests (see docstring)."""
    squashed = _squash(message)
    return any(line in squashed for line in hidden_lines(grader_text))


def _one_line(message: str) -> str:
    return " / ".join(part.strip() for part in str(message).splitlines() if part.strip())


def failure_message(message: str, grader_text: str) -> str:
    """The gradebook's message for a failed grader (see the module docstring)."""
    if quotes_hidden(message, grader_text):
        return WITHHELD
    return printable(_one_line(message), MAX_FAILURE_CHARS)


def student_raised(ename: str, evalue: str) -> str:
    """The message for an exception the student's code raised: its class (an identifier,
    else "an exception") and at most `MAX_STUDENT_CHARS` of its text."""
    name = ename if ename.replace(".", "").replace("_", "").isalnum() else "an exception"
    text = printable(_one_line(evalue), MAX_STUDENT_CHARS)
    return f"{name[:60]}: {text}" if text else f"your code raised {name[:60]}"


def student_text(message: str) -> str:
    """A message the student's own kernel made (its last exception line), cut to
    `MAX_STUDENT_CHARS`: the student's words, so a short line."""
    return printable(_one_line(message), MAX_STUDENT_CHARS)
