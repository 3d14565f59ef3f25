"""Checks of a built book page's HTML that need no browser: raw Markdown left unrendered.

Contract: `raw_markdown_tables(html)` returns the delimiter rows (``|---|---:|``) of Markdown
pipe tables that reached the page as text instead of as a `<table>`; empty on a clean page.

Design decisions:
- A pipe table's delimiter row is what no rendered page shows as text: the header row alone
  could be prose with bars in it, the delimiter row cannot. On a built page Sphinx's
  smartquotes have already turned its dashes into en and em dashes. Code (`<pre>`, `<code>`),
  scripts and styles are dropped first, so a page may still *show* Markdown source.
- myst-nb renders a cell's text/markdown output as CommonMark by default, and CommonMark has
  no tables: a `display(Markdown(pipe_table))` becomes one paragraph of bars and dashes. That
  is the failure this catches; an HTML table (or a DataFrame) renders.
"""

from __future__ import annotations

import html as html_lib
import re

_DROP = re.compile(r"<(pre|code|script|style)\b.*?</\1>", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]+>")
# A delimiter cell is dashes with optional colons; Sphinx's smartquotes turn "---" into an
# em dash and "--" into an en dash on the built page, so those count as dashes too.
_CELL = r"\s*:?[-\u2013\u2014]+:?\s*"
_DELIMITER_ROW = re.compile(rf"^\s*\|?{_CELL}(?:\|{_CELL})+\|?\s*$")


def raw_markdown_tables(html: str) -> list[str]:
    """Delimiter rows of Markdown pipe tables shown as text on a built page."""
    text = html_lib.unescape(_TAG.sub("\n", _DROP.sub("", html)))
    return [line.strip() for line in text.splitlines() if _DELIMITER_ROW.match(line)]
