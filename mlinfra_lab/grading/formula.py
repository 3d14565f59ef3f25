"""Escape text that a spreadsheet could run as a formula, wherever a cell could begin in it.

Contract: `csv_safe(value)` returns `value` unchanged unless it is text in which a
spreadsheet could see a formula; then it returns the text with a ``'`` put where each such
cell would begin. `formula_risk(text)` says whether `text` needs it; `csv_unescape(text)` undoes `csv_safe` for a
sheet read back (``grade --manual``).

Design decisions:
- OWASP's CSV-injection rule: a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or
  a carriage return is a formula (or starts one) in Excel, LibreOffice or Google Sheets,
  so it gets a leading ``'``, which every one of them reads as "this cell is text". The test
  is made after stripping spaces: ``" =1+1"`` is a formula in a spreadsheet that trims.
- The first character is not the only place a cell begins. A spreadsheet that splits on a
  different separator than the writer used (Excel in a locale whose list separator is
  ``;``, an import that guesses tabs or ``|``) starts a new cell after each ``;``, ``,``,
  tab, ``|`` or line break inside the text, where Python's `csv` quotes nothing (it quotes
  only its own delimiter). So after every such separator, when the rest (spaces stripped)
  starts with a formula character, a ``'`` goes right after the separator:
  ``"x; =cmd"`` becomes ``"x;' =cmd"``, which is text however it is split.
- Numbers, ``None`` and other non-text values are returned as they are: a spreadsheet
  writes them as numbers, not formulas.
- Only what leaves for a spreadsheet is escaped; the JSON and the database keep the text
  as it came.
"""

from __future__ import annotations

import re

__all__ = ["FORMULA_STARTS", "SEPARATORS", "csv_safe", "csv_unescape", "formula_risk"]

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
SEPARATORS = ",;\t|\r\n"  # where a spreadsheet on another separator starts a cell
_TRIGGER = "=+\\-@"
# a separator followed (after any spaces) by a formula character
_INNER = re.compile(rf"([{re.escape(SEPARATORS)}])(?=\s*[{_TRIGGER}])")
_LEADING = re.compile(rf"^\s*[{_TRIGGER}]")
_ESCAPED_INNER = re.compile(rf"([{re.escape(SEPARATORS)}])'(?=[\s']*[{_TRIGGER}])")


def formula_risk(text: str) -> bool:
    """True when some cell a spreadsheet could cut out of `text` would be a formula."""
    return bool(text.startswith(FORMULA_STARTS) or _LEADING.match(text) or _INNER.search(text))


def csv_safe(value: object) -> object:
    """`value`, with ``'`` where a cell a spreadsheet could see in it would be a formula."""
    if not isinstance(value, str) or not formula_risk(value):
        return value
    text = _INNER.sub(r"\1'", value)
    if text.startswith(FORMULA_STARTS) or _LEADING.match(text):
        text = "'" + text
    return text


def csv_unescape(text: str) -> str:
    """`text` as it was before `csv_safe` (the ``'`` it added taken out). A text that
    really held such a ``'`` reads back without it: a reader that must match names tries
    the text as written first."""
    if text.startswith("'") and formula_risk(text[1:]):
        text = text[1:]
    return _ESCAPED_INNER.sub(r"\1", text)
