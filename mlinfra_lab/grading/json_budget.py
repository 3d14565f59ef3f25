"""Check a notebook's JSON shape in one bounded pass before anything loads it.

Contract: `json_too_complex(text, max_values, max_depth)` returns None when the JSON text
holds at most `max_values` values and nests at most `max_depth` containers deep, else the
one-line reason the submission is not graded. It stops reading at the first limit passed,
so a hostile file costs at most that many steps, whatever its size.

Design decisions:
- The grading process parses every submission itself (`submissions`): a file that is
  small on disk but made of millions of tiny objects (``[{},{},...]``: 17 MB is about six
  million dicts) would cost gigabytes and most of a minute in ``json.loads`` and nbformat's
  validation, and that cost falls on the grading process, not on a sandbox. The file-size
  budget cannot see it; counting does.
- What is counted: every opening ``{`` or ``[`` and every ``,`` outside a string (a value
  after the first in a container). Strings are skipped whole by one regular expression
  (the unrolled ``"[^"\\]*(?:\\.[^"\\]*)*"``, linear in their length), so base64 images
  cost little. Text that is not JSON is left to ``json.loads``, which reports it.
- The defaults (`DEFAULT_MAX_JSON_VALUES`, `DEFAULT_MAX_JSON_DEPTH`) are far above a lab
  with outputs (a released lab has a few thousand values and nests about six deep).
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_MAX_JSON_DEPTH", "DEFAULT_MAX_JSON_VALUES", "json_too_complex"]

DEFAULT_MAX_JSON_VALUES = 500_000
DEFAULT_MAX_JSON_DEPTH = 100
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')


def json_too_complex(
    text: str,
    max_values: int | None = DEFAULT_MAX_JSON_VALUES,
    max_depth: int | None = DEFAULT_MAX_JSON_DEPTH,
) -> str | None:
    """Why the JSON `text` is too large a structure to load, or None (see the module
    docstring)."""
    values, depth = 1, 0
    for match in _TOKEN.finditer(text):
        mark = text[match.start()]
        if mark == '"':
            continue
        if mark in "{[":
            depth += 1
            values += 1
            if max_depth is not None and depth > max_depth:
                return (
                    f"the notebook's JSON nests more than {max_depth} levels deep (a lab nests "
                    "about six); not graded: save the notebook from Jupyter and submit again"
                )
        elif mark in "}]":
            depth -= 1
        else:
            values += 1
        if max_values is not None and values > max_values:
            return (
                f"the notebook's JSON holds more than {max_values:,} values (a lab holds a few "
                "thousand); not graded: clear its outputs, save it and submit again"
            )
    return None
