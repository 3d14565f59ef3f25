"""The built book, opened as a reader would: every page in headless Chromium.

Contract: after `make book`, every page of the table of contents loads without a JavaScript
error, every internal link (and its #anchor) points at something that exists, every image
rendered, no Markdown table reached the page as raw text (`_book_html.py`), and a full-page
screenshot of each page lands in `_build/screenshots/`.

Design decisions:
- The HTML is served over http://127.0.0.1 (not file://), as a reader's browser would see it.
- The machine has no internet: requests to other hosts (CDN scripts such as MathJax) are
  aborted up front, and only errors of our own origin count, so the test is deterministic.
- Debian's Chromium is driven by Playwright (`executable_path`, $MLINFRA_CHROMIUM); `make
  browser` finds one first (.ci/chromium.py: Debian's, or Playwright's own download).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlparse

import pytest
import yaml
from _book_html import raw_markdown_tables

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = os.environ.get("MLINFRA_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]


def toc_pages() -> list[str]:
    """Page paths (without suffix) in `_toc.yml` order, the root first."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [chapter["file"] for chapter in part.get("chapters", [])]
    return pages


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve `directory` over http://127.0.0.1 on a free port; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()


def offline(page, origin: str) -> None:
    """The machine has no internet: abort every request that leaves `origin` (CDNs, fonts)."""
    page.route(
        "**/*",
        lambda route: (
            route.continue_() if urlparse(route.request.url).netloc == origin else route.abort()
        ),
    )


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    if not (HTML / "index.html").exists():
        pytest.fail("the book is not built: run `make book` first (writes _build/html)")
    with serve(HTML) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"no Chromium at {CHROMIUM}: apt-get install chromium (or set MLINFRA_CHROMIUM; "
            "`make browser` also tries Playwright's own)"
        )
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        yield context
        context.close()


@pytest.fixture(scope="module", autouse=True)
def fresh_screenshots() -> None:
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)


def test_every_toc_page_was_built() -> None:
    missing = [p for p in toc_pages() if not (HTML / f"{p}.html").exists()]
    assert not missing, f"pages in _toc.yml with no HTML in _build/html: {missing}"


@functools.cache
def _ids_in(path: Path) -> frozenset[str]:
    """The element ids of a built HTML file (the targets of #anchors)."""
    return frozenset(re.findall(r'\bid="([^"]+)"', path.read_text(encoding="utf-8")))


def page_problems(browser, base_url: str, html_root: Path, page_path: str) -> list[str]:
    """Load one page and return what is wrong with it (empty when it renders cleanly).

    Checks JavaScript errors, console errors of our origin, failed requests to our server,
    images that did not decode, internal links (files and #anchors) and Markdown tables left
    as raw text; saves a screenshot.
    """
    page = browser.new_page()
    origin = urlparse(base_url).netloc
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"JavaScript error: {exc}"))

    def on_console(msg) -> None:
        location = (msg.location or {}).get("url", "")
        if msg.type == "error" and urlparse(location).netloc in ("", origin):
            problems.append(f"console error: {msg.text} ({location})")

    page.on("console", on_console)
    page.on(
        "requestfailed",
        lambda req: (
            problems.append(f"request failed: {req.url}")
            if urlparse(req.url).netloc == origin
            else None
        ),
    )
    offline(page, origin)
    url = urljoin(base_url, f"{page_path}.html")
    response = page.goto(url, wait_until="load")
    if response is None or not response.ok:
        problems.append(f"{url} answered {response and response.status}")

    # Widgets and formulas render from the vendored copies (`make book` vendors them from
    # the npm registry; without them the pages use a CDN, which this offline test blocks).
    html = (html_root / f"{page_path}.html").read_text(encoding="utf-8")
    if (ROOT / "_vendor" / "widgets").exists() and "widget-state+json" in html:
        try:
            # attached, not visible: Playwright tries the first match only, and a page's
            # first widget may sit in a collapsed output (chapter 5's first progress bar)
            page.wait_for_selector(".jupyter-widgets", state="attached", timeout=15_000)
        except Exception:  # noqa: BLE001 (playwright's TimeoutError)
            problems.append("a widget did not render (its saved state is in the page)")
    if (ROOT / "_vendor" / "mathjax").exists() and 'class="math' in html:
        try:
            page.wait_for_selector("mjx-container", timeout=15_000)
        except Exception:  # noqa: BLE001 (playwright's TimeoutError)
            problems.append("no formula was typeset by MathJax")

    # Every table rendered: a pipe table shown as text (myst-nb renders a Markdown output as
    # CommonMark, which has no tables) is a broken output.
    problems += [f"raw Markdown table on the page: {row}" for row in raw_markdown_tables(html)]

    # Every image of our own origin decoded to a real picture (a figure that rendered).
    broken = page.eval_on_selector_all(
        "img",
        "imgs => imgs.filter(i => i.src.startsWith(location.origin)"
        " && !(i.complete && i.naturalWidth > 0)).map(i => i.src)",
    )
    problems += [f"image did not render: {src}" for src in broken]

    # Every internal link points at a built file, and its #anchor exists there.
    for href in sorted(set(page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)"))):
        target, fragment = urldefrag(href)
        parsed = urlparse(target)
        if parsed.netloc != origin:
            continue
        path = html_root / parsed.path.lstrip("/")
        if path.is_dir():
            path = path / "index.html"
        if not path.exists():
            problems.append(f"broken link: {href} (no such file)")
        elif fragment and path.suffix == ".html" and fragment not in _ids_in(path):
            problems.append(f"broken link: {href} (no #{fragment} on that page)")

    shot = SHOTS if html_root == HTML else html_root / "screenshots"
    shot.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot / f"{page_path.replace('/', '__')}.png"), full_page=True)
    page.close()
    return problems


@pytest.mark.parametrize("page_path", toc_pages())
def test_page_renders_cleanly(page_path: str, server: str, browser) -> None:
    problems = page_problems(browser, server, HTML, page_path)
    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)


def test_checker_catches_a_broken_page(tmp_path: Path, browser) -> None:
    """The checks above can fail: a page with each kind of fault is reported for each."""
    (tmp_path / "bad.html").write_text(
        "<html><body><h1 id='top'>bad</h1>"
        "<script>throw new Error('boom')</script>"
        "<img src='missing.png'><a href='nowhere.html'>x</a><a href='bad.html#nope'>y</a>"
        "<p>| op | ms |\n|---|---:|\n| addmm | 1.0 |</p>"
        "</body></html>"
    )
    with serve(tmp_path) as base:
        problems = "\n".join(page_problems(browser, base, tmp_path, "bad"))
    assert "JavaScript error" in problems and "boom" in problems
    assert "image did not render" in problems
    assert "nowhere.html (no such file)" in problems
    assert "no #nope on that page" in problems
    assert "raw Markdown table on the page: |---|---:|" in problems


@pytest.mark.parametrize("page_path", ["book/01_fused_attention", "book/labs/01_fused_attention"])
def test_notebook_pages_offer_colab_and_jupyterhub_launch(
    page_path: str, server: str, browser
) -> None:
    """Launch buttons are built from `repository.url` in _config.yml (README: set your fork)
    and open the page's own notebook: on a lab page, the student edition in book/labs/."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = urlparse(config["repository"]["url"]).path.strip("/")
    page = browser.new_page()
    offline(page, urlparse(server).netloc)
    page.goto(urljoin(server, f"{page_path}.html"), wait_until="load")
    hrefs = page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)")
    page.close()
    colab = [h for h in hrefs if h.startswith("https://colab.research.google.com/github/")]
    assert colab and repo in colab[0], f"no Colab launch link for {repo}: {hrefs[:20]}"
    assert colab[0].endswith(f"/{page_path}.ipynb"), f"Colab opens {colab[0]}, not {page_path}"
    hub = [unquote(h) for h in hrefs if "/hub/user-redirect/" in h]
    if config["launch_buttons"].get("jupyterhub_url"):
        assert hub and f"/{page_path}.ipynb" in hub[0], f"JupyterHub opens {hub}, not {page_path}"
    else:
        assert not hub, f"no jupyterhub_url is configured, yet {page_path} has a JupyterHub button"
