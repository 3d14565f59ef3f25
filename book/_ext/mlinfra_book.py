"""Sphinx extension of the mlinfra book: fixes that keep the HTML free of browser errors.

Contract: every built page loads with no JavaScript error and no console error, so the
browser test (tests/test_browser_book.py) can treat any error as a real regression.

Design decisions:
- sphinx-thebe (pulled in by Jupyter Book 1) registers its inline configuration script on
  `env-before-read-docs`, which fires more than once in a Jupyter Book build; the second
  copy redeclares `const THEBE_JS_URL` and throws. We drop duplicate script entries per page.
- pydata-sphinx-theme logs "Got invalid theme mode" on a first visit when no default mode is
  configured; `_config.yml` sets `html_context.default_mode`.
"""

from __future__ import annotations


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    seen: set[tuple] = set()
    unique = []
    for script in context.get("script_files", []):
        # The two copies differ only in filename '' versus None: compare what is emitted.
        filename = (script.filename if hasattr(script, "filename") else str(script)) or ""
        key = (filename, tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", _dedupe_scripts, priority=900)  # after the themes
    return {"parallel_read_safe": True, "parallel_write_safe": True}
