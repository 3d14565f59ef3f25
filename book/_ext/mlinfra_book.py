"""Sphinx extension of the mlinfra book: fixes that keep the HTML free of browser errors.

Contract: every built page loads with no JavaScript error and no console error, so the
browser test (tests/test_browser_book.py) can treat any error as a real regression.

Design decisions:
- sphinx-thebe (pulled in by Jupyter Book 1) registers its inline configuration script on
  `env-before-read-docs`, which fires more than once in a Jupyter Book build; the second
  copy redeclares `const THEBE_JS_URL` and throws. We drop duplicate script entries per page.
- pydata-sphinx-theme logs "Got invalid theme mode" on a first visit when no default mode is
  configured; `_config.yml` sets `html_context.default_mode`.
- ipywidgets: executed notebooks keep their widget state, and myst-nb embeds it with the
  widgets' HTML manager, by default from a CDN. When `make book` has vendored the manager
  into `_vendor/widgets/` (book/_ext/vendor-libs.sh, from the npm registry), the pages
  load it from `_static/widgets/` instead, so widgets render offline and in the browser
  test. (Not under the book's `_static/`: Jupyter Book would add every .js file there to
  every page.)
- MathJax likewise: when `_vendor/mathjax/` exists, formulas load MathJax from there.
- The widget manager typesets labels with MathJax 2's `MathJax.Hub.Queue`; the book loads
  MathJax 3, which has no `Hub`, so rendering a widget threw. A small shim maps the call
  onto MathJax 3's `typesetPromise`.
"""

from __future__ import annotations

from pathlib import Path

VENDOR = "_vendor"  # copied into the HTML's _static/, so _vendor/widgets -> _static/widgets
VENDORED_MANAGER = Path(VENDOR, "widgets", "html-manager", "embed-amd.js")
VENDORED_MATHJAX = Path(VENDOR, "mathjax", "tex-mml-chtml.js")


def _use_vendored_libraries(app, config) -> None:
    root = Path(app.confdir)
    if not (root / VENDOR).is_dir():
        return  # keep the CDN defaults (no npm when the book was built)
    config.html_static_path.append(VENDOR)
    if (root / VENDORED_MATHJAX).exists():
        config.mathjax_path = "mathjax/tex-mml-chtml.js"  # relative to _static/
    if not (root / VENDORED_MANAGER).exists():
        return  # keep myst-nb's CDN defaults
    config.nb_ipywidgets_js = {
        "widgets/require.js": {},
        "widgets/html-manager/embed-amd.js": {
            # only for widget libraries the bundle does not hold (none in this book)
            "data-jupyter-widgets-cdn": "https://cdn.jsdelivr.net/npm/",
        },
    }
    # The manager's webpack bundle finds its fonts next to its AMD module's URL, which
    # RequireJS derives from the module id ("@jupyter-widgets/controls",
    # "@jupyter-widgets/html-manager/dist/libembed-amd", ...) relative to the page. A global
    # `require` config, read by require.js when it loads, maps those ids next to our copy;
    # data-content_root (Sphinx 7.2+) is the book's root.
    app.add_js_file(
        None,
        priority=100,  # before require.js and the manager
        body="(() => { const here = new URL('_static/widgets/html-manager', new URL("
        "document.documentElement.dataset.content_root || './', document.baseURI)).href; "
        "window.require = {paths: {'@jupyter-widgets': here, "
        "'@jupyter-widgets/html-manager/dist': here}}; })();",
    )


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


MATHJAX2_SHIM = """
document.addEventListener("DOMContentLoaded", () => {
  const mj = window.MathJax;
  if (mj && !mj.Hub) {
    mj.Hub = {Queue: (job) => {
      const element = Array.isArray(job) ? job[2] : undefined;
      if (mj.typesetPromise) mj.typesetPromise(element ? [element] : undefined).catch(() => {});
    }};
  }
});
"""


def setup(app):
    app.add_js_file(None, body=MATHJAX2_SHIM, priority=100)
    app.connect("config-inited", _use_vendored_libraries)
    app.connect("html-page-context", _dedupe_scripts, priority=900)  # after the themes
    return {"parallel_read_safe": True, "parallel_write_safe": True}
