"""A submission that was identified but refused (malformed, a second file, over a budget)
gets a feedback report that says "not graded" and why, and the summary lists it.

Before, only graded submissions had a report: a student whose file was refused heard
nothing, and the summary did not name them. The honest neighbour's report is unchanged;
paths in the reason are cut to file names.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.submissions import SubmissionProblem
from mlinfra_lab.grading.views import BookSession, store_report

pytestmark = pytest.mark.grading
SECRET = "refused-s3cret"
SECRET_DIR = "/srv/course/private-2026/subs"


@pytest.fixture
def gb(tmp_path):
    cells = (CellResult("g1", "softmax", 2.0, 2.0, True, ""),)
    report = GradeReport(
        (GradeResult("ann", "00_warmup", f"{SECRET_DIR}/ann/00_warmup.ipynb", cells, "ab" * 32),),
        (
            SubmissionProblem(
                f"{SECRET_DIR}/eve/00_warmup.ipynb",
                "a malformed notebook, not graded (cell 3 has no source)",
                "eve",
                "00_warmup",
            ),  # fmt: skip
            SubmissionProblem(f"{SECRET_DIR}/notes.txt", "not a Jupyter notebook"),
        ),
        sources=(("00_warmup", "/labs/00_warmup.ipynb", "cd" * 32),),
    )
    with BookSession(tmp_path / "gb", SECRET, create=True) as book:
        store_report(book.db, report, command="grade", by="t")
        book.commit()
    return tmp_path / "gb"


def test_a_refused_submission_gets_a_report_and_is_listed(gb):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["grade", "--secret", SECRET, "--out", str(gb), "--feedback", "--summary"])
    assert code == 0
    md = (gb / "feedback" / "eve" / "00_warmup.md").read_text()
    page = (gb / "feedback" / "eve" / "00_warmup.html").read_text()
    for text in (md, page):
        assert "not graded" in text and "cell 3 has no source" in text
        assert "00\\_warmup.ipynb" in text or "00_warmup.ipynb" in text
        assert SECRET_DIR not in text, "the instructor's folders stay private"
    ann = (gb / "feedback" / "ann" / "00_warmup.md").read_text()
    assert "**2 / 2**" in ann and "not graded" not in ann, "the honest neighbour"
    summary = (gb / "summary.txt").read_text()
    assert "not graded (1" in summary and "eve  00_warmup: a malformed notebook" in summary
    assert "'eve' 00_warmup: not graded" in out.getvalue()
    assert sorted(p.name for p in (gb / "feedback").iterdir()) == ["ann", "eve"]
