"""Check one parsed submission field by field before anything else touches it.

Contract: `malformed(nb)` returns None for a notebook whose every field grading reads has
the type nbformat 4 gives it, else one line naming the first field that does not (its
place and the type found, never its content): ``cell 3: 'source' is a int, not text``.
A submission with a malformed field is reported as not graded with that line; its
neighbours are graded as usual.

What is checked (everything `submissions`, `restore`, `manual`, `kernel_runner` and the
gradebook read): the notebook is an object with a ``cells`` list and a ``metadata``
object; ``metadata.mlinfra`` (the release stamp), when present, an object whose ``lab`` is
text; every cell an object with a known ``cell_type`` (code, markdown, raw), text
``source``, an object ``metadata`` whose ``tags`` is a list of text, ``checksum`` text and
``exercise`` text when present, and an ``id`` of text when present; a code cell's
``outputs`` a list and ``execution_count`` an integer or null; ``attachments`` an object.

Design decisions:
- A schema of our own rather than ``nbformat.validate``: a notebook a student's tool saved
  with an extra key, or an output of an unusual shape, is still gradeable (outputs are
  cleared), while a wrong type in a field the tools read is what made one bad file stop a
  whole batch. Checking the fields read, and only them, keeps both.
- Run on the parsed notebook as `submissions` reads it (after nbformat joined list sources
  and upgraded old versions), so a field nbformat repairs is not refused.
- Messages name places and types only: a submission's text never reaches the instructor's
  console from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CELL_TYPES", "MAX_ID_CHARS", "malformed"]

CELL_TYPES = ("code", "markdown", "raw")
MAX_ID_CHARS = 64  # nbformat's limit on a cell id


def _type(value: Any) -> str:
    return type(value).__name__


def _cell(cell: Any, where: str) -> str | None:
    if not isinstance(cell, Mapping):
        return f"{where} is a {_type(cell)}, not a cell object"
    kind = cell.get("cell_type")
    if not isinstance(kind, str) or kind not in CELL_TYPES:
        shown = repr(kind) if isinstance(kind, str) and kind.isidentifier() else _type(kind)
        return f"{where}: 'cell_type' is {shown[:40]}, not one of {', '.join(CELL_TYPES)}"
    if not isinstance(cell.get("source", ""), str):
        return f"{where}: 'source' is a {_type(cell.get('source'))}, not text"
    cell_id = cell.get("id")
    if cell_id is not None and (not isinstance(cell_id, str) or len(cell_id) > MAX_ID_CHARS):
        return f"{where}: 'id' is not text of at most {MAX_ID_CHARS} characters"
    meta = cell.get("metadata", {})
    if not isinstance(meta, Mapping):
        return f"{where}: 'metadata' is a {_type(meta)}, not an object"
    tags = meta.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        return f"{where}: 'metadata.tags' is not a list of text"
    for key in ("checksum", "exercise"):
        if key in meta and not isinstance(meta[key], str):
            return f"{where}: 'metadata.{key}' is a {_type(meta[key])}, not text"
    if not isinstance(cell.get("attachments", {}), Mapping):
        return f"{where}: 'attachments' is a {_type(cell.get('attachments'))}, not an object"
    if kind == "code":
        if not isinstance(cell.get("outputs", []), list):
            return f"{where}: 'outputs' is a {_type(cell.get('outputs'))}, not a list"
        count = cell.get("execution_count")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
            return f"{where}: 'execution_count' is a {_type(count)}, not a number or null"
    return None


def malformed(nb: Any) -> str | None:
    """None for a well-formed notebook, else the first malformed field (see the docstring)."""
    if not isinstance(nb, Mapping):
        return f"the notebook is a {_type(nb)}, not an object"
    meta = nb.get("metadata", {})
    if not isinstance(meta, Mapping):
        return f"the notebook's 'metadata' is a {_type(meta)}, not an object"
    stamp = meta.get("mlinfra", {})
    if not isinstance(stamp, Mapping):
        return f"'metadata.mlinfra' is a {_type(stamp)}, not an object"
    if "lab" in stamp and not isinstance(stamp["lab"], str):
        return f"'metadata.mlinfra.lab' is a {_type(stamp['lab'])}, not text"
    cells = nb.get("cells")
    if not isinstance(cells, list):
        return f"the notebook's 'cells' is a {_type(cells)}, not a list"
    for number, cell in enumerate(cells):
        problem = _cell(cell, f"cell {number}")
        if problem is not None:
            return problem
    return None
