"""Regrades that keep what the instructor entered (issue 30, item 4): the gradebook persists
in ``gradebook.sqlite``; ``grade --student NAME`` regrades one student and keeps every
other row and every hand-entered point and comment; ``--force`` regrades everyone and
still keeps them; a run with nothing new grades nothing.

One real grading run (kernels in the sandbox) of three students makes the gradebook; each
test works on a copy of it through the command line, as an instructor would.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
import sqlite3

import nbformat
import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading import release_notebook, verify_gradebook

pytestmark = pytest.mark.grading
SECRET = "regrade-s3cret"
RIGHT, WRONG = "return 2 * x", "return 3 * x"


def _lab() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
            id="solution",
        ),
        nbformat.v4.new_code_cell(
            "assert double(3) == 6, 'double(3) should be 6'",
            id="grader",
            metadata={"tags": ["grader"], "points": 2, "exercise": "double"},
        ),
        nbformat.v4.new_markdown_cell(
            "The model answer.",
            id="answer",
            metadata={"tags": ["manual"], "points": 3, "exercise": "explain"},
        ),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}  # fmt: skip
    return nb


def _submit(root, student_nb, name: str, code: str) -> None:
    nb = nbformat.read(str(student_nb), as_version=4)
    nb.cells[0].source = f"def double(x):\n    {code}"
    next(c for c in nb.cells if c.get("id") == "answer").source = f"{name} explains."
    (root / "subs" / name).mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(root / "subs" / name / "05_double.ipynb"))


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _grade(root, gb, *flags: str) -> tuple[int, str, str]:
    return _cli(
        ["grade", "--secret", SECRET, "--source", str(root / "labs"), "--out", str(gb),
         "--timeout", "30", str(root / "subs"), *flags]
    )  # fmt: skip


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _fill(path, points: dict[str, str], comments: dict[str, str]) -> None:
    rows = _rows(path)
    for row in rows:
        row["points"] = points.get(row["student"], "")
        row["comment"] = comments.get(row["student"], "")
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(root, gradebook dir): alice right, bob wrong, carol right, graded once for real."""
    root = tmp_path_factory.mktemp("regrade")
    (root / "labs").mkdir()
    nbformat.write(_lab(), str(root / "labs" / "05_double.ipynb"))
    student = release_notebook(root / "labs" / "05_double.ipynb", root / "student.ipynb")
    for name, code in (("alice", RIGHT), ("bob", WRONG), ("carol", RIGHT)):
        _submit(root, student, name, code)
    code, out, err = _grade(root, root / "gb")
    assert code == 0, err
    return root, root / "gb"


@pytest.fixture
def book(graded, tmp_path):
    """A copy of the graded class (submissions and gradebook) to change."""
    root, _ = graded
    for name in ("labs", "subs", "gb"):
        shutil.copytree(root / name, tmp_path / name, symlinks=True)
    shutil.copy(root / "student.ipynb", tmp_path / "student.ipynb")
    return tmp_path, tmp_path / "gb"


def test_the_gradebook_persists_in_sqlite_with_who_and_when(graded):
    _, gb = graded
    with sqlite3.connect(gb / "gradebook.sqlite") as db:
        scores = db.execute(
            "SELECT student, cell_id, points FROM scores ORDER BY student, cell_id"
        ).fetchall()
        runs = db.execute("SELECT command, by FROM runs").fetchall()
    assert ("alice", "grader", 2.0) in scores and ("bob", "grader", 0.0) in scores
    assert {student for student, _, _ in scores} == {"alice", "bob", "carol"}
    assert [command for command, _ in runs] == ["grade"] and runs[0][1]
    record = json.loads((gb / "gradebook.json").read_text())["record"]
    assert {
        s["student"]: bool(s["graded_at"] and s["submitted_at"]) for s in record["submissions"]
    } == {  # fmt: skip
        "alice": True,
        "bob": True,
        "carol": True,
    }
    manifest = json.loads((gb / "manifest.json").read_text())
    assert "gradebook.sqlite" in manifest["gradebook"], "the database is sealed too"


def test_a_regrade_of_one_student_keeps_every_other_row_and_every_manual_entry(book):
    root, gb = book
    _fill(gb / "manual.csv", {"alice": "2.5", "bob": "1"}, {"alice": "clear", "bob": "vague"})
    code, _, err = _cli(["grade", "--secret", SECRET, "--manual", str(gb / "manual.csv"), "--out", str(gb), "--by", "ta-ana"])  # fmt: skip
    assert code == 0, err
    extra = root / "comments.csv"  # a comment on an auto-graded cell, by another grader
    extra.write_text("student,lab,cell_id,points,comment\ncarol,05_double,grader,,neat\n")
    code, _, err = _cli(["grade", "--secret", SECRET, "--manual", str(extra), "--out", str(gb), "--by", "ta-ben"])  # fmt: skip
    assert code == 0, err
    before = _rows(gb / "gradebook.csv")
    # bob fixes his function and is regraded alone
    _submit(root, root / "student.ipynb", "bob", RIGHT)
    code, out, err = _grade(root, gb, "--student", "bob")
    assert code == 0, err
    assert "bob" in out and "alice " not in out, "only bob was graded"
    after = _rows(gb / "gradebook.csv")
    assert [r for r in after if r["student"] != "bob"] == [
        r for r in before if r["student"] != "bob"
    ], "every other row is kept as it was"
    bob = {r["exercise"]: r for r in after if r["student"] == "bob"}
    assert bob["double"]["points"] == "2", "the regrade saw the fix"
    assert (bob["explain"]["points"], bob["explain"]["comment"]) == ("1", "vague")
    carol = {r["exercise"]: r for r in after if r["student"] == "carol"}
    assert carol["double"]["comment"] == "neat"
    sheet = {r["student"]: r for r in _rows(gb / "manual.csv")}
    assert (sheet["alice"]["points"], sheet["alice"]["comment"]) == ("2.5", "clear")
    record = json.loads((gb / "gradebook.json").read_text())["record"]
    assert {(e["student"], e["by"]) for e in record["manual_entries"]} == {
        ("alice", "ta-ana"), ("bob", "ta-ana"), ("carol", "ta-ben"),
    }  # fmt: skip
    paths = {s["student"]: s["path"] for s in record["submissions"]}
    assert paths["bob"] == str(root / "subs" / "bob" / "05_double.ipynb"), "its own path"
    runs = {s["student"]: s["graded_at"] for s in record["submissions"]}
    assert runs["bob"] >= runs["alice"] == runs["carol"]
    assert verify_gradebook(gb, SECRET).ok


def test_a_run_with_nothing_new_grades_nothing_and_force_regrades_all(book):
    root, gb = book
    _fill(gb / "manual.csv", {"carol": "3"}, {"carol": "full marks"})
    assert _cli(["grade", "--secret", SECRET, "--manual", str(gb / "manual.csv"), "--out", str(gb)])[0] == 0  # fmt: skip
    before = _rows(gb / "gradebook.csv")
    code, out, err = _grade(root, gb)
    assert code == 0, err
    assert "kept 3 submissions" in out and "grading" not in err
    assert _rows(gb / "gradebook.csv") == before
    code, out, err = _grade(root, gb, "--force")
    assert code == 0, err
    assert all(name in out for name in ("alice", "bob", "carol"))
    assert _rows(gb / "gradebook.csv") == before, "the same scores, manual entries kept"
    with sqlite3.connect(gb / "gradebook.sqlite") as db:
        assert [c for (c,) in db.execute("SELECT command FROM runs")].count("grade") == 3


def test_a_sheet_filled_in_but_not_merged_blocks_a_regrade(book):
    root, gb = book
    _fill(gb / "manual.csv", {"alice": "3"}, {})
    typed = (gb / "manual.csv").read_bytes()
    code, _, err = _grade(root, gb, "--student", "alice")
    assert code == 2 and "merge it first" in err, err
    assert (gb / "manual.csv").read_bytes() == typed, "what was typed is not overwritten"


def test_an_edited_database_is_refused(book):
    _, gb = book
    with sqlite3.connect(gb / "gradebook.sqlite") as db:
        db.execute("UPDATE scores SET points = 2 WHERE student = 'bob'")
    code, _, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--feedback"])
    assert code == 2 and "fails verification" in err and "gradebook.sqlite" in err, err
    assert not (gb / "feedback").exists()


def test_an_unknown_student_or_a_changed_source_is_refused_before_grading(book):
    root, gb = book
    code, _, err = _grade(root, gb, "--student", "mallory")
    assert code == 2 and "mallory" in err and "alice" in err, err
    lab = nbformat.read(str(root / "labs" / "05_double.ipynb"), as_version=4)
    lab.cells[1].source += "\nassert double(0) == 0"
    nbformat.write(lab, str(root / "labs" / "05_double.ipynb"))
    code, _, err = _grade(root, gb, "--student", "bob")
    assert code == 2 and "changed since this gradebook was graded" in err and "--force" in err
