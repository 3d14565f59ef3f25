"""The restored notebook: `grade --write-restored` and nbval give the same visible verdicts.

One small batch of the warm-up is graded by one ``mlinfra-lab grade --write-restored`` call
with a non-default secret and the judge on:

- alice: every exercise right;
- bob: the naive softmax, which fails a visible test (large logits overflow);
- carol: a softmax that subtracts the max along the last axis whatever ``axis`` is (passes
  the visible tests, fails the hidden ones), and, in a cell of her own marked
  ``# NBVAL_SKIP``, a naive ``logsumexp`` that replaces her right one (grading runs every
  cell, so her logsumexp fails a visible test; an nbval that honoured her marker would pass
  it).

Then each restored notebook runs under ``python -m pytest --nbval-lax`` in a subprocess, its
verdict per code cell read from pytest's JUnit XML (nbval's item ``Cell N`` is the N-th code
cell, from 0).

What is compared, and why not more: the gradebook keeps one verdict per grader cell, for its
visible tests, its hidden tests and the judge together (`grade.CellResult.passed`, with the
failing check's message); the restored notebook holds the visible tests only. So, per grader:
a grader that scored passes under nbval; one that fails under nbval scored 0, and the
gradebook's message is in nbval's failure text (the same visible check failed); a grader
that scored 0 and passes under nbval must have hidden tests (carol's softmax). The expected
verdicts are pinned per student, so the test cannot pass with everything passing or failing.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest
from test_grading_pipeline import NAIVE_SOFTMAX, WARMUP, _cell, _student_copy, _write_cases

from mlinfra_lab.cli import main
from mlinfra_lab.grading import RestoredLeakError, SubmissionError, restored_notebook
from mlinfra_lab.grading.messages import hidden_lines
from mlinfra_lab.grading.restored import write_restored
from mlinfra_lab.grading.secret import seed_table
from mlinfra_lab.grading.submissions import find_submissions, load_source_labs

pytestmark = pytest.mark.grading

SECRET = "restored-notebook-test-secret"
CELL_TIMEOUT = "600"  # far above any cell here: a busy machine must not decide a verdict
LAST_AXIS_SOFTMAX = """def stable_softmax(x, axis=-1):
    x = np.asarray(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)"""
SKIPPED_NAIVE_LSE = """# NBVAL_SKIP
def logsumexp(x, axis=-1):
    return np.log(np.exp(np.asarray(x)).sum(axis=axis))"""
EXPECTED = {  # per student, grader cell -> (scored by grade, passes under nbval)
    "alice": {
        "softmax-grader": (True, True),
        "lse-grader": (True, True),
        "logsoftmax-grader": (True, True),
    },  # fmt: skip
    "bob": {
        "softmax-grader": (False, False),
        "lse-grader": (True, True),
        "logsoftmax-grader": (True, True),
    },  # fmt: skip
    "carol": {
        "softmax-grader": (False, True),
        "lse-grader": (False, False),
        "logsoftmax-grader": (True, True),
    },  # fmt: skip
}
_ANSI = re.compile(r"(\x1b|#x1B)\[[0-9;]*m")  # JUnit XML writes ESC as #x1B


def _carol():
    nb = _student_copy(softmax_solution=LAST_AXIS_SOFTMAX)
    skipped = nbformat.v4.new_code_cell(SKIPPED_NAIVE_LSE)
    skipped.id = "carol-skipped"
    nb.cells.insert(nb.cells.index(_cell(nb, "lse-grader")), skipped)
    return nb


def _nbval(notebook: Path, tmp: Path) -> dict[int, str | None]:
    """Run `notebook` under ``pytest --nbval-lax`` in a subprocess: per code cell number, None
    when it passed, else nbval's failure text (colour codes dropped)."""
    junit = tmp / f"{notebook.parent.name}-junit.xml"
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval-lax",
        "--nbval-current-env", f"--nbval-cell-timeout={CELL_TIMEOUT}", f"--junitxml={junit}",
        str(notebook),
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp, capture_output=True, text=True, check=False)
    assert junit.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    verdicts: dict[int, str | None] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        text = None if failure is None else f"{failure.get('message') or ''}\n{failure.text or ''}"
        verdicts[int(case.get("name", "").removeprefix("Cell "))] = (
            None if text is None else _ANSI.sub("", text)
        )
    return verdicts


@pytest.fixture(scope="module")
def restored(tmp_path_factory):
    """Grade the batch with --write-restored; run nbval on each restored notebook. Returns
    (exit code, stdout, gradebook json, restored dir, nbval verdicts by student)."""
    tmp = tmp_path_factory.mktemp("restored")
    cases = {
        "alice": _student_copy(),
        "bob": _student_copy(softmax_solution=NAIVE_SOFTMAX),
        "carol": _carol(),
    }
    _write_cases(tmp / "submissions", cases)
    out, restored_dir = tmp / "gradebook", tmp / "restored"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        code = main(
            [
                "grade", str(tmp / "submissions"), "--source", str(WARMUP), "--out", str(out),
                "--secret", SECRET, "--timeout", CELL_TIMEOUT,
                "--write-restored", str(restored_dir),
            ]
        )  # fmt: skip
    book = json.loads((out / "gradebook.json").read_text())
    runs = {name: _nbval(restored_dir / name / "00_warmup.ipynb", tmp) for name in cases}
    return code, printed.getvalue(), book, restored_dir, runs


def _grade_verdicts(book: dict, student: str) -> dict[str, tuple[bool, str]]:
    result = next(r for r in book["results"] if r["student"] == student)
    return {c["cell_id"]: (c["passed"], c["message"]) for c in result["cells"] if not c["manual"]}


def _squash(text: str) -> str:
    return " ".join(text.split())


def _code_number(nb, cell_id: str) -> int:
    code = [c for c in nb.cells if c.cell_type == "code"]
    return next(k for k, c in enumerate(code) if c.get("id") == cell_id)


def test_grade_writes_one_restored_notebook_per_submission(restored):
    code, printed, _, restored_dir, _ = restored
    assert code == 0
    assert "--write-restored: 3 restored notebooks" in printed
    assert "pytest --nbval-lax" in printed
    assert sorted(p.parent.name for p in restored_dir.glob("*/00_warmup.ipynb")) == sorted(EXPECTED)


def test_nbval_verdicts_on_the_restored_notebook_match_the_grade(restored):
    _, _, book, restored_dir, runs = restored
    lab = load_source_labs(WARMUP)["00_warmup"]
    hidden = {g.cell_id for g in lab.graders if g.has_hidden}
    for student, expected in EXPECTED.items():
        nb = nbformat.read(str(restored_dir / student / "00_warmup.ipynb"), as_version=4)
        grade = _grade_verdicts(book, student)
        assert set(grade) == set(expected), student
        for cell_id, (scored, message) in grade.items():
            failure = runs[student][_code_number(nb, cell_id)]
            where = (student, cell_id, message, (failure or "")[-600:])
            assert (scored, failure is None) == expected[cell_id], where
            if scored:  # everything grading ran passed, the visible tests included
                assert failure is None, where
            elif failure is not None:  # the same visible check failed in both
                assert message and _squash(message) in _squash(failure), where
            else:  # scored 0, passes here: only a check the restored notebook lacks
                assert cell_id in hidden, where


def test_every_student_cell_ran_under_nbval_as_in_grading(restored):
    """nbval skipped nothing: carol's ``# NBVAL_SKIP`` cell is reworded, so it ran (and broke
    her logsumexp, as in grading); every code cell has a verdict."""
    _, _, _, restored_dir, runs = restored
    nb = nbformat.read(str(restored_dir / "carol" / "00_warmup.ipynb"), as_version=4)
    skipped = _cell(nb, "carol-skipped")
    assert skipped.source.splitlines()[0] == "# NBVAL_SKIP (not honoured: grading runs every cell)"
    assert len(runs["carol"]) == sum(c.cell_type == "code" for c in nb.cells)


def test_restored_notebooks_hold_no_hidden_test_and_no_secret(restored):
    """No line of a hidden test that the student did not already have (the release shows a
    few, like ``x = np.asarray(x)``, and a student's own cells may too), no secret, no seed."""
    _, _, _, restored_dir, _ = restored
    lab = load_source_labs(WARMUP)["00_warmup"]
    released = ["".join(g.visible.split()) for g in lab.graders]
    hidden = [
        line
        for g in lab.graders
        for line in hidden_lines(g.source)
        if not any(line in text for text in released)
    ]
    assert len(hidden) > 20
    seeds = [str(s) for s in json.loads(seed_table(["stable_softmax", "logsumexp", "log_softmax"], SECRET)).values()]  # fmt: skip
    files = [f for f in restored_dir.rglob("*") if f.is_file()]
    assert len(files) == 3
    for path in files:
        text = path.read_text()
        submitted = (restored_dir.parent / "submissions" / path.parent.name / path.name).read_text()
        theirs = "".join(submitted.split())
        new = [line for line in hidden if line in "".join(text.split()) and line not in theirs]
        assert not new, (path, new[:3])
        assert "HIDDEN TESTS" not in text, path
        assert SECRET not in text, path
        assert not [seed for seed in seeds if seed in text], path
        meta = json.loads(text)["metadata"]["mlinfra"]
        assert meta["version"] == "restored" and meta["lab"] == "00_warmup"


def test_a_leak_of_hidden_text_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """The check that guards the file: with the text grading runs (hidden tests included)
    restored in place of the visible text (the bug it is there for), nothing is written."""
    from mlinfra_lab.grading import restore
    from mlinfra_lab.grading import restored as restored_module

    _write_cases(tmp_path / "submissions", {"alice": _student_copy()})
    labs = load_source_labs(WARMUP)
    found, _ = find_submissions([tmp_path / "submissions"], labs)
    assert restored_notebook(found[0], labs["00_warmup"])  # the check lets honest text pass
    monkeypatch.setattr(
        restored_module,
        "restore_graders",
        lambda nb, lab, visible=False: restore.restore_graders(nb, lab),
    )
    with pytest.raises(RestoredLeakError, match="quotes a hidden test"):
        write_restored([tmp_path / "submissions"], WARMUP, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()


def test_write_restored_refuses_a_folder_grading_reads(tmp_path):
    _write_cases(tmp_path / "submissions", {"alice": _student_copy()})
    with pytest.raises(SubmissionError, match="inside"):
        write_restored([tmp_path / "submissions"], WARMUP, tmp_path / "submissions" / "r")
    assert not (tmp_path / "submissions" / "r").exists()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            [
                "grade", str(tmp_path / "submissions"), "--source", str(WARMUP),
                "--out", str(tmp_path / "book"), "--write-restored", str(tmp_path / "submissions"),
            ]
        )  # fmt: skip
    assert code != 0 and "--write-restored" in err.getvalue()
    assert not (tmp_path / "book").exists()  # refused before anything was graded


def test_only_the_named_students_and_no_nbval_tag_is_kept(tmp_path):
    """``--student`` narrows what is written; nbval's tags leave every cell (a student's
    ``raises-exception`` would make nbval pass a cell that raises, which grading fails)."""
    bob = _student_copy()
    _cell(bob, "naive-demo").metadata["tags"] = ["raises-exception", "nbval-skip", "mine"]
    _write_cases(tmp_path / "submissions", {"alice": _student_copy(), "bob": bob})
    run = write_restored(
        [tmp_path / "submissions"], WARMUP, tmp_path / "restored", students=frozenset({"bob"})
    )
    assert [(s, lab) for s, lab, _ in run.written] == [("bob", "00_warmup")] and not run.skipped
    nb = nbformat.read(str(run.written[0][2]), as_version=4)
    assert _cell(nb, "naive-demo").metadata["tags"] == ["mine"]
    assert _cell(nb, "softmax-grader").metadata["tags"] == ["grader"]


def test_grade_help_states_nbvals_place():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["grade", "--help"])
    text = " ".join(out.getvalue().split())
    assert "--write-restored DIR" in text
    assert "pytest --nbval-lax" in text
