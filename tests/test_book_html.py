"""The built-page checks that need no browser, on pages rendered as myst-nb renders them."""

from __future__ import annotations

import pytest
from _book_html import raw_markdown_tables
from markdown_it import MarkdownIt

from mlinfra_lab.scaling import OpRow, format_op_table, op_table_html

pytestmark = pytest.mark.foundation

ROWS = [
    OpRow("gloo:all_reduce", "communication", 2, 3.5, 3.5, 0.6),
    OpRow("aten::addmm|x", "compute", 4, 1.25, 1.0, 0.2),
]


def test_a_markdown_table_rendered_as_commonmark_is_caught():
    # myst-nb's default for a text/markdown output is CommonMark, which has no tables: the
    # chapter's profiler table once reached the page as this paragraph of bars and dashes.
    page = MarkdownIt("commonmark").render(format_op_table(ROWS))
    assert "<table" not in page
    assert raw_markdown_tables(page) == ["|---|---|---:|---:|---:|---:|"]


# An excerpt of the chapter 2 page as `jupyter-book build` rendered it before the fix: the
# paragraph that `display(Markdown(format_op_table(ops)))` became, smartquotes included.
BUILT_BEFORE_THE_FIX = (
    "<p>| operator | kind | calls | total ms | self ms | of the step |\n"
    "|\u2014|\u2014|\u2014:|\u2014:|\u2014:|\u2014:|\n"
    '| <code class="docutils literal notranslate"><span class="pre">_EmulatedDeviceBackward'
    "</span></code> | compute | 4 | 55.24 | 55.24 | 50% |\n"
    '| <code class="docutils literal notranslate"><span class="pre">gloo:all_reduce</span>'
    "</code> | communication | 4 | 38.57 | 38.57 | 35% |</p>"
)


def test_the_built_page_before_the_fix_is_caught():
    assert raw_markdown_tables(BUILT_BEFORE_THE_FIX) == [
        "|\u2014|\u2014|\u2014:|\u2014:|\u2014:|\u2014:|"
    ]
    assert raw_markdown_tables("<p>| a | b |\n|:--|--:|</p>")  # "--" became an en dash


def test_a_rendered_table_and_markdown_shown_as_code_pass():
    assert (
        raw_markdown_tables(MarkdownIt("commonmark").enable("table").render(format_op_table(ROWS)))
        == []
    )
    assert raw_markdown_tables(f"<pre><code>{format_op_table(ROWS)}</code></pre>") == []
    assert raw_markdown_tables("<p>a | b, then c --- d</p>") == []
    assert raw_markdown_tables("<p>a \u2014 b | c \u2014 d</p>") == []


def test_the_html_op_table_is_a_table_with_escaped_names():
    page = op_table_html(ROWS)
    assert page.startswith("<table") and page.count("<tr>") == 3
    assert "<code>aten::addmm|x</code>" in page and "60%" in page
    assert raw_markdown_tables(page) == []
    assert "&lt;b&gt;" in op_table_html([OpRow("<b>", "compute", 1, 1.0, 1.0, 0.1)])
