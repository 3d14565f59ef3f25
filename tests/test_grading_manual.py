"""Written answers graded by hand (issue 12): markdown cells tagged ``manual`` are listed in
the gradebook with the student's text, and ``grade --manual SCORES.csv`` merges the points.

One real grading run (kernels in the sandbox) makes the gradebook; the merges go through
the command line, as an instructor runs them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json

import nbformat
import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading import MarkerError, manual_cells, release_notebook, verify_gradebook
from mlinfra_lab.grading.manual import PENDING, PLACEHOLDER

pytestmark = pytest.mark.grading
SECRET = "manual-s3cret"
MODEL = "The bound should be 4: the p99 delay measured in the run is 3.2 updates."
ANSWER = '=HYPERLINK("x") I would pick 4, since the delays stay under 4 in 99% of steps.'


def _lab() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
            id="solution",
        ),
        nbformat.v4.new_code_cell(
            "assert double(3) == 6",
            id="grader",
            metadata={"tags": ["grader"], "points": 2, "exercise": "double"},
        ),
        nbformat.v4.new_markdown_cell(
            "**Question.** Which bound would you choose, and why?", id="question"
        ),
        nbformat.v4.new_markdown_cell(
            MODEL,
            id="answer-bound",
            metadata={"tags": ["manual"], "points": 3, "exercise": "bound"},
        ),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A source lab, its release, two submissions graded for real: (folder, gradebook dir)."""
    root = tmp_path_factory.mktemp("manual")
    (root / "labs").mkdir()
    nbformat.write(_lab(), str(root / "labs" / "05_bound.ipynb"))
    student = release_notebook(root / "labs" / "05_bound.ipynb", root / "student.ipynb")
    for name, answer in (("alice", ANSWER), ("bob", None)):
        nb = nbformat.read(str(student), as_version=4)
        nb.cells[0].source = "def double(x):\n    return 2 * x"
        if answer is None:  # bob deleted the answer cell
            nb.cells = [c for c in nb.cells if c.get("id") != "answer-bound"]
        else:
            next(c for c in nb.cells if c.get("id") == "answer-bound").source = answer
        (root / "subs" / name).mkdir(parents=True)
        nbformat.write(nb, str(root / "subs" / name / "05_bound.ipynb"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(
            [
                "grade",
                "--secret",
                SECRET,
                "--source",
                str(root / "labs"),
                "--out",
                str(root / "gb"),
                str(root / "subs"),
            ]
        )
    assert code == 0
    assert "2 / 5 (3 of them for written answers, to grade by hand" in out.getvalue()
    return root, root / "gb"


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _copy(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_the_release_hides_the_model_answer(graded):
    root, _ = graded
    released = nbformat.read(str(root / "student.ipynb"), as_version=4)
    cell = next(c for c in released.cells if c.get("id") == "answer-bound")
    assert cell.source == PLACEHOLDER and MODEL not in json.dumps(released)


def test_the_gradebook_lists_each_answer_for_the_instructor(graded):
    _, gb = graded
    rows = {(r["student"], r["exercise"]): r for r in _rows(gb / "gradebook.csv")}
    assert rows[("alice", "double")]["points"] == "2"
    assert rows[("alice", "bound")]["points"] == "0" and rows[("alice", "bound")]["max"] == "3"
    assert rows[("alice", "bound")]["message"] == PENDING
    assert "no answer" in rows[("bob", "bound")]["message"]
    sheet = {r["student"]: r for r in _rows(gb / "manual.csv")}
    assert sheet["alice"]["answer"] == "'" + ANSWER  # a formula stays text in a spreadsheet
    assert sheet["alice"]["points"] == "" and sheet["alice"]["cell_id"] == "answer-bound"
    assert sheet["bob"]["answer"] == ""
    book = json.loads((gb / "gradebook.json").read_text())
    alice = next(r for r in book["results"] if r["student"] == "alice")
    assert alice["points"] == 2 and alice["max"] == 5
    assert any(c["manual"] and c["answer"] == ANSWER for c in alice["cells"])
    assert verify_gradebook(gb, SECRET).ok


def test_merging_the_filled_in_sheet_updates_the_totals(graded, tmp_path):
    _, gb = graded
    gb = _copy(gb, tmp_path / "gb")
    sheet = _rows(gb / "manual.csv")
    for row in sheet:  # filled in where it lay, as a spreadsheet saves it (no leading ')
        row["points"] = "2.5" if row["student"] == "alice" else ""
        row["answer"] = row["answer"].lstrip("'")
    with open(gb / "manual.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(sheet[0]))
        writer.writeheader()
        writer.writerows(sheet)
    code, err = _cli(
        ["grade", "--secret", SECRET, "--manual", str(gb / "manual.csv"), "--out", str(gb)]
    )
    assert code == 0, err
    book = json.loads((gb / "gradebook.json").read_text())
    totals = {r["student"]: r["points"] for r in book["results"]}
    assert totals == {"alice": 4.5, "bob": 2}
    rows = {(r["student"], r["exercise"]): r for r in _rows(gb / "gradebook.csv")}
    assert rows[("alice", "bound")]["points"] == "2.5"
    assert "graded by hand" in rows[("alice", "bound")]["message"]
    assert rows[("bob", "bound")]["message"].startswith(PENDING)
    assert {r["student"]: r["points"] for r in _rows(gb / "manual.csv")} == {
        "alice": "2.5",
        "bob": "",
    }
    assert verify_gradebook(gb, SECRET).ok, "the merged gradebook is sealed again"


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            {"student": "mallory", "lab": "05_bound", "cell_id": "answer-bound", "points": "3"},
            "no written answer of student 'mallory'",
        ),
        (
            {"student": "alice", "lab": "05_bound", "cell_id": "answer-bound", "points": "4"},
            "give a number from 0 to 3",
        ),
        (
            {"student": "alice", "lab": "05_bound", "cell_id": "answer-bound", "points": "lots"},
            "give a number from 0 to 3",
        ),
        (  # an auto-graded cell is not for hand points
            {"student": "alice", "lab": "05_bound", "cell_id": "grader", "points": "2"},
            "no written answer of student 'alice'",
        ),
    ],
)
def test_a_wrong_sheet_row_is_refused_naming_its_line(graded, tmp_path, row, expected):
    _, gb = graded
    gb = _copy(gb, tmp_path / "gb")
    before = (gb / "gradebook.json").read_bytes()
    scores = tmp_path / "scores.csv"
    with open(scores, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    code, err = _cli(["grade", "--secret", SECRET, "--manual", str(scores), "--out", str(gb)])
    assert code == 2 and expected in err and f"{scores}:2" in err, err
    assert (gb / "gradebook.json").read_bytes() == before


def test_an_edited_gradebook_is_not_merged(graded, tmp_path):
    _, gb = graded
    gb = _copy(gb, tmp_path / "gb")
    path = gb / "gradebook.csv"
    path.write_text(path.read_text().replace("bob,05_bound,double,2", "bob,05_bound,double,9"))
    scores = tmp_path / "scores.csv"
    scores.write_text("student,lab,exercise,points\nalice,05_bound,bound,3\n")
    code, err = _cli(["grade", "--secret", SECRET, "--manual", str(scores), "--out", str(gb)])
    assert code == 2 and "fails verification" in err


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"cell_type": "code"}, "written answers are markdown cells"),
        ({"points": None}, "'points' must be a number > 0"),
        ({"exercise": ""}, "'exercise' must name the exercise"),
        ({"tags": ["manual", "grader"]}, "also tagged grader or readonly"),
    ],
)
def test_a_malformed_manual_cell_is_named(change, expected):
    nb = _lab()
    cell = nb.cells[3]
    if "cell_type" in change:
        nb.cells[3] = nbformat.v4.new_code_cell(cell.source, id=cell.id, metadata=cell.metadata)
    else:
        cell.metadata.update(change)
    with pytest.raises(MarkerError, match=expected):
        manual_cells(nb, "05_bound")


def test_a_hostile_answer_cell_gains_nothing(tmp_path):
    """A submission that turns the answer cell into code claiming 100 points, and one whose
    answer is a megabyte: points come from the source lab, code never counts as an answer
    (it runs like any student cell, in the sandbox), and the stored text is capped."""
    from mlinfra_lab.grading.manual import MAX_ANSWER_CHARS

    (tmp_path / "labs").mkdir()
    nbformat.write(_lab(), str(tmp_path / "labs" / "05_bound.ipynb"))
    student = release_notebook(tmp_path / "labs" / "05_bound.ipynb", tmp_path / "s.ipynb")
    for name in ("mallory", "carol"):
        nb = nbformat.read(str(student), as_version=4)
        nb.cells[0].source = "def double(x):\n    return 2 * x"
        k = next(i for i, c in enumerate(nb.cells) if c.get("id") == "answer-bound")
        if name == "mallory":
            nb.cells[k] = nbformat.v4.new_code_cell(
                "open('pwned', 'w').write('x')  # my answer",
                id="answer-bound",
                metadata={"tags": ["manual"], "points": 100, "exercise": "bound"},
            )
        else:
            nb.cells[k].source = "x" * (1 << 20)
        (tmp_path / "subs" / name).mkdir(parents=True)
        nbformat.write(nb, str(tmp_path / "subs" / name / "05_bound.ipynb"))
    code, _ = _cli(
        [
            "grade",
            "--source",
            str(tmp_path / "labs"),
            "--out",
            str(tmp_path / "gb"),
            str(tmp_path / "subs"),
        ]
    )
    assert code == 0
    sheet = {r["student"]: r for r in _rows(tmp_path / "gb" / "manual.csv")}
    assert sheet["mallory"]["max"] == "3" and sheet["mallory"]["answer"] == ""
    assert len(sheet["carol"]["answer"]) < MAX_ANSWER_CHARS + 100
    totals = {
        r["student"]: r["max"]
        for r in json.loads((tmp_path / "gb" / "gradebook.json").read_text())["results"]
    }
    assert totals == {"mallory": 5, "carol": 5}
    assert not (tmp_path / "subs" / "mallory" / "pwned").exists()
