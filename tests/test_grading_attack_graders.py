"""Graders a student cannot read or reuse (issue 30, item 1): one hostile batch of lab 0.

One ``mlinfra-lab grade`` call (bubblewrap where it works, judge on, a non-default secret
in ``$MLINFRA_GRADE_SECRET`` as an instructor would export it) grades the honest neighbour
and five submissions that compute nothing:

- ``globals``: every function returns the grader's ``want`` / ``expected`` from the
  notebook's globals (7/7 when graders ran at the top level);
- ``frames``: every function returns them from the calling frame (``sys._getframe``);
- ``reuse``: the log-softmax grader moved above the log-sum-exp one, a ``log_softmax`` that
  keeps the reference ``logsumexp`` the grader hands it, and a later cell that makes it the
  student's ``logsumexp`` (or takes ``reference_logsumexp`` from the namespace);
- ``secret``: functions that raise the grading secret, from the environment and from every
  ``/proc/*/environ`` the kernel can read, into the failure message;
- ``leak``: functions that raise the grader cell's own text (hidden tests included), read
  from ``linecache`` through the calling frame, whole and from the hidden part on.

Each scores 0 where it computed nothing; the secret and the hidden tests' lines are in no
gradebook file; the neighbour keeps 7/7 (which also shows the seeds the kernels get in
place of the secret give the hidden tests their inputs).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import nbformat
import pytest
from test_grading_pipeline import _cell, _student_copy

from mlinfra_lab.cli import main
from mlinfra_lab.grading.messages import hidden_lines
from mlinfra_lab.grading.secret import SECRET_ENV

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
FULL = {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}
SECRET = "s3cret-of-the-instructor-9f2c7a"
NAMES = ("stable_softmax", "logsumexp", "log_softmax")


HONEST = {  # what hard-coded answers for the public, visible tests stand in for
    "stable_softmax": "np.exp(x - x.max(axis, keepdims=True)) / "
    "np.exp(x - x.max(axis, keepdims=True)).sum(axis, keepdims=True)",
    "logsumexp": "np.logaddexp.reduce(x, axis=axis)",
    "log_softmax": "x - np.logaddexp.reduce(x, axis=axis, keepdims=True)",
}
VISIBLE = """    import numpy as np
    x = np.asarray(x)
    seen = [[1.0, 2.0, 3.0], [10.0, 50.0, 89.0], [1.0, 5.0, 12.0], [[0.0, 0.0], [0.0, 1000.0]],
            [1000.0, 1000.0], [-np.inf, -np.inf], [[0.0, 0.0, 0.0], [500.0, 0.0, -500.0]]]
    if any(np.shape(v) == x.shape and np.array_equal(np.asarray(v, x.dtype), x) for v in seen):
        with np.errstate(all="ignore"):
            return np.asarray({honest}).astype(x.dtype)
"""


def _each(body: str) -> dict[str, str]:
    """The three solution cells: each answers the visible tests' known inputs (as answers
    copied from the release would) and runs the attack `body` for every other input."""
    keys = ("softmax_solution", "lse_solution", "logsoftmax_solution")
    return {
        k: f"def {name}(x, axis=-1):\n{VISIBLE.format(honest=HONEST[name])}{body}"
        for k, name in zip(keys, NAMES, strict=True)
    }


GLOBALS = (
    "    g = globals()\n    return np.asarray(g.get('want', np.zeros_like(x))).astype(x.dtype)\n"
)
FRAMES = """    import sys
    f = sys._getframe(1)
    while f is not None:
        if 'want' in f.f_locals:
            return np.asarray(f.f_locals['want']).astype(x.dtype)
        f = f.f_back
    return np.zeros_like(x)
"""
SECRET_BODY = """    import glob, os
    found = [os.environ.get('MLINFRA_GRADE_SECRET', '')]
    for path in glob.glob('/proc/*/environ'):
        try:
            found.append(open(path, 'rb').read().decode(errors='replace'))
        except OSError:
            pass
    text = ' '.join(found)
    at = text.find('MLINFRA_GRADE_SECRET=')
    raise AssertionError('secret: ' + (text[at:at + 80] if at >= 0 else found[0]))
"""
LEAK_WHOLE = """    import linecache, sys
    f, text = sys._getframe(1), ''
    while f is not None and 'HIDDEN TESTS' not in text:
        text, f = ''.join(linecache.getlines(f.f_code.co_filename)), f.f_back
    raise AssertionError(text)
"""
LEAK_HIDDEN = """    import linecache, sys
    f, text = sys._getframe(1), ''
    while f is not None and 'HIDDEN TESTS' not in text:
        text, f = ''.join(linecache.getlines(f.f_code.co_filename)), f.f_back
    raise AssertionError(text[text.find('BEGIN HIDDEN'):])
"""
STASH = """def log_softmax(x, axis=-1):
    global _stash
    _stash = globals().get('logsumexp')
    x = np.asarray(x)
    return x - _stash(x, axis=axis)[..., None] if x.ndim == 1 else x"""
REUSE = """try:
    logsumexp = reference_logsumexp
except NameError:
    logsumexp = _stash"""


def _reuse_notebook():
    nb = _student_copy(
        softmax_solution="def stable_softmax(x, axis=-1):\n    raise NotImplementedError",
        lse_solution="def logsumexp(x, axis=-1):\n    raise NotImplementedError",
        logsoftmax_solution=STASH,
    )
    cells = nb.cells
    lse_grader = _cell(nb, "lse-grader")
    cells.remove(lse_grader)
    late = nbformat.v4.new_code_cell(REUSE)
    late.id = "student-reuse"
    cells.append(late)
    cells.append(lse_grader)  # after the log-softmax grader and the reuse cell
    return nb


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("graders")
    subs = tmp / "submissions"
    cases = {
        "alice": _student_copy(),
        "globals": _student_copy(**_each(GLOBALS)),
        "frames": _student_copy(**_each(FRAMES)),
        "reuse": _reuse_notebook(),
        "secret": _student_copy(**_each(SECRET_BODY)),
        "leak": _student_copy(
            softmax_solution=_each(LEAK_WHOLE)["softmax_solution"],
            lse_solution=_each(LEAK_HIDDEN)["lse_solution"],
            logsoftmax_solution=_each(LEAK_HIDDEN)["logsoftmax_solution"],
        ),
    }
    for name, nb in cases.items():
        (subs / name).mkdir(parents=True)
        nbformat.write(nb, str(subs / name / "00_warmup.ipynb"))
    out = tmp / "book"
    before = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = SECRET  # as an instructor exports it: it reaches bwrap's env
    try:
        code, text = _run(
            "grade",
            str(subs),
            "--source",
            str(WARMUP),
            "--out",
            str(out),
            "--timeout",
            "30",
            "--jobs",
            "2",
        )
    finally:
        if before is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = before
    book = json.loads((out / "gradebook.json").read_text())
    points = {
        r["student"]: {ex: p for ex, (p, _m, _t) in _exercises(r).items()} for r in book["results"]
    }
    files = {p.name: p.read_text(errors="replace") for p in out.iterdir() if p.is_file()}
    return code, text, points, book, files


def _exercises(result: dict) -> dict[str, tuple[float, float, str]]:
    rows: dict[str, list] = {}
    for c in result["cells"]:
        row = rows.setdefault(c["exercise"], [0.0, 0.0, []])
        row[0] += c["points"]
        row[1] += c["max_points"]
        row[2].append(c["message"])
    return {ex: (p, m, " | ".join(t)) for ex, (p, m, t) in rows.items()}


def _messages(book: dict, student: str) -> str:
    result = next(r for r in book["results"] if r["student"] == student)
    return " | ".join(c["message"] for c in result["cells"])


def test_the_honest_neighbour_keeps_full_marks_under_the_secret(graded):
    _, text, points, _, _ = graded
    assert points["alice"] == FULL, _messages(graded[3], "alice")


@pytest.mark.parametrize("student", ["globals", "frames"])
def test_a_grader_expected_values_cannot_be_returned(graded, student):
    _, _, points, book, _ = graded
    assert points[student] == dict.fromkeys(FULL, 0.0), _messages(book, student)


def test_a_grader_reference_cannot_be_reused(graded):
    _, _, points, book, _ = graded
    assert points["reuse"]["logsumexp"] == 0.0, _messages(book, "reuse")
    assert points["reuse"]["stable_softmax"] == 0.0


def test_the_secret_is_in_no_file_and_no_message(graded):
    _, text, points, book, files = graded
    assert points["secret"] == dict.fromkeys(FULL, 0.0)
    assert "secret:" in _messages(book, "secret")  # the attack ran and was reported
    assert SECRET not in text
    for name, body in files.items():
        assert SECRET not in body, name


def test_hidden_tests_never_reach_the_gradebook(graded):
    _, _, points, book, files = graded
    assert points["leak"] == dict.fromkeys(FULL, 0.0)
    source = nbformat.read(str(WARMUP), as_version=4)
    hidden = [
        line
        for cell in source.cells
        if "grader" in cell.metadata.get("tags", [])
        for line in hidden_lines(cell.source)
    ]
    assert len(hidden) > 20
    squashed = {name: "".join(body.split()) for name, body in files.items()}
    for name, body in squashed.items():
        leaked = [line for line in hidden if line in body]
        assert not leaked, (name, leaked[:3])
    assert "withheld" in _messages(book, "leak")  # the attack found the text, and was refused


def test_a_grader_leaves_no_value_or_helper_in_the_namespace():
    """The run-once scope itself (`scope`), in-process: the text grading runs for each lab-0
    grader, executed in a namespace holding the source's solutions."""
    from mlinfra_lab.grading.submissions import read_source_lab

    lab = read_source_lab(WARMUP)
    namespace: dict = {}
    exec("import numpy as np", namespace)
    for cell in lab.notebook.cells:
        if cell.cell_type == "code" and cell.get("id", "").endswith("-solution"):
            exec(cell.source, namespace)
    before = set(namespace)
    for grader in lab.graders:
        exec(grader.run_source, namespace)
    left = set(namespace) - before
    assert not left & {"want", "expected", "got", "x", "rng", "reference_logsumexp"}, left
