"""``mlinfra-lab grade --merge``: chunks graded apart become one verified gradebook (issue 14).

The chunks are written in-process from small reports (grading them is the pipeline tests'
job); the merge goes through the command line, as an instructor runs it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.gradebook import write_gradebook
from mlinfra_lab.grading.manifest import verify_gradebook
from mlinfra_lab.grading.submissions import SubmissionProblem

pytestmark = pytest.mark.grading
SECRET = "chunk-s3cret"
SOURCES = (("00_warmup", "/labs/00_warmup.ipynb", "cd" * 32),)


def _chunk(tmp_path, name: str, students: list[str], problems=(), sources=SOURCES, unenforced=()):
    results = tuple(
        GradeResult(
            s,
            "00_warmup",
            f"{s}.ipynb",
            (
                CellResult("g1", "softmax", 2.0, 2.0, True, ""),
                CellResult("g2", "lse", 0.0, 2.0, False, "AssertionError: wrong"),
            ),
            "ab" * 32,
        )
        for s in students
    )
    report = GradeReport(results, tuple(problems), sources=sources, unenforced=tuple(unenforced))
    write_gradebook(report, tmp_path / name, secret=SECRET)
    return tmp_path / name


def _merge(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["grade", "--secret", SECRET, "--merge", *args])
    return code, err.getvalue()


def test_chunks_merge_into_one_verified_gradebook(tmp_path):
    a = _chunk(tmp_path, "a", ["alice", "bob"])
    b = _chunk(
        tmp_path,
        "b",
        ["carol"],
        [SubmissionProblem("x.ipynb", "a symbolic link", "dave", "00_warmup")],
    )
    code, err = _merge(str(a), str(b), "--out", str(tmp_path / "all"))
    assert code == 1, "a chunk's ungraded input keeps the exit status 1"
    with open(tmp_path / "all" / "gradebook.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted({r["student"] for r in rows}) == ["alice", "bob", "carol", "dave"]
    assert sum(float(r["points"] or 0) for r in rows) == 6
    assert verify_gradebook(tmp_path / "all", SECRET).ok
    book = json.loads((tmp_path / "all" / "gradebook.json").read_text())
    assert book["config"]["non_default_secret"] is True


def test_an_edited_chunk_is_refused(tmp_path):
    a = _chunk(tmp_path, "a", ["alice"])
    b = _chunk(tmp_path, "b", ["bob"])
    path = b / "gradebook.csv"
    path.write_text(path.read_text().replace(",0,2,", ",2,2,"))
    code, err = _merge(str(a), str(b), "--out", str(tmp_path / "all"))
    assert code == 2 and "fails verification" in err and str(b) in err
    assert not (tmp_path / "all").exists()


def test_overlapping_or_mismatched_chunks_are_refused(tmp_path):
    a = _chunk(tmp_path, "a", ["alice"])
    again = _chunk(tmp_path, "again", ["alice"])
    code, err = _merge(str(a), str(again), "--out", str(tmp_path / "x"))
    assert code == 2 and "also graded in" in err
    other = _chunk(tmp_path, "other", ["bob"], sources=(("00_warmup", "/l.ipynb", "ef" * 32),))
    code, err = _merge(str(a), str(other), "--out", str(tmp_path / "y"))
    assert code == 2 and "other source labs" in err
    err_io = io.StringIO()
    with contextlib.redirect_stderr(err_io):
        code = main(["grade", "--merge", str(a), "--out", str(tmp_path / "z")])
    assert code == 2 and "secret" in err_io.getvalue()  # merged without the chunks' secret


def test_a_chunk_merged_into_a_gradebook_replaces_its_students_and_keeps_the_rest(tmp_path):
    """A regrade chunk (alice, graded again elsewhere) merged into the class's gradebook:
    her rows are replaced; bob's rows and the comment entered on them are kept."""
    from mlinfra_lab.grading.views import BookSession

    all_ = tmp_path / "all"
    code, err = _merge(str(_chunk(tmp_path, "a", ["alice", "bob"])), "--out", str(all_))
    assert code == 0, err
    with BookSession(all_, SECRET) as book:
        book.db.add_manual([("bob", "00_warmup", "g2", None, "see lecture 3")], by="ta", sheet="t")
        book.commit()
    again = _chunk(tmp_path, "again", ["alice"])
    book_json = json.loads((again / "gradebook.json").read_text())
    assert book_json["results"][0]["student"] == "alice"
    results = (
        GradeResult(
            "alice",
            "00_warmup",
            "alice.ipynb",
            (
                CellResult("g1", "softmax", 2.0, 2.0, True, ""),
                CellResult("g2", "lse", 2.0, 2.0, True, ""),
            ),
            "ef" * 32,
        ),
    )
    write_gradebook(GradeReport(results, (), sources=SOURCES), again, secret=SECRET)
    code, err = _merge(str(again), "--out", str(all_))
    assert code == 0, err
    with open(all_ / "gradebook.csv", newline="") as fh:
        rows = {(r["student"], r["exercise"]): r for r in csv.DictReader(fh)}
    assert rows[("alice", "lse")]["points"] == "2", "alice's regrade replaced her rows"
    assert (
        rows[("bob", "lse")]["points"] == "0" and rows[("bob", "lse")]["comment"] == "see lecture 3"
    )
    assert verify_gradebook(all_, SECRET).ok


def test_a_gradebook_read_back_keeps_the_budgets_not_enforced() -> None:
    from mlinfra_lab.grading.execute import ExecutionConfig
    from mlinfra_lab.grading.merge import report_from_json

    report = GradeReport((), (), (), ExecutionConfig(), (), "rlimit", unenforced=("memory: no cgroups",))  # fmt: skip
    back = report_from_json(report.as_dict())
    assert back.unenforced == ("memory: no cgroups",)
    assert back.as_dict()["config"]["budgets_not_enforced"] == ["memory: no cgroups"]


def test_a_merge_of_chunks_keeps_every_budget_any_chunk_could_not_hold(tmp_path):
    """Three chunks, graded on machines that held different budgets: the merged gradebook
    records each line once, in the order the chunks first gave it."""
    memory, disk = "the memory budget is not enforced: no cgroups", "the disk budget: no root"
    a = _chunk(tmp_path, "a", ["alice"], unenforced=[memory])
    b = _chunk(tmp_path, "b", ["bob"])
    c = _chunk(tmp_path, "c", ["carol"], unenforced=[disk, memory])
    code, err = _merge(str(a), str(b), str(c), "--out", str(tmp_path / "all"))
    assert code == 0, err
    book = json.loads((tmp_path / "all" / "gradebook.json").read_text())
    assert book["config"]["budgets_not_enforced"] == [memory, disk]
    assert sorted(r["student"] for r in book["results"]) == ["alice", "bob", "carol"]
    assert verify_gradebook(tmp_path / "all", SECRET).ok
    code, err = _merge(str(c), str(b), str(a), "--out", str(tmp_path / "again"))
    assert code == 0, err
    again = json.loads((tmp_path / "again" / "gradebook.json").read_text())
    assert again["config"]["budgets_not_enforced"] == [disk, memory]
