"""`mlinfra_lab.attention` exports what the chapters and labs call, nothing more (issue 31).

Each name of its ``__all__`` must be one a page of the book or a lab uses (its text found
in a notebook, a Markdown page or a book helper), an exception class a reader catches, or
a listed constant with its reason. A name nothing uses fails here: move it to the module
that needs it and import it from there (as the tests do for `tiles.check_tile_config`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import mlinfra_lab.attention as attention

pytestmark = pytest.mark.foundation

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    *ROOT.glob("book/**/*.ipynb"),
    *ROOT.glob("book/**/*.md"),
    *ROOT.glob("book/**/*.py"),
    *ROOT.glob("labs/*.ipynb"),
]
# Exports no page names, each with why a reader still needs it from the package.
CONSTANTS = {"BACKENDS": "the values `sdpa_backends(backends=...)` accepts"}


def test_every_export_is_used_by_a_page_or_is_an_error_a_reader_catches():
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    unused = [
        name
        for name in attention.__all__
        if name not in text
        and name not in CONSTANTS
        and not (isinstance(obj := getattr(attention, name), type) and issubclass(obj, Exception))
    ]
    assert PAGES and not unused, f"exported but used by no chapter or lab: {unused}"


def test_the_listed_constants_are_still_exported():
    assert set(CONSTANTS) <= set(attention.__all__)
