"""Attack: a hand mark outlives the text it marked.

A student's written answer is marked by hand (here: full marks for a text copied from a
classmate, the evidence the instructor keeps). The student then resubmits with another
answer. Before the defence, the regrade kept the old mark and comment for the new text, and
the marked text vanished from the gradebook. Now every hand mark stores the digest of the
answer it graded (`manual.answer_digest`): a changed answer is pending again, the earlier
text and mark stay in ``gradebook.json``'s record, and a sheet filled in for the old text is
refused for the new one. The honest neighbour, marked and unchanged, keeps the mark.

Run on the old gradebook_db/views/manual_scores, the first two tests failed (eve kept 3 / 3
for the new text; the history held no text; the stale sheet was merged). The gradebook is
a real one (SQLite, views, manifest); the regrade stores a report as ``grade`` does.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sqlite3

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.gradebook_db import _SCHEMA, SCHEMA_VERSION, GradebookDB
from mlinfra_lab.grading.manual import PENDING, answer_digest
from mlinfra_lab.grading.views import BookSession, store_report

pytestmark = pytest.mark.grading
SECRET = "binding-s3cret"
LAB = "05_bound"
COPIED = "The bound is 4 because the p99 delay is 3.2 (copied word for word)."
OWN = "I think 4, as the delays mostly stay small."
ANN = "Four: the p99 staleness in my run was 3.2 updates, so 4 covers it."


def _result(student: str, answer: str) -> GradeResult:
    cells = (
        CellResult("grader", "double", 2.0, 2.0, True, ""),
        CellResult("answer-bound", "bound", 0.0, 3.0, False, PENDING, True, answer),
    )
    return GradeResult(student, LAB, f"subs/{student}/{LAB}.ipynb", cells, "ab" * 32)


def _report(*results: GradeResult) -> GradeReport:
    return GradeReport(results, (), sources=((LAB, f"/labs/{LAB}.ipynb", "cd" * 32),))


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _scores(path, sheet: list[dict[str, str]], points: dict[str, str]) -> None:
    """The instructor's filled-in copy of `sheet`."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(sheet[0]))
        writer.writeheader()
        writer.writerows({**r, "points": points[r["student"]]} for r in sheet)


def _bound(gb) -> dict[str, tuple[float, str]]:
    book = json.loads((gb / "gradebook.json").read_text())
    return {
        r["student"]: next((c["points"], c["message"]) for c in r["cells"] if c["manual"])
        for r in book["results"]
    }


@pytest.fixture
def marked(tmp_path):
    """ann and eve graded, their answers marked by hand (2 and 3 of 3): (gb, old sheet)."""
    gb = tmp_path / "gb"
    with BookSession(gb, SECRET, create=True) as book:
        store_report(book.db, _report(_result("ann", ANN), _result("eve", COPIED)),
                     command="grade", by="t")  # fmt: skip
        book.commit()
    sheet = _rows(gb / "manual.csv")
    assert {r["answer_sha256"] for r in sheet} == {answer_digest(ANN), answer_digest(COPIED)}
    _scores(tmp_path / "scores.csv", sheet, {"ann": "2", "eve": "3"})
    code, err = _cli(["grade", "--secret", SECRET, "--manual", str(tmp_path / "scores.csv"),
                      "--out", str(gb)])  # fmt: skip
    assert code == 0, err
    assert {s: p for s, (p, _) in _bound(gb).items()} == {"ann": 2, "eve": 3}
    with BookSession(gb, SECRET) as book:  # eve resubmits another answer; ann is unchanged
        store_report(book.db, _report(_result("eve", OWN)), command="grade", by="t")
        book.commit()
    return gb, tmp_path / "scores.csv"


def test_a_changed_answer_is_pending_again_with_the_marked_text_in_the_history(marked):
    gb, _ = marked
    bound = _bound(gb)
    assert bound["ann"] == (2, "graded by hand: 2 / 3"), "the honest neighbour keeps the mark"
    points, message = bound["eve"]
    assert points == 0 and message.startswith(PENDING), message
    assert "answer changed since it was graded by hand (3 / 3" in message
    history = json.loads((gb / "gradebook.json").read_text())["record"]["manual_entries"]
    eve = [h for h in history if h["student"] == "eve"]
    assert [(h["points"], h["answer"], h["current"]) for h in eve] == [(3, COPIED, False)]
    assert eve[0]["answer_sha256"] == answer_digest(COPIED), "the evidence is kept"
    sheet = {r["student"]: r for r in _rows(gb / "manual.csv")}
    assert sheet["eve"]["points"] == "" and sheet["eve"]["answer"] == OWN
    assert sheet["ann"]["points"] == "2"


def test_a_sheet_filled_in_for_the_old_text_is_refused_for_the_new(marked):
    gb, old_sheet = marked
    before = (gb / "gradebook.json").read_bytes()
    code, err = _cli(["grade", "--secret", SECRET, "--manual", str(old_sheet), "--out", str(gb)])
    assert code == 2 and f"{old_sheet}:3" in err and "'eve'" in err and "new manual.csv" in err
    assert (gb / "gradebook.json").read_bytes() == before, "nothing merged, ann's row included"


def test_a_schema_1_gradebook_is_migrated_and_its_marks_still_count(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA.replace(",\n    answer TEXT, answer_sha256 TEXT", ""))
    db.execute("INSERT INTO meta VALUES ('schema', '1')")
    db.execute("INSERT INTO manual_entries (student, lab, cell_id, points, comment, at, by, "
               "sheet) VALUES ('ann', ?, 'answer-bound', 2, NULL, 'then', 'ta', 's')", (LAB,))  # fmt: skip
    db.commit()
    db.close()
    with GradebookDB(path) as book:
        state = book.state()
    assert state.manual[("ann", LAB, "answer-bound")].points == 2
    assert state.history[0]["current"] and SCHEMA_VERSION == "2"


def test_merging_the_written_back_sheet_again_credits_nobody_anew(tmp_path):
    gb = tmp_path / "gb"
    with BookSession(gb, SECRET, create=True) as book:
        store_report(book.db, _report(_result("ann", ANN)), command="grade", by="t")
        book.commit()
    scores = tmp_path / "scores.csv"
    _scores(scores, _rows(gb / "manual.csv"), {"ann": "2"})
    assert _cli(["grade", "--secret", SECRET, "--manual", str(scores), "--out", str(gb), "--by", "ta-ana"])[0] == 0  # fmt: skip
    again = _rows(gb / "manual.csv")  # the sheet as grading wrote it back: ann's 2 in it
    _scores(scores, again, {"ann": "2"})
    assert _cli(["grade", "--secret", SECRET, "--manual", str(scores), "--out", str(gb), "--by", "ta-bob"])[0] == 0  # fmt: skip
    _scores(scores, again, {"ann": "2.5"})  # a real change is stored, and credited
    assert _cli(["grade", "--secret", SECRET, "--manual", str(scores), "--out", str(gb), "--by", "ta-bob"])[0] == 0  # fmt: skip
    history = json.loads((gb / "gradebook.json").read_text())["record"]["manual_entries"]
    assert [(h["by"], h["points"]) for h in history] == [("ta-ana", 2), ("ta-bob", 2.5)]
