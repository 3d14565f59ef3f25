"""Per-student feedback (issue 30, item 5): reports in Markdown and HTML with the points, the
grader's message and the instructor's comment per exercise, escaped; ``--release-feedback``
writes each into that student's folder and follows no link.

The gradebook is a real one (SQLite, views, manifest) written from a small report in
process; the reports go through the command line.
"""

from __future__ import annotations

import contextlib
import io
import os

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading.feedback import feedback_documents, markdown_escape
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.views import BookSession, store_report

pytestmark = pytest.mark.grading
SECRET = "feedback-s3cret"
HOSTILE = '<script>alert(1)</script> [x](http://evil) | row\n# head "q"'


def _report(students=("ann", "ben")) -> GradeReport:
    cells = (
        CellResult("g1", "softmax", 2.0, 2.0, True, ""),
        CellResult("g2", "lse", 0.0, 2.0, False, "AssertionError: " + HOSTILE),
        CellResult(
            "w1", "explain", 0.0, 3.0, False, "needs manual grading: see manual.csv", True, "text"
        ),  # fmt: skip
    )
    return GradeReport(
        tuple(
            GradeResult(s, "00_warmup", f"subs/{s}/00_warmup.ipynb", cells, "ab" * 32)
            for s in students
        ),  # fmt: skip
        (),
        sources=(("00_warmup", "/labs/00_warmup.ipynb", "cd" * 32),),
    )


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def gb(tmp_path):
    with BookSession(tmp_path / "gb", SECRET, create=True) as book:
        store_report(book.db, _report(("ann", "ben", "../up")), command="grade", by="test")
        book.db.add_manual(
            [("ann", "00_warmup", "w1", 2.0, "good, but <b>cite</b> the run"),
             ("ann", "00_warmup", "g2", None, "see *lecture* 3 | slide 4")],
            by="ta", sheet="test",
        )  # fmt: skip
        book.commit()
    return tmp_path / "gb"


def test_a_report_has_points_messages_and_comments_escaped(gb):
    code, out, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--feedback"])
    assert code == 0, err
    md = (gb / "feedback" / "ann" / "00_warmup.md").read_text()
    page = (gb / "feedback" / "ann" / "00_warmup.html").read_text()
    assert "**4 / 7**" in md and "<strong>4 / 7</strong>" in page  # 2 + 0 + 2 by hand
    for text in (md, page):
        assert "graded by hand: 2 / 3" in text and "softmax" in text
        assert "<script>" not in text and "<b>cite" not in text, "nothing raw gets through"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;cite&lt;/b&gt;" in page and "see *lecture* 3 | slide 4" in page
    assert "\\<script\\>" in md and "\\[x\\](http\\[:\\]//evil)" in md and "\\| row" in md
    table = [line for line in md.splitlines() if line.startswith("| lse")]
    assert len(table) == 1 and table[0].count(" | ") == 4, "a message cannot add a column"
    ben = (gb / "feedback" / "ben" / "00_warmup.md").read_text()
    assert "not graded yet" in ben and "manual.csv" not in ben
    assert "'../up' skipped" in err and not (gb / "up").exists() and not (gb / "feedback" / "up").exists()  # fmt: skip


def test_release_feedback_writes_into_each_students_folder_and_follows_no_link(gb, tmp_path):
    subs = tmp_path / "subs"
    (subs / "ann").mkdir(parents=True)
    elsewhere = tmp_path / "instructor-notes.md"
    elsewhere.write_text("mine")
    os.symlink(elsewhere, subs / "ann" / "00_warmup-feedback.md")  # planted by a student
    os.symlink(tmp_path, subs / "ben")  # ben's folder points out of the collection
    code, out, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--release-feedback", str(subs)])  # fmt: skip
    assert code == 0, err
    report = subs / "ann" / "00_warmup-feedback.md"
    assert not report.is_symlink() and "Feedback" in report.read_text()
    assert elsewhere.read_text() == "mine", "the link was replaced, not followed"
    assert (subs / "ann" / "00_warmup-feedback.html").exists()
    assert "'ben' skipped" in err and "symbolic link" in err
    assert not (tmp_path / "00_warmup-feedback.md").exists()


def test_markdown_escape_leaves_plain_text_readable():
    assert markdown_escape("points 2.5 - fine (ok)") == "points 2.5 - fine (ok)"
    assert markdown_escape("a\nb|c") == "a b\\|c"
    docs = feedback_documents(_report(("ann",)))
    md, page = docs[("ann", "00_warmup")]
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
