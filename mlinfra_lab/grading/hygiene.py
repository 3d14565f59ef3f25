"""Text from a submission made safe to print: no control characters, escapes or separators.

Contract: `printable(text)` returns `text` with every character a terminal, a spreadsheet
or a log could act on (C0/C1 controls, ``ESC`` sequences, Unicode format characters such as
bidirectional overrides, surrogates, private-use and unassigned code points) written as a
visible escape (``\\x1b``, ``\\u202e``), cut at `limit` characters; `safe_student(name)` is
a student identifier made from a file or folder name: `printable`, then path separators
(``/``, ``\\``) replaced by ``_``, and a name that is only dots (``.``, ``..``) prefixed, so
a later step that writes a file per student (feedback) stays in its folder.

Design decisions:
- Escape, do not drop: two names that differ only in an invisible character stay two
  different identifiers (dropping it would let ``alice\\u200b`` merge into ``alice``), and
  the instructor sees that something odd was there.
- Idempotent: escaped text is printable, so a second pass (a gradebook read back by
  ``--merge``) changes nothing. A backslash is therefore left as it is: a file name that
  spells ``\\x1b`` shows as such, which is harmless.
- Applied where the text enters the grading tools (`submissions`, `grade`): every later
  consumer (the console, the CSV, the JSON, a report) gets the safe text; HTML writers must
  still escape ``<`` and ``&`` (this module is about control characters, not markup).
- Standard library only.
"""

from __future__ import annotations

import unicodedata

__all__ = ["MAX_NAME_CHARS", "printable", "safe_student"]

MAX_NAME_CHARS = 120  # a student identifier longer than this is cut (with a marker)
_SEPARATORS = ("/", "\\")


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _unsafe(char: str) -> bool:
    return unicodedata.category(char).startswith("C")  # Cc, Cf, Cs, Co, Cn


def printable(text: object, limit: int | None = None) -> str:
    """`text` with control and format characters escaped, at most `limit` characters."""
    out = "".join(_escape(c) if _unsafe(c) else c for c in str(text))
    if limit is not None and len(out) > limit:
        out = out[: max(0, limit - 3)] + "..."
    return out


def safe_student(name: str) -> str:
    """A student identifier from a file or folder name (see the module docstring)."""
    out = str(name)
    for sep in _SEPARATORS:
        out = out.replace(sep, "_")
    out = printable(out, MAX_NAME_CHARS)
    if out and set(out) == {"."}:
        out = "_" + out
    return out
