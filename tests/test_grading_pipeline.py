"""Lab grading end to end: grade submissions of the warm-up lab (issue 2).

The grade tests share one module-scoped batch (each nbval kernel start costs seconds): six
submissions built from the released warm-up, plus inputs that cannot be graded, graded by
one ``mlinfra-lab grade`` call. The submissions replace the Colab set-up cell (a cell the
student owns) by a light one, so that a 10-second per-cell timeout is safe even on a busy
machine and the never-ending cell costs only those 10 seconds.
"""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import nbformat
import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading import release_node

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
CELL_TIMEOUT = "10"
# The attack batches' cell timeout, far above what any of their cells takes (an honest cell
# well under a second, an attack's hoarding a few seconds): there a timeout would score a
# cell 0 because the machine was busy (a loaded 2-core CI machine that must reclaim page
# cache before it can hand out gigabytes), not because a defence worked, and the test would
# be flaky. Tests that are about timeouts set their own.
ATTACK_CELL_TIMEOUT = 600.0


def _source():
    return nbformat.read(str(WARMUP), as_version=4)


def _cell(nb, cell_id):
    return next(c for c in nb.cells if c.get("id") == cell_id)


def _student_copy(**solutions: str):
    """The released warm-up with the source solutions filled in, then `solutions` overriding
    the text of the cells named by id (underscores stand for dashes)."""
    source = _source()
    nb = release_node(source, "00_warmup")
    for cell in nb.cells:
        if "runtime.describe()" in cell.source:
            cell.source = "import numpy as np\nprint('light set-up for the test')"
        elif cell.get("id", "").endswith("-solution"):
            cell.source = _cell(source, cell.id).source
    for key, text in solutions.items():
        _cell(nb, key.replace("_", "-")).source = text
    return nb


def _write(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def _write_cases(tmp: Path, cases: dict) -> list[Path]:
    """Each student's notebook of `cases` (name -> notebook) as ``tmp/<name>/00_warmup.ipynb``
    (the folder names the student), for a batch of the attack tests."""
    return [_write(nb, tmp / name / "00_warmup.ipynb") for name, nb in cases.items()]


def _result_points(result) -> dict[str, float]:
    """A `StudentResult`'s points per exercise."""
    return {ex: p for ex, (p, _m, _t) in result.exercises().items()}


NAIVE_SOFTMAX = """def stable_softmax(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)"""

LOG_OF_SOFTMAX = """def stable_softmax(x, axis=-1):
    x = np.asarray(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)

def log_softmax(x, axis=-1):
    with np.errstate(divide="ignore"):
        return np.log(stable_softmax(x, axis))"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every case in one batch; return (exit code, stderr, rows by student, json)."""
    tmp = tmp_path_factory.mktemp("grading")
    subs = tmp / "submissions"
    paths = [
        _write(_student_copy(), subs / "alice.ipynb"),  # all correct
        _write(_student_copy(softmax_solution=NAIVE_SOFTMAX), subs / "bob_00_warmup.ipynb"),
    ]
    # carol: wrong softmax, its grader edited to `pass`, the logsumexp grader deleted.
    carol = _student_copy(softmax_solution=NAIVE_SOFTMAX, softmax_grader="pass")
    carol.cells = [c for c in carol.cells if c.get("id") != "lse-grader"]
    paths.append(_write(carol, subs / "carol" / "00_warmup.ipynb"))
    # dave: the softmax cell raises, then a cell never ends; the later exercises are right.
    dave = _student_copy(softmax_solution="raise RuntimeError('I gave up')")
    hang = nbformat.v4.new_code_cell("while True:\n    pass")
    hang.id = "student-hang"
    dave.cells.insert(dave.cells.index(_cell(dave, "lse-solution")), hang)
    paths.append(_write(dave, subs / "dave.ipynb"))
    # erin: log_softmax as log(softmax): passes the visible tests, fails the hidden ones.
    erin = _student_copy(softmax_solution=LOG_OF_SOFTMAX, logsoftmax_solution="# see above")
    paths.append(_write(erin, subs / "erin.ipynb"))
    # mallory: after exercise 1, tries to kill the process that runs her kernel; graded
    # first, so the notebooks after hers are graded only if that cannot hurt the batch.
    mallory = _student_copy()
    kill = nbformat.v4.new_code_cell("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    kill.id = "student-kill"
    mallory.cells.insert(mallory.cells.index(_cell(mallory, "lse-solution")), kill)
    paths.append(_write(mallory, subs / "mallory.ipynb"))
    # inputs that cannot be graded
    (tmp / "notes.txt").write_text("not a notebook")
    (tmp / "broken.ipynb").write_text("{ this is not json")
    other = copy.deepcopy(_student_copy())
    other.metadata["mlinfra"] = {"lab": "01_fused_attention", "version": "student"}
    _write(other, tmp / "frank.ipynb")
    bad = [tmp / "notes.txt", tmp / "broken.ipynb", tmp / "frank.ipynb", tmp / "missing.ipynb"]

    out = tmp / "gradebook"
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            [
                "grade",
                str(paths[5]),
                str(paths[0]),
                str(paths[1]),
                str(subs / "carol"),
                str(bad[0]),
                str(paths[3]),
                str(bad[1]),
                str(paths[4]),
                str(bad[2]),
                str(bad[3]),
                "--source",
                str(WARMUP),
                "--out",
                str(out),
                "--timeout",
                CELL_TIMEOUT,
                "--jobs",
                "2",
            ]
        )
    with open(out / "gradebook.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    by_student: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_student.setdefault(row["student"], {})[row["exercise"]] = row
    book = json.loads((out / "gradebook.json").read_text())
    return code, err.getvalue(), by_student, book, [str(b) for b in bad]


def _points(rows: dict[str, dict]) -> dict[str, float]:
    return {ex: float(r["points"]) for ex, r in rows.items()}


def test_gradebook_has_the_columns_and_every_student(graded):
    _, _, by_student, book, _ = graded
    # the contract of gradebook.csv (its module docstring, grade --help): one row per student,
    # lab and exercise; ``comment`` holds the instructor's comments (grade --manual), empty
    # until one is entered. The JSON names the same columns and its rows carry them.
    columns = ["student", "lab", "exercise", "points", "max", "message", "comment"]
    assert book["columns"] == columns
    rows = [r for by_exercise in by_student.values() for r in by_exercise.values()]
    assert all(list(r) == columns for r in rows)  # the CSV header, in this order
    assert all(list(r) == columns for r in book["rows"])
    assert all(r["comment"] == "" for r in rows)
    assert sorted(by_student) == ["alice", "bob", "carol", "dave", "erin", "mallory"]
    assert all(r["lab"] == "00_warmup" for rows in by_student.values() for r in rows.values())


def test_all_correct_gets_full_points(graded):
    rows = graded[2]["alice"]
    assert _points(rows) == {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}, rows
    assert {r["max"] for r in rows.values()} == {"2", "3"}
    assert all(r["message"] == "" for r in rows.values())


def test_one_wrong_exercise_scores_zero_for_that_exercise_only(graded):
    rows = graded[2]["bob"]
    assert _points(rows) == {"stable_softmax": 0, "logsumexp": 2, "log_softmax": 3}
    assert "overflows on large logits" in rows["stable_softmax"]["message"]


def test_edited_and_deleted_graders_are_restored_from_the_source(graded):
    rows = graded[2]["carol"]
    # the grader edited to `pass` would have given 2: the source grader ran and failed
    assert _points(rows) == {"stable_softmax": 0, "logsumexp": 2, "log_softmax": 3}
    assert "was edited" in rows["stable_softmax"]["message"]
    assert "AssertionError" in rows["stable_softmax"]["message"]
    assert "re-inserted" in rows["logsumexp"]["message"]


def test_crashing_and_hanging_cells_score_what_passed(graded):
    rows = graded[2]["dave"]
    assert _points(rows) == {"stable_softmax": 0, "logsumexp": 2, "log_softmax": 3}
    assert "NameError" in rows["stable_softmax"]["message"]


def test_hidden_tests_are_restored_and_run(graded):
    rows = graded[2]["erin"]
    assert _points(rows) == {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 0}
    assert "not log(softmax(x))" in rows["log_softmax"]["message"]


def test_bad_inputs_are_reported_one_line_each_and_the_rest_graded(graded):
    code, stderr, by_student, book, bad = graded
    assert code == 1, "grade must exit non-zero when an input could not be graded"
    lines = [ln for ln in stderr.splitlines() if ln.startswith("not graded:")]
    assert len(lines) == len(bad) == len(book["problems"])
    for path, why in zip(
        bad,
        [
            "not a Jupyter notebook",
            "not a readable Jupyter notebook",
            "lab '01_fused_attention'",
            "no such file",
        ],
        strict=True,
    ):
        assert any(path in ln and why in ln for ln in lines), (path, why, lines)
    assert len(by_student) == 6


def test_a_notebook_that_tries_to_kill_the_grader_changes_nothing(graded):
    # In its sandbox (see mlinfra_lab.grading.sandbox) the kernel's parent is the sandbox's
    # own init process, which ignores the signal: mallory's later cells still run and score.
    rows = graded[2]["mallory"]
    assert _points(rows) == {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}, rows
    # alice, bob, ... ran after mallory in the batch: their scores are the other tests' checks
