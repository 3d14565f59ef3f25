"""Read a JSON file so that every error can name the file and the line.

Contract: ``load_json(path)`` returns the parsed document or raises `JsonFileError` whose
message is ``"<file>:<line>:<col>: <what is wrong>"``; ``line_of(text, path)`` returns the
line on which the value at a JSON path (``["losses", 3]``) starts, for messages about a
document that parsed but holds a wrong value.

Design decisions: the standard library's parser reports positions only for syntax errors,
so ``line_of`` walks the text once with ``json.JSONDecoder.raw_decode`` for the scalars
and tracks where each container member starts. It is small and only runs on the error
path, where a clear message is worth a second pass over a few kilobytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = ["JsonFileError", "line_of", "load_json"]

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


class JsonFileError(MlinfraError, ValueError):
    """A JSON file is missing or does not parse; the message names the file and line."""


def load_json(
    path: str | Path,
    *,
    what: str = "JSON file",
    hint: str = "",
    error: type[Exception] = JsonFileError,
) -> tuple[Any, str]:
    """Parse `path`; return ``(document, text)``, or raise `error` naming file and line.

    `what` and `hint` go into the message; `error` lets a caller raise its own subclass.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise error(f"{path}: no such {what}{'; ' + hint if hint else ''}") from None
    try:
        return json.loads(text), text
    except json.JSONDecodeError as err:
        raise error(
            f"{path}:{err.lineno}:{err.colno}: malformed {what}: {err.msg}"
            f"{'; ' + hint if hint else ''}"
        ) from None


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _offset(text: str, i: int, path: Sequence[str | int]) -> int:
    """Offset where the value at `path` starts, given that a value starts at `i`."""
    i = _skip(text, i)
    if not path:
        return i
    head, rest = path[0], path[1:]
    if text[i] == "{":
        i = _skip(text, i + 1)
        while text[i] != "}":
            key, i = _DECODER.raw_decode(text, i)
            i = _skip(text, i) + 1  # the ':'
            if key == head:
                return _offset(text, i, rest)
            _, i = _DECODER.raw_decode(text, _skip(text, i))
            i = _skip(text, i)
            if text[i] == ",":
                i = _skip(text, i + 1)
    elif text[i] == "[":
        i, index = _skip(text, i + 1), 0
        while text[i] != "]":
            if index == head:
                return _offset(text, i, rest)
            _, i = _DECODER.raw_decode(text, i)
            i, index = _skip(text, i), index + 1
            if text[i] == ",":
                i = _skip(text, i + 1)
    raise KeyError(head)


def line_of(text: str, path: Sequence[str | int]) -> int:
    """1-based line where the value at `path` starts in `text`; 1 if it cannot be found."""
    try:
        return text.count("\n", 0, _offset(text, 0, list(path))) + 1
    except (KeyError, IndexError, ValueError):
        return 1
