"""The name a student's tool gave a copy of a notebook, read back as the name it copies.

Contract: `original_stem(stem)` returns ``(stem without copy marks, the marks found)``:
Colab's ``Copy of X`` (saving a copy to Drive, any number of times) and a browser's
``X (1)`` (a second download of the same name) both read as ``X``. `describe(marks)` is the
note for the gradebook.

Design decisions:
- Only these two marks, as the tools write them (``Copy of `` at the start, with its space;
  `` (N)`` at the end, N digits, the space optional as some browsers drop it), repeated
  in any order: a student named ``Copy`` or a lab ending in digits is not touched.
- The file name only ever proposes a student and a lab; the mark is recorded in a note on
  the submission, so the instructor sees that a copy was graded, and two files that read
  as the same name are both shown (see `submissions`).
"""

from __future__ import annotations

import re

__all__ = ["BROWSER_MARK", "COLAB_MARK", "describe", "original_stem"]

COLAB_MARK = "Copy of "
BROWSER_MARK = re.compile(r"\s?\((\d{1,4})\)$")


def original_stem(stem: str) -> tuple[str, tuple[str, ...]]:
    """(`stem` without Colab's and browsers' copy marks, the marks found, outermost first)."""
    marks: list[str] = []
    while True:
        if stem.startswith(COLAB_MARK) and len(stem) > len(COLAB_MARK):
            marks.append(COLAB_MARK.strip())
            stem = stem[len(COLAB_MARK) :]
            continue
        found = BROWSER_MARK.search(stem)
        if found and found.start() > 0:
            marks.append(f"({found.group(1)})")
            stem = stem[: found.start()]
            continue
        return stem, tuple(marks)


def describe(name: str, marks: tuple[str, ...]) -> str:
    """The gradebook note for a file `name` read without its copy `marks`."""
    what = " and ".join(
        "a Colab copy ('Copy of')" if m == COLAB_MARK.strip() else f"a browser's copy ('{m}')"
        for m in marks
    )
    return f"the file is named {name!r}, {what}: read without the mark"
