"""LMS export and the class summary (issue 30, item 5): one row per student, a total per lab
(machine scores, hand-graded points and the late penalty), in Canvas's and Moodle's CSV
conventions; the summary table and its histogram picture.

The gradebook is a real one (SQLite, views, manifest) written from small reports in
process; the exports go through the command line.
"""

from __future__ import annotations

import contextlib
import csv
import io

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading.class_summary import summary_rows, summary_text
from mlinfra_lab.grading.cli_book import EXPORT_FORMATS
from mlinfra_lab.grading.export import CANVAS_IDS, FORMATS
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.gradebook_db import Policy
from mlinfra_lab.grading.manual import PENDING
from mlinfra_lab.grading.submissions import SubmissionProblem
from mlinfra_lab.grading.views import BookSession, store_report

pytestmark = pytest.mark.grading
SECRET = "export-s3cret"


def _result(student: str, lab: str, points: tuple[float, ...]) -> GradeResult:
    cells = tuple(
        CellResult(f"g{k}", f"ex{k}", p, 2.0, p == 2.0, "" if p == 2.0 else "wrong")
        for k, p in enumerate(points)
    )
    return GradeResult(student, lab, f"{student}_{lab}.ipynb", cells, "ab" * 32)


@pytest.fixture
def gb(tmp_path):
    warmup = GradeReport(
        (_result("ann", "00_warmup", (2, 2)), _result("=bad", "00_warmup", (0, 2))),
        (SubmissionProblem("cy.ipynb", "a malformed cell", "cy", "00_warmup"),),
        sources=(("00_warmup", "/labs/00_warmup.ipynb", "cd" * 32),),
    )
    scaling = GradeReport(
        (_result("ann", "02_scaling", (2, 0, 2)),),
        (),
        sources=(("02_scaling", "/labs/02_scaling.ipynb", "ef" * 32),),
    )
    with BookSession(tmp_path / "gb", SECRET, create=True) as book:
        store_report(book.db, warmup, command="grade", by="t",
                     submitted_at={("ann", "00_warmup"): "2026-12-02T13:00:00+00:00"})  # fmt: skip
        store_report(book.db, scaling, command="grade", by="t")
        book.db.set_policy(Policy("00_warmup", "2026-12-02T12:00:00+00:00", 25.0, 100.0), by="t")
        book.commit()
    return tmp_path / "gb"


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _read(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def test_canvas_export_has_its_columns_points_possible_and_one_row_per_student(gb, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text(
        'student,name,id,sis_login_id,section\nann,"Lee, Ann",1001,alee,S1\n'
        "=bad,,,=bad,\ncy,,,cy,\n"  # every student of the gradebook (a partial one is refused)
    )
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--export", "canvas", "--roster", str(roster)])  # fmt: skip
    assert code == 0, err
    rows = _read(gb / "export-canvas.csv")
    assert rows[0] == [*CANVAS_IDS, "00_warmup", "02_scaling"]
    assert rows[1] == ["Points Possible", "", "", "", "", "4", "6"]
    body = {r[0]: r for r in rows[2:]}
    assert body["Lee, Ann"] == ["Lee, Ann", "1001", "", "alee", "S1", "3", "4"]  # 4 - 25% late
    assert body["'=bad"][3] == "'=bad" and body["'=bad"][5:] == ["2", ""]
    assert body["cy"][5:] == ["", ""], "not graded: an empty cell, not 0"
    assert len(rows) == 2 + 3


def test_moodle_and_plain_exports(gb):
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--export", "moodle", "--export", "csv"])  # fmt: skip
    assert code == 0, err
    moodle = _read(gb / "export-moodle.csv")
    assert moodle[0] == ["Username", "ID number", "Email address", "00_warmup", "02_scaling"]
    assert moodle[1][0] == "'=bad" and "Points Possible" not in {r[0] for r in moodle}
    plain = {r[0]: r for r in _read(gb / "export-csv.csv")}
    assert plain["student"] == ["student", "00_warmup", "02_scaling", "total", "max"]
    assert plain["ann"] == ["ann", "3", "4", "7", "10"]
    assert set(EXPORT_FORMATS) == set(FORMATS)


def test_the_class_summary_table_and_picture(gb):
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--summary"])
    assert code == 0, err
    text = (gb / "summary.txt").read_text()
    assert "late penalty" not in text and "(total)" in text
    assert (gb / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with BookSession(gb, SECRET) as book:
        rows = {(r.lab, r.exercise): r for r in summary_rows(book.report())}
    assert (rows[("00_warmup", "ex0")].count, rows[("00_warmup", "ex0")].full) == (2, 1)
    assert sorted(rows[("00_warmup", "(total)")].points) == [2.0, 3.0]  # late: 4 - 1


def test_the_summary_total_row_counts_submissions_not_final():
    def result(student: str, message: str) -> GradeResult:
        cells = (
            CellResult("g0", "ex0", 2.0, 2.0, True, ""),
            CellResult("w1", "essay", 0.0, 3.0, False, message, True, "text"),
            CellResult("w2", "essay2", 0.0, 3.0, False, message, True, "text"),
        )
        return GradeResult(student, "05_bound", f"{student}.ipynb", cells, "ab" * 32)

    report = GradeReport(
        (result("ann", PENDING), result("ben", PENDING), result("cy", "graded by hand: 0 / 3")),
        (),
    )
    rows = {r.exercise: r for r in summary_rows(report)}
    assert (rows["essay"].pending, rows["essay2"].pending) == (2, 2)
    assert rows["(total)"].pending == 2, "two submissions' totals are not final"
    assert summary_text(report).splitlines()[-1].split()[-1] == "2"


def test_a_partial_roster_is_refused_naming_who_is_missing(gb, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("student,sis_login_id\nann,alee\n")
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--export", "canvas", "--roster", str(roster)])  # fmt: skip
    assert code == 2 and "2 students of the gradebook are not in the roster" in err, err
    assert "=bad" in err and "cy" in err and not (gb / "export-canvas.csv").exists()


def test_canvas_own_gradebook_export_is_a_roster(gb, tmp_path):
    roster = tmp_path / "canvas.csv"
    roster.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,Lab 0 (41)\n"
        "    Points Possible,,,,,4\n"
        '"Lee, Ann",1001,S-1,ann,S1,\n"Bad, Eve",1002,S-2,=bad,S1,\n"Cy, Jo",1003,,cy,S2,\n'
        '"Student, Test",9999,,test,S1,\n'
    )
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--export", "canvas", "--roster", str(roster)])  # fmt: skip
    assert code == 0, err
    body = {r[3]: r for r in _read(gb / "export-canvas.csv")[2:]}
    assert body["ann"][:5] == ["Lee, Ann", "1001", "S-1", "ann", "S1"]
    assert body["'=bad"][:3] == ["Bad, Eve", "1002", "S-2"] and set(body) == {"ann", "'=bad", "cy"}


def test_a_canvas_column_can_name_an_existing_assignment(gb):
    argv = ["grade", "--secret", SECRET, "--out", str(gb), "--export", "canvas"]
    code, err = _cli([*argv, "--canvas-column", "00_warmup=Lab 0: warm-up (4172)"])
    assert code == 0, err
    assert _read(gb / "export-canvas.csv")[0][5:] == ["Lab 0: warm-up (4172)", "02_scaling"]
    code, err = _cli([*argv, "--canvas-column", "00_warmup=Lab 0"])
    assert code == 2 and "LAB=Title (id)" in err
    code, err = _cli([*argv, "--canvas-column", "nolab=X (1)"])
    assert code == 2 and "no lab nolab" in err
