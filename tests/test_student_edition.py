"""The published book is the student edition of the labs: no solution, no hidden test.

Contract: no file a reader can fetch from `_build/html` (pages, `_sources` copies,
downloadable .ipynb, the search index `searchindex.js`) holds a line of a solution block,
a hidden test or a wrong answer of the instructor labs in `labs/`; every lab page shows the
student notebook `book/labs/<lab>.ipynb` unexecuted (its stubs, no outputs), and its Colab,
JupyterHub and download buttons open that notebook. `book/labs/` is exactly what
`mlinfra-lab release labs/` makes, plus myst-nb's "do not execute" metadata.

Two stages:
- Unit (no build needed): `book/labs/` equals a fresh release of `labs/` (else: `make
  release-labs`), `_toc.yml` lists `book/labs/` and never `labs/`, and the leak checker
  finds leaks planted in a fake build (so a green run means something).
- `browser` marker (make test's browser stage, right after `make book`): the real
  `_build/html`. Under make a missing build fails; run by hand, those tests skip and say so.

Design decisions:
- A secret is a line of a solution block, hidden-test block, wrong-answer cell or written
  answer's model (a `manual` cell) of
  `labs/`, whitespace-normalised, that is not trivial (fewer than two names or numbers
  besides Python keywords: `else:`, `return out`, `pass`, lone brackets) and that occurs in
  no public source (the student notebooks, the chapters, the intro): a line the course
  publishes on purpose reveals nothing.
- A secret leaks when it occurs in a file's text on word boundaries. HTML is read as text
  (tags dropped, entities decoded, script bodies and attribute values kept), so syntax
  highlighting cannot hide a line; notebooks by every string they hold (sources, outputs,
  metadata).
- The search index holds stemmed words, not lines: it leaks when it indexes a name that
  only secret lines contain (stemmed the way Sphinx stems; numbers do not count, nor what a
  chapter printed when the build executed it), or, for a lab page, any word that is not in
  its student notebook.
"""

from __future__ import annotations

import functools
import html
import html.parser
import importlib.util
import json
import keyword
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
LABS = ROOT / "labs"
STUDENT_LABS = ROOT / "book" / "labs"
BEGIN_END = {
    "solution": ("### BEGIN SOLUTION", "### END SOLUTION"),
    "hidden test": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"),
}
WRONG_ANSWER_TAG = "wrong-answer"
MANUAL_TAG = "manual"


def _student_labs_module() -> Any:
    """book/_ext/student_labs.py, the writer behind `make release-labs`."""
    path = ROOT / "book" / "_ext" / "student_labs.py"
    spec = importlib.util.spec_from_file_location("student_labs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


student_labs = _student_labs_module()


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


# --- reading text the way a reader (or a scraper) would -----------------------------------


def normalise(text: str) -> str:
    """Each line with its runs of whitespace collapsed to one space and stripped."""
    return "\n".join(" ".join(line.split()) for line in text.splitlines())


def _strings(node: Any) -> list[str]:
    """Every string of a notebook's JSON; a list of strings (a cell's source) joined."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        if node and all(isinstance(item, str) for item in node):
            return ["".join(node)]
        return [s for item in node for s in _strings(item)]
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    return []


def notebook_text(nb: Any) -> str:
    return "\n".join(_strings(nb))


class _HTMLText(html.parser.HTMLParser):
    """Text of an HTML page: character data (script bodies included) and attribute values."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.attributes: list[str] = []  # kept apart: they must not split a line of code

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attributes += [value for _, value in attrs if value]

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_text(markup: str) -> str:
    parser = _HTMLText()
    parser.feed(markup)
    parser.close()
    return "".join(parser.parts) + "\n" + "\n".join(parser.attributes)


def file_text(path: Path) -> str:
    """What a reader gets from a published file, as normalised text."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".ipynb":
        return normalise(notebook_text(json.loads(raw)))
    if path.suffix == ".html":
        return normalise(html_text(raw))
    return normalise(raw)


@functools.cache
def _pattern(line: str) -> re.Pattern[str]:
    """`line` as a regex that matches only on word boundaries (`pad = 0` is not in `xpad = 0`)."""
    before = r"(?<!\w)" if re.match(r"\w", line) else ""
    after = r"(?!\w)" if re.search(r"\w$", line) else ""
    return re.compile(before + re.escape(line) + after)


def occurs(line: str, text: str) -> bool:
    # The plain substring test first (a fast search in C): most lines are not in the text at
    # all, and the word-boundary regex over megabytes of text is what took minutes.
    return line in text and _pattern(line).search(text) is not None


# --- the secrets of the instructor labs ---------------------------------------------------


@dataclass(frozen=True)
class Secret:
    lab: str  # file name in labs/
    kind: str  # "solution", "hidden test", "wrong answer" or "model answer"
    line: str  # whitespace-normalised


def is_trivial(line: str) -> bool:
    """Fewer than two names or numbers that are not Python keywords (`else:`, `return x`)."""
    tokens = re.findall(r"[A-Za-z_]\w*|\d+", line)
    return len([t for t in tokens if not keyword.iskeyword(t)]) < 2


def marked_lines(source: str, begin: str, end: str) -> list[str]:
    """The lines strictly between `begin` and `end` marker lines."""
    lines, inside = [], False
    for line in source.splitlines():
        if line.strip() == begin:
            inside = True
        elif line.strip() == end:
            inside = False
        elif inside:
            lines.append(line)
    return lines


def lab_secret_lines(nb: Any) -> list[tuple[str, str]]:
    """(kind, normalised line) of every solution, hidden-test, wrong-answer and model-answer
    line of `nb`."""
    found = []
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if WRONG_ANSWER_TAG in cell.get("metadata", {}).get("tags", []):
            found += [("wrong answer", line) for line in source.splitlines()]
            continue
        if MANUAL_TAG in cell.get("metadata", {}).get("tags", []):  # a written answer's model
            found += [("model answer", line) for line in source.splitlines()]
            continue
        for kind, (begin, end) in BEGIN_END.items():
            found += [(kind, line) for line in marked_lines(source, begin, end)]
    return [(kind, " ".join(line.split())) for kind, line in found]


def public_sources(released: dict[str, Any]) -> str:
    """The normalised text of what the course publishes on purpose: student labs, chapters,
    the markdown pages, the bibliography the references page renders, and the package's own
    source (on PyPI in the wheel; chapter 1 prints its kernel to teach from it, and a lab
    line that is also a line of that kernel is no instructor secret)."""
    texts = [notebook_text(nb) for nb in released.values()]
    texts += [notebook_text(json.loads(p.read_text())) for p in ROOT.glob("book/*.ipynb")]
    texts += [p.read_text() for p in [*ROOT.glob("book/*.md"), *ROOT.glob("book/*.bib")]]
    texts += [p.read_text() for p in sorted((ROOT / "mlinfra_lab").rglob("*.py"))]
    return normalise("\n".join(texts))


@functools.cache
def released() -> dict[str, Any]:
    """File name -> student notebook (as the book shows it) of every lab in labs/."""
    return student_labs.released_labs(LABS)


@functools.cache
def secrets() -> tuple[Secret, ...]:
    public = public_sources(released())
    found: dict[str, Secret] = {}
    for lab in sorted(LABS.glob("*.ipynb")):
        for kind, line in lab_secret_lines(json.loads(lab.read_text())):
            if line and not is_trivial(line) and line not in found and not occurs(line, public):
                found[line] = Secret(lab.name, kind, line)
    return tuple(found.values())


# --- the search index ----------------------------------------------------------------------


@functools.cache
def _search_language() -> Any:
    from sphinx.search.en import SearchEnglish

    return SearchEnglish({})


def index_words(text: str) -> set[str]:
    """The keys Sphinx's English search index makes of `text` (IndexBuilder.feed's rules)."""
    lang = _search_language()
    words = set()
    for word in lang.split(text):
        stemmed = lang.stem(word).lower()
        if not lang.word_filter(stemmed) and lang.word_filter(word):
            stemmed = word
        if lang.word_filter(stemmed):
            words.add(stemmed)
    return words


def read_search_index(path: Path) -> dict[str, Any]:
    from sphinx.search import js_index

    return js_index.loads(path.read_text(encoding="utf-8"))


def indexed_words_by_doc(index: dict[str, Any]) -> dict[str, set[str]]:
    """Docname -> the words (terms and title terms) the search index lists for it."""
    docnames = index["docnames"]
    by_doc: dict[str, set[str]] = {name: set() for name in docnames}
    for table in ("terms", "titleterms"):
        for word, docs in index.get(table, {}).items():
            for doc in docs if isinstance(docs, list) else [docs]:
                by_doc[docnames[doc]].add(word)
    return by_doc


# --- the checker -----------------------------------------------------------------------------


def published_files(html_root: Path) -> list[Path]:
    """Pages, `_sources` copies, downloadable notebooks and the search index of a build."""
    files = set(html_root.rglob("*.html")) | set(html_root.rglob("*.ipynb"))
    files |= {p for p in (html_root / "_sources").rglob("*") if p.is_file()}
    files |= {p for p in [html_root / "searchindex.js"] if p.exists()}
    return sorted(p for p in files if "_static" not in p.relative_to(html_root).parts)


def leaks(
    html_root: Path, secret_lines: tuple[Secret, ...], student: dict[str, Any], public: str
) -> list[str]:
    """Every published file of `html_root` that holds a secret, each with what it holds.

    `student`: file name -> the student notebook each lab page was built from; `public`: the
    normalised text of every public source (see `public_sources`).
    """
    found = []
    for path in published_files(html_root):
        text = file_text(path)
        for secret in secret_lines:
            if occurs(secret.line, text):
                found.append(
                    f"{path.relative_to(html_root)} holds a {secret.kind} line of "
                    f"labs/{secret.lab}: {secret.line!r}"
                )
    index_path = html_root / "searchindex.js"
    if index_path.exists():
        by_doc = indexed_words_by_doc(read_search_index(index_path))
        secret_only = {
            w
            for w in index_words("\n".join(s.line for s in secret_lines)) - index_words(public)
            if not w[0].isdigit()  # names, not numbers
        }
        chapters = {f"book/{p.stem}" for p in ROOT.glob("book/*.ipynb")}
        for doc, words in sorted(by_doc.items()):
            # What a chapter printed when the build executed it is its own, not a lab's.
            executed = html_root.parent / "jupyter_execute" / f"{doc}.ipynb"
            if doc in chapters and executed.exists():
                words = words - index_words(notebook_text(json.loads(executed.read_text())))
            if words & secret_only:
                found.append(
                    f"searchindex.js indexes, for {doc}, words only the lab solutions "
                    f"or hidden tests contain: {sorted(words & secret_only)}"
                )
            name = f"{Path(doc).name}.ipynb"
            if doc.startswith("book/labs/") and name in student:
                extra = words - index_words(notebook_text(student[name]))
                if extra:
                    found.append(
                        f"searchindex.js indexes, for {doc}, words that are not in "
                        f"its student notebook: {sorted(extra)[:20]}"
                    )
    return found


# --- unit stage: no build needed -------------------------------------------------------------


def _needs_labs() -> None:
    if not LABS.is_dir():
        pytest.skip("no labs/ here (a public copy of the course): book/labs/ is published as is")


def test_committed_student_labs_are_the_release_of_labs() -> None:
    """book/labs/ is a lock file of labs/: the book and the launch buttons serve it."""
    _needs_labs()
    stale = student_labs.stale_student_labs(LABS, STUDENT_LABS)
    assert not stale, "\n  ".join(
        ["the student edition is stale:", *stale, f"fix: {student_labs.FIX}"]
    )


def test_student_labs_are_not_executed_by_the_book() -> None:
    for path in sorted(STUDENT_LABS.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        assert nb["metadata"].get("mystnb") == student_labs.NO_EXECUTE, (
            f"{path}: the book would execute it (and fail on its stubs); {student_labs.FIX}"
        )
        assert nb["metadata"].get("mlinfra", {}).get("version") == "student", path


def test_toc_publishes_the_student_labs_never_the_instructor_source() -> None:
    files = _toc_files()
    assert not [f for f in files if f.startswith("labs/")], (
        "_toc.yml lists instructor labs (labs/...): list book/labs/... instead"
    )
    listed = {f for f in files if f.startswith("book/labs/")}
    assert listed == {f"book/labs/{p.stem}" for p in STUDENT_LABS.glob("*.ipynb")}
    if LABS.is_dir():
        assert listed == {f"book/labs/{p.stem}" for p in LABS.glob("*.ipynb")}, (
            f"every lab of labs/ is in _toc.yml as book/labs/<lab>; {student_labs.FIX}"
        )
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert "labs" in config["exclude_patterns"], "_config.yml: keep labs/ out of the build"


def test_secrets_are_found_in_every_lab() -> None:
    """The checker has something to look for: each lab with exercises yields secret lines."""
    _needs_labs()
    labs_with_solutions = {
        p.name
        for p in LABS.glob("*.ipynb")
        if any(k == "solution" for k, _ in lab_secret_lines(json.loads(p.read_text())))
    }
    assert labs_with_solutions, "no solution blocks found in labs/: the markers changed?"
    assert labs_with_solutions <= {s.lab for s in secrets()}
    assert not any(is_trivial(s.line) for s in secrets())
    assert is_trivial("else:") and is_trivial("return out") and is_trivial("])")
    assert not is_trivial("pad = 0")


def test_checker_finds_planted_leaks(tmp_path: Path) -> None:
    """A fake build with a highlighted solution line, a hidden test in a downloadable
    notebook and a secret word in the search index is reported on all three counts."""
    _needs_labs()
    from sphinx.search import js_index

    student = released()
    public = public_sources(student)
    solution = next(s for s in secrets() if s.kind == "solution")
    hidden = next((s for s in secrets() if s.kind == "hidden test"), solution)
    lab = Path(solution.lab).stem
    pages = tmp_path / "book" / "labs"
    pages.mkdir(parents=True)
    highlighted = "".join(
        f'<span class="n">{html.escape(tok)}</span>'
        for tok in re.split(r"(\s+)", "    " + solution.line)
    )
    (pages / f"{lab}.html").write_text(f"<html><body><pre>{highlighted}\n</pre></body></html>")
    (pages / "clean.html").write_text("<html><body><p>nothing to see</p></body></html>")
    downloads = tmp_path / "_sources" / "book" / "labs"
    downloads.mkdir(parents=True)
    nb = {"cells": [{"cell_type": "code", "source": ["x = 1\n", f"  {hidden.line}\n"]}]}
    (downloads / f"{lab}.ipynb").write_text(json.dumps(nb))

    def names(words: set[str]) -> set[str]:  # what the checker looks for: names, not numbers
        return {w for w in words if not w[0].isdigit()}

    secret_word = sorted(
        names(index_words(solution.line) - index_words(public))
        or names(index_words("\n".join(s.line for s in secrets())) - index_words(public))
    )[0]
    (tmp_path / "searchindex.js").write_text(
        js_index.dumps(
            {"docnames": [f"book/labs/{lab}"], "terms": {secret_word: 0}, "titleterms": {}}
        )
    )

    found = "\n".join(leaks(tmp_path, secrets(), student, public))
    assert f"book/labs/{lab}.html holds a solution line" in found
    assert f"_sources/book/labs/{lab}.ipynb holds a {hidden.kind} line" in found
    assert f"words only the lab solutions or hidden tests contain: ['{secret_word}']" in found
    assert "clean.html" not in found


# --- browser stage: the real build (after `make book`) ---------------------------------------


@pytest.fixture(scope="module")
def built() -> Path:
    if not (HTML / "index.html").exists():
        if "MAKELEVEL" in os.environ:
            pytest.fail("the book is not built: `make book` writes _build/html")
        pytest.skip(
            "_build/html is missing: run `make book` first (make test builds it before "
            "this stage, and fails here when it is missing)"
        )
    older = [
        p.name
        for p in sorted(STUDENT_LABS.glob("*.ipynb"))
        if (HTML / "_sources" / "book" / "labs" / p.name).exists()
        and json.loads((HTML / "_sources" / "book" / "labs" / p.name).read_text())
        != json.loads(p.read_text())
    ]
    if older:
        pytest.fail(
            f"_build/html was built from an older book/labs/ ({', '.join(older)}): "
            "run `make book` again"
        )
    return HTML


@pytest.mark.browser
def test_built_book_publishes_no_solution_and_no_hidden_test(built: Path) -> None:
    _needs_labs()
    committed = {p.name: json.loads(p.read_text()) for p in STUDENT_LABS.glob("*.ipynb")}
    found = leaks(built, secrets(), committed, public_sources(released()))
    assert not found, (
        "the built book publishes instructor material (rebuild with `make "
        "book`; lab pages must come from book/labs/):\n  " + "\n  ".join(found)
    )


@pytest.mark.browser
def test_no_instructor_lab_was_built(built: Path) -> None:
    assert not (built / "labs").exists() and not (built / "_sources" / "labs").exists(), (
        "_build/html/labs/ exists: the instructor labs were built; rebuild with `make book`"
    )


def _hrefs(page: Path) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]*)"', page.read_text())]


@pytest.mark.browser
@pytest.mark.parametrize("lab", sorted(p.stem for p in STUDENT_LABS.glob("*.ipynb")))
def test_lab_page_and_its_buttons_open_the_student_notebook(lab: str, built: Path) -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = urlparse(config["repository"]["url"]).path.strip("/")
    branch = config["repository"].get("branch", "main")
    target = f"book/labs/{lab}.ipynb"
    page = built / "book" / "labs" / f"{lab}.html"
    assert page.exists(), f"no page for {target}: is it in _toc.yml?"
    hrefs = _hrefs(page)

    colab = [h for h in hrefs if h.startswith(config["launch_buttons"]["colab_url"])]
    assert colab == [f"https://colab.research.google.com/github/{repo}/blob/{branch}/{target}"], (
        f"the Colab button of {lab} opens {colab}, not the student notebook {target}"
    )
    hub = [unquote(h) for h in hrefs if "/hub/user-redirect/" in h]
    if config["launch_buttons"].get("jupyterhub_url"):
        assert hub and all(h.endswith(f"/{target}") or f"/{target}&" in h for h in hub), hub
    else:
        assert not hub, f"no jupyterhub_url is configured, yet {lab} has a JupyterHub button"
    downloads = [h for h in hrefs if h.endswith(".ipynb") and "_sources" in h]
    assert downloads and all(h.endswith(f"_sources/{target}") for h in downloads), downloads
    served = json.loads((built / "_sources" / target).read_text())
    assert served == json.loads((STUDENT_LABS / f"{lab}.ipynb").read_text()), (
        f"the downloadable {target} is not the committed student notebook"
    )
    instructor = [h for h in map(unquote, hrefs) if re.search(rf"(?<!book)/labs/{lab}\b", h)]
    assert not instructor, f"links to the instructor source on {lab}'s page: {instructor}"

    text = page.read_text()
    assert 'class="cell_output' not in text, f"{lab} was executed: its page shows outputs"
    if "NotImplementedError" in notebook_text(served):
        assert "NotImplementedError" in text, f"{lab}'s page does not show the exercise stubs"
