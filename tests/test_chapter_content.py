"""Every chapter is a course page: objectives, prerequisites, exercises, references, glossary.

Contract: each notebook `book/0*.ipynb` opens with a "Learning objectives" and a
"Prerequisites" admonition right after its title, links to its lab, and closes with the
sections Summary, Exercises (3 to 5 numbered items) and References (citations of
`book/references.bib`); it uses at least three terms of `book/glossary.md`; no markdown cell
types a measured figure by hand; and every external link is an https URL. Each lab page
(`book/labs/`, the student edition) links back, in its introduction, to its chapter and to
the chapter sections it uses, by labels that exist; the intro says how the labs build on
each other and marks Lab 1's kernel exercise as a stretch.

Design decisions:
- The checks read the notebooks' sources, so they run in milliseconds and need no build;
  the Sphinx build (`make book`, `-W`) checks that roles resolve, these tests check that
  the course structure is there and that the prose does not hard-code numbers.
- "A measured figure" is a number next to a unit of size, time, rate or ratio (GB, GiB, MB,
  ms, s, TFLOP/s, %, 3x ...). Numbers a cell computes reach the prose through myst-nb's
  `{glue:text}` roles, which these regexes do not see. A dimension such as "128 x 64" (with
  spaces) is a shape, not a ratio, and is not matched.
- The allowlist is short and each entry says why it is not a measurement: hardware
  constants, library defaults, and the course text's own scenario, which the chapters quote
  and then reproduce from code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = sorted(BOOK.glob("0*.ipynb"))
LAB_PAGES = sorted((BOOK / "labs").glob("0*.ipynb"))
# chapter 1's case-study appendix: a page of the book, not a chapter (no objectives or lab)
CH1_APPENDIX = BOOK / "appendix_attention_case_study.ipynb"
MARKS = {
    "01": pytest.mark.attention,
    "02": pytest.mark.scaling,
    "03": pytest.mark.ci,
    "04": pytest.mark.tracking,
    "05": pytest.mark.staleness,
}

UNIT = (
    r"(?:GiB|GB|MiB|MB|KiB|kB|KB|TiB|TB|PB|ms|us|µs|ns|s|min|h|TFLOP/s|GFLOP/s"
    r"|Mbit/s|Gbit/s|MB/s|GB/s|%|\\%)"
)
# a number (optionally a range "1.2-1.4") and a unit; or a number glued to "x"/"×" ("240x")
MEASURED = re.compile(
    r"(?<![\w.\\{])\d+(?:[.,]\d+)*(?:\s*(?:-|–|to)\s*\d+(?:\.\d+)?)?"
    r"(?:\s?" + UNIT + r"(?![A-Za-z])|(?:x|×|\s?\\times)(?![A-Za-z0-9]))"
)
# (chapter prefix, exact phrase after whitespace is collapsed, why it is not a measurement)
ALLOWED = [
    ("01", "227 KiB", "shared memory a Hopper (H100/H200) block may use: a hardware constant"),
    ("01", "a gain of up to about 10% at D=128", "a prediction, written before the probe ran"),
    ("01", "so up to about 15% faster at D=64", "a prediction, written before the runs"),
    ("01", "5-10% faster at D=64", "version 4's prediction, written before the runs"),
    ("01", "and 3-8% at D=128", "version 4's prediction, written before the runs"),
    ("01", "5-15% over version 1 at D=128", "version 5's prediction, written before the runs"),
    (
        "02",
        "The expected speedup is about 8x; the measured one is 2x",
        "the course text's scenario, stated before anything is measured",
    ),
    ("02", "2x for 8x GPUs is 25%", "the definition of scaling efficiency on the course's example"),
    (
        "02",
        "communication was about 10% of the step at 8 GPUs and about 60% at 64, and 8x the "
        "GPUs gave 2x the throughput, 25% efficiency",
        "the course text's worked example, quoted; the cells below reproduce it from code",
    ),
    ("02", "25 MB by default", "DDP's default bucket_cap_mb, a PyTorch constant"),
]
PLACEHOLDER = re.compile(
    r"example\.(?:org|com)|localhost|127\.0\.0\.1|TODO|xxx|placeholder", re.IGNORECASE
)


def _chapter_params() -> list:
    return [pytest.param(p, marks=MARKS[p.name[:2]], id=p.stem) for p in CHAPTERS]


def _markdown_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def _sections(path: Path) -> list[tuple[str, str]]:
    """(heading, body) of every level-2 section, in order, from all markdown cells."""
    text = "\n\n".join(_markdown_cells(path))
    parts = re.split(r"^## +(.+)$", text, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def _glossary_terms() -> set[str]:
    text = (BOOK / "glossary.md").read_text()
    block = re.search(r"```\{glossary\}\n(.*?)\n```", text, flags=re.DOTALL)
    assert block, "book/glossary.md must hold a ```{glossary} directive"
    return {
        line.strip()
        for line in block.group(1).splitlines()
        if line.strip() and not line.startswith((" ", "\t"))
    }


def _bib_entries() -> dict[str, str]:
    text = (BOOK / "references.bib").read_text()
    starts = list(re.finditer(r"^@\w+\{([^,\s]+),", text, flags=re.MULTILINE))
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return {m.group(1): text[m.start() : end] for m, end in zip(starts, ends, strict=True)}


def _cited_keys(text: str) -> set[str]:
    keys: set[str] = set()
    for group in re.findall(r"\{cite(?::[a-z]+)?\}`([^`]+)`", text):
        keys.update(k.strip() for k in group.split(","))
    return keys


@pytest.mark.parametrize("path", _chapter_params())
def test_chapter_has_objectives_prerequisites_and_a_lab_link(path: Path) -> None:
    cells = _markdown_cells(path)
    first = cells[0]
    assert first.startswith("# "), f"{path.name}: the first cell must be the title"
    before_sections = first.split("\n## ")[0]
    for name in ("Learning objectives", "Prerequisites"):
        assert re.search(r"```\{admonition\} " + name + r"\n", before_sections), (
            f"{path.name}: add a ```{{admonition}} {name} block right after the title"
        )
    objectives = re.search(r"```\{admonition\} Learning objectives\n(.*?)```", first, re.DOTALL)
    assert objectives and objectives.group(1).count("\n- ") >= 3, (
        f"{path.name}: list at least three learning objectives"
    )
    lab = f"labs/{path.name}"
    assert f"]({lab})" in "\n".join(cells), f"{path.name}: link its lab as [Lab N]({lab})"
    assert (BOOK / lab).exists(), f"the lab page book/{lab} is missing (make release-labs)"


@pytest.mark.parametrize("path", _chapter_params())
def test_chapter_closes_with_summary_exercises_and_references(path: Path) -> None:
    sections = _sections(path)
    names = [h.strip() for h, _ in sections]
    assert names[-3:] == ["Summary", "Exercises", "References"], (
        f"{path.name}: the last sections must be Summary, Exercises, References; got {names[-3:]}"
    )
    body = dict((h.strip(), b) for h, b in sections)
    exercises = re.findall(r"^\d+\. ", body["Exercises"], flags=re.MULTILINE)
    assert 3 <= len(exercises) <= 5, (
        f"{path.name}: 3 to 5 numbered exercises, found {len(exercises)}"
    )
    assert len(re.findall(r"\{cite(?::[a-z]+)?\}`", body["References"])) >= 2, (
        f"{path.name}: the References section cites its sources with {{cite}} roles"
    )


@pytest.mark.parametrize("path", _chapter_params())
def test_chapter_uses_glossary_terms_that_exist(path: Path) -> None:
    terms = _glossary_terms()
    used = []
    for role in re.findall(r"\{term\}`([^`]+)`", "\n".join(_markdown_cells(path))):
        target = re.search(r"<([^>]+)>$", role)
        used.append(target.group(1) if target else role)
    missing = sorted(set(used) - terms)
    assert not missing, f"{path.name}: {{term}} roles without a glossary entry: {missing}"
    assert len(set(used)) >= 3, f"{path.name}: use at least three glossary terms, found {set(used)}"


@pytest.mark.parametrize(
    "path", [*_chapter_params(), pytest.param(CH1_APPENDIX, marks=MARKS["01"], id="ch1-appendix")]
)
def test_no_measured_figure_is_typed_into_the_prose(path: Path) -> None:
    prefix_of = "01" if path == CH1_APPENDIX else path.name[:2]
    allowed = [re.escape(phrase) for prefix, phrase, _ in ALLOWED if prefix == prefix_of]
    found = []
    for i, text in enumerate(_markdown_cells(path)):
        flat = re.sub(r"\s+", " ", text)
        flat = re.sub(r"```yaml.*?```", "", flat)  # a workflow file shown as code, not prose
        for phrase in allowed:
            flat = re.sub(phrase, "", flat)
        found += [
            f"cell {i}: ...{flat[max(0, m.start() - 30) : m.end() + 10]}..."
            for m in MEASURED.finditer(flat)
        ]
    assert not found, (
        f"{path.name}: measured figures typed by hand; compute them in a cell and paste them "
        "with myst-nb's glue ({glue:text}`name:.1f`), or add a constant to ALLOWED with its "
        "reason:\n" + "\n".join(found)
    )


@pytest.mark.parametrize("path", _chapter_params())
def test_markdown_has_no_control_characters(path: Path) -> None:
    """A `\\text` written into a Python string without `r` becomes a tab and renders as
    "ext" (chapter 4 once showed "extlimit"); no markdown cell needs a tab or a form feed."""
    for i, text in enumerate(_markdown_cells(path)):
        bad = sorted({repr(ch) for ch in text if ch in "\t\f\v\b\r"})
        assert not bad, f"{path.name}: markdown cell {i} holds control characters {bad}"


@pytest.mark.foundation
def test_the_figure_regex_catches_what_it_should() -> None:
    caught = [
        "grows about 240x",
        "32 GiB at 16k",
        "about 40%",
        "1.25-1.4x backward",
        "takes 4.2 ms",
        "0.45 s of compute",
        "505-535 TFLOP/s",
        r"$50\%$",
        r"$0.9\times$",
        "25 MB/s",
    ]
    passed = [
        "a 128 x 64 tile",
        "{glue:text}`ratio:.0f`x",
        "{glue:text}`share:.0%`",
        "batch 32",
        "N=16384",
        "2 for $\\tau=0$",
        "Lab 1",
        "float32",
        "bf16",
    ]
    for text in caught:
        assert MEASURED.search(text), f"the regex misses a typed figure in {text!r}"
    for text in passed:
        assert not MEASURED.search(text), f"the regex flags {text!r}, which is not a figure"


@pytest.mark.foundation
def test_glossary_and_bibliography_pages_exist() -> None:
    assert len(_glossary_terms()) >= 20
    assert "```{bibliography}" in (BOOK / "references.md").read_text()


@pytest.mark.foundation
def test_every_citation_has_an_entry_and_every_entry_is_cited() -> None:
    entries = _bib_entries()
    cited = set()
    for path in CHAPTERS:
        cited |= _cited_keys("\n".join(_markdown_cells(path)))
    cited |= _cited_keys((BOOK / "intro.md").read_text())
    assert not cited - set(entries), f"cited but not in book/references.bib: {cited - set(entries)}"
    assert not set(entries) - cited, f"entries no chapter cites: {set(entries) - cited}"


@pytest.mark.foundation
def test_external_links_are_https_and_not_placeholders() -> None:
    links: list[tuple[str, str]] = []
    for key, entry in _bib_entries().items():
        url = re.search(r"\burl\s*=\s*\{([^}]*)\}", entry)
        assert url, f"references.bib: {key} has no url field"
        links.append((f"references.bib:{key}", url.group(1)))
    for path in [*CHAPTERS, BOOK / "intro.md", BOOK / "glossary.md"]:
        text = "\n".join(_markdown_cells(path)) if path.suffix == ".ipynb" else path.read_text()
        text = re.sub(r"```yaml.*?```", "", text, flags=re.DOTALL)  # code, not links
        links += [(path.name, u) for u in re.findall(r"\b(?:https?|ftp)://[^\s)>\]`\"']+", text)]
    assert links
    bad = [
        f"{where}: {url}"
        for where, url in links
        if not url.startswith("https://") or PLACEHOLDER.search(url)
    ]
    assert not bad, "external links must be https and real:\n" + "\n".join(bad)


def _labels() -> set[str]:
    """Every MyST target `(label)=` of the chapters."""
    text = "\n".join("\n".join(_markdown_cells(p)) for p in CHAPTERS)
    return set(re.findall(r"^\(([\w-]+)\)=\s*$", text, flags=re.MULTILINE))


def _ref_targets(text: str) -> list[str]:
    """The labels of `{ref}` roles: {ref}`label` and {ref}`text <label>`."""
    return [
        m.group(2) or m.group(1) for m in re.finditer(r"\{ref\}`([^`<]*?)\s*(?:<([^`>]+)>)?`", text)
    ]


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in LAB_PAGES])
def test_lab_intro_links_back_to_its_chapter_sections(path: Path) -> None:
    cells = _markdown_cells(path)
    chapter = "1" if path.name[:2] in ("00", "01") else str(int(path.name[:2]))
    intro = _ref_targets(cells[0])
    assert any(t.startswith(f"ch{chapter}-") for t in intro), (
        f"{path.name}: its first cell should link the chapter {chapter} sections it uses with "
        f"{{ref}}`text <ch{chapter}-...>` roles; found {intro}"
    )
    chapter_file = next(p.name for p in CHAPTERS if p.name.startswith(f"0{chapter}_"))
    assert f"](../{chapter_file})" in cells[0], (
        f"{path.name}: link [Chapter {chapter}](../{chapter_file})"
    )
    unknown = sorted(set(_ref_targets("\n".join(cells))) - _labels())
    assert not unknown, f"{path.name}: {{ref}} roles to labels no chapter defines: {unknown}"


@pytest.mark.foundation
def test_ref_targets_and_the_progression_in_the_intro() -> None:
    assert _ref_targets(
        "see {ref}`ch1-why-fusion` and {ref}`the softmax <ch1-the-online-softmax>`"
    ) == ["ch1-why-fusion", "ch1-the-online-softmax"]
    assert "ch1-why-fusion" in _labels() and "ch1-no-such-section" not in _labels()
    intro = (BOOK / "intro.md").read_text()
    progression = intro.split("(intro-labs-progression)=")[1]
    for lab in LAB_PAGES:
        assert f"](labs/{lab.name})" in progression, (
            f"intro.md: the progression table misses {lab.name}"
        )
    assert "stretch" in progression
    lab1 = next(p for p in LAB_PAGES if p.name.startswith("01_"))
    assert any(c.startswith("## Exercise 4 (stretch)") for c in _markdown_cells(lab1))


def _code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.attention
def test_chapter1_teaches_the_default_kernel_and_keeps_the_study_in_its_appendix() -> None:
    chapter = BOOK / "01_fused_attention.ipynb"
    prose, code = "\n".join(_markdown_cells(chapter)), "\n".join(_code_cells(chapter))
    assert "inspect.getsource" in code and "_fwd_kernel" in code and "_fwd_inner" in code, (
        "chapter 1 must show the forward kernel's source (inspect.getsource of _fwd_kernel "
        "and _fwd_inner) in its lesson"
    )
    assert "not profiled" not in prose + code, (
        "chapter 1: a reading is stated once, in its appendix"
    )
    # the speed cells choose the default kernel's run by its metadata, never by a file name
    assert "study.newest_default_run()" in code
    assert not re.search(r"h200-(?:attention|fwd)-[\w-]*\.json", code), (
        "chapter 1's code names a result file; select runs with mlinfra_lab.attention.studies.study"
    )
    for name in ("version=2", "version=3", "version=4", 'backward="atomic"', "case_study"):
        assert name not in code, f"chapter 1 runs {name}: that study belongs in its appendix"
    assert "](appendix_attention_case_study.ipynb)" in prose, "chapter 1 links its appendix"
    assert "(ch1-on-a-t4)=" in prose and "sm_75" in prose, "chapter 1 needs its T4 note"


@pytest.mark.attention
def test_chapter1_appendix_is_in_the_toc_right_after_the_chapter() -> None:
    toc = (ROOT / "_toc.yml").read_text()
    after = toc.split("- file: book/01_fused_attention", 1)[1]
    next_file = re.search(r"- file: (\S+)", after)
    assert next_file and next_file.group(1) == "book/appendix_attention_case_study", (
        "_toc.yml: list book/appendix_attention_case_study right after chapter 1"
    )
    first = _markdown_cells(CH1_APPENDIX)[0]
    assert first.startswith("# Appendix"), "the case study's title must say it is an appendix"
    prose = "\n".join(_markdown_cells(CH1_APPENDIX))
    assert prose.count("not a profiler measurement") == 1, (
        "the appendix states once that its explanations are readings"
    )
    assert "not profiled" not in prose
