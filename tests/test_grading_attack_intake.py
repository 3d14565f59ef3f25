"""Bad input never loses the batch (issue 30, item 3): malformed notebooks and hostile names.

One ``mlinfra-lab grade`` batch holds an honest neighbour, a seeded fuzz of malformed
notebooks (every field grading reads, given a value of the wrong type: a code cell whose
``source`` is a number was the file that lost a whole class's gradebook) and a submission
folder whose name carries terminal escapes and a bidirectional override. Every malformed
file is listed as not graded, with the field it got wrong; the neighbour's score is the
full one; no escape character reaches the console, the CSV or the JSON.

Only the two well-formed notebooks start kernels; the malformed ones are refused when they
are read, so the batch costs two kernel starts (and their judges).
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import random
from pathlib import Path

import nbformat
import pytest
from test_grading_pipeline import _student_copy

from mlinfra_lab.cli import main
from mlinfra_lab.grading.hygiene import printable, safe_student
from mlinfra_lab.grading.wellformed import malformed

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
FULL = {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}
SEED = 30
ESCAPED = "eve\x1b[2J\x1b]0;pwned\x07\u202e"  # clear screen, set the title, flip the text
WRONG = [7, 2.5, True, None, [1, 2], {"a": 1}, [[{"x": [None]}]]]


def _fields(nb: dict) -> list[tuple[str, object]]:
    """(where, setter) of each field to break: the notebook's and one code cell's."""
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    return [
        ("cells", lambda v: nb.__setitem__("cells", v)),
        ("metadata", lambda v: nb.__setitem__("metadata", v)),
        ("metadata.mlinfra", lambda v: nb["metadata"].__setitem__("mlinfra", v)),
        ("metadata.mlinfra.lab", lambda v: nb["metadata"]["mlinfra"].__setitem__("lab", v)),
        ("cell", lambda v: nb["cells"].__setitem__(nb["cells"].index(code), v)),
        ("cell_type", lambda v: code.__setitem__("cell_type", v)),
        ("source", lambda v: code.__setitem__("source", v)),
        ("cell.metadata", lambda v: code.__setitem__("metadata", v)),
        ("tags", lambda v: code["metadata"].__setitem__("tags", v)),
        ("tag", lambda v: code["metadata"].__setitem__("tags", [v])),
        ("id", lambda v: code.__setitem__("id", v)),
        ("outputs", lambda v: code.__setitem__("outputs", v)),
        ("execution_count", lambda v: code.__setitem__("execution_count", v)),
        ("checksum", lambda v: code["metadata"].__setitem__("checksum", v)),
        ("exercise", lambda v: code["metadata"].__setitem__("exercise", v)),
        ("attachments", lambda v: code.__setitem__("attachments", v)),
    ]


def _valid_for(field: str, value: object) -> bool:
    """True where `value` is a legal value of `field` (the fuzz skips those)."""
    if field in ("metadata", "cell.metadata", "metadata.mlinfra", "attachments", "cell"):
        return isinstance(value, dict) and field != "cell"
    if field in ("cells", "tags", "outputs"):
        return isinstance(value, list) and (field != "tags" or value == [])
    if field in ("id", "execution_count"):
        return value is None or (field == "execution_count" and type(value) is int)
    return False


def _fuzzed(base: dict, rng: random.Random, count: int) -> list[tuple[str, dict]]:
    """`count` malformed copies of `base`, each with one field of a wrong type."""
    out = []
    while len(out) < count:
        nb = copy.deepcopy(base)
        fields = _fields(nb)
        field, setter = fields[rng.randrange(len(fields))]
        value = copy.deepcopy(WRONG[rng.randrange(len(WRONG))])
        if _valid_for(field, value):
            continue
        setter(value)
        out.append((f"{field}={type(value).__name__}", nb))
    return out


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("intake")
    subs = tmp / "submissions"
    honest = _student_copy()
    for name in ("alice", ESCAPED):
        (subs / name).mkdir(parents=True)
        nbformat.write(honest, str(subs / name / "00_warmup.ipynb"))
    base = json.loads(nbformat.writes(honest))
    issue = copy.deepcopy(base)  # issue 30's file: a code cell whose source is a number
    next(c for c in issue["cells"] if c["cell_type"] == "code")["source"] = 7
    cases = [("source=int", issue), *_fuzzed(base, random.Random(SEED), 24)]
    for k, (_, nb) in enumerate(cases):
        folder = subs / f"fuzz{k:02d}"
        folder.mkdir()
        (folder / "00_warmup.ipynb").write_text(json.dumps(nb))
    out = tmp / "book"
    code, text = _run(
        "grade",
        str(subs),
        "--source",
        str(WARMUP),
        "--out",
        str(out),
        "--timeout",
        "20",
        "--jobs",
        "2",
    )
    csv_text = (out / "gradebook.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(csv_text, newline="")))
    book = json.loads((out / "gradebook.json").read_text())
    return code, text + csv_text, rows, book, cases


def test_the_fuzz_covers_many_fields_and_types():
    base = json.loads(nbformat.writes(_student_copy()))
    cases = _fuzzed(base, random.Random(SEED), 24)
    assert len({what.split("=")[0] for what, _ in cases}) >= 10, [w for w, _ in cases]
    assert len({what.split("=")[1] for what, _ in cases}) >= 5
    assert malformed(nbformat.reads(json.dumps(base), as_version=4)) is None  # the honest one


def test_the_honest_neighbour_is_graded_in_full(graded):
    _, _, rows, _, _ = graded
    alice = {r["exercise"]: float(r["points"]) for r in rows if r["student"] == "alice"}
    assert alice == FULL, alice


def test_every_malformed_notebook_is_listed_as_not_graded_with_its_field(graded):
    code, text, rows, book, cases = graded
    assert code == 1  # inputs that could not be graded
    problems = book["problems"]
    for k, (what, _) in enumerate(cases):
        student = f"fuzz{k:02d}"
        mine = [p for p in problems if f"/{student}/" in p["path"]]
        assert len(mine) == 1, (what, mine)
        row = [r for r in rows if r["student"] == student]
        assert row and row[0]["points"] == "" and "not graded" in row[0]["message"], (what, row)
    # the notebook-run crash of issue 30 (an integer source) is refused when read
    assert any("'source' is a int" in p["message"] for p in problems), problems


def test_no_escape_reaches_the_console_or_the_gradebook(graded):
    _, text, rows, book, _ = graded
    every = [text, *(v for r in rows for v in r.values())]  # console and the CSV file
    every += [r["student"] for r in book["results"]] + [p["path"] for p in book["problems"]]
    for where in every:
        assert "\x1b" not in where and "\x07" not in where and "\u202e" not in where
    student = safe_student(ESCAPED)
    eve = {r["exercise"]: float(r["points"]) for r in rows if r["student"] == student}
    assert eve == FULL, ([r["student"] for r in rows], student)
    assert "\\x1b[2J" in student and "\\u202e" in student


def test_hygiene_escapes_controls_and_separators():
    assert printable("a\x1b[31mb\nc") == "a\\x1b[31mb\\x0ac"
    assert printable("x" * 50, limit=10) == "xxxxxxx..."
    assert safe_student("../etc/passwd") == ".._etc_passwd"
    assert safe_student("..") == "_.."
    assert safe_student("al\\ice\u200b") == "al_ice\\u200b"
    assert printable("élève 学生") == "élève 学生"  # letters of any script stay
    once = printable(ESCAPED)
    assert printable(once) == once  # a gradebook read back (--merge) is not escaped twice
