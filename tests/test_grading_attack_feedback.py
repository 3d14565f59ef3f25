"""Attacks on the feedback reports: a bare address that a Markdown renderer turns into a
link, and a folder named like a report that stops ``--release-feedback`` for the class.

- GitHub's Markdown links ``www.``, ``http://`` and e-mail addresses in plain text, and
  markdown-it's linkify links any ``name.tld``: backslash escapes do not stop them. A grader
  message or a comment carrying an address would reach the student as a live link.
- A student who makes a directory named ``LAB-feedback.md`` in their own folder made the
  atomic replace fail, and the exception stopped the release before every later student.

Before the defences (`feedback.defang`, and `_write_all` catching the failed write of one
student), both attack tests failed; the honest neighbour's report is the same either way.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading.feedback import markdown_escape
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.views import BookSession, store_report

pytestmark = pytest.mark.grading
SECRET = "feedback-attack-s3cret"
LURE = "see https://evil.example/reset or www.evil.com, mail help@evil.org, open evil.co.uk"
# what a linkifier would still find: a scheme, www., an address, a domain with a known TLD
LINKABLE = re.compile(r"://|\bwww\.|\w@\w|\w\.(com|org|uk|co)\b|mailto:", re.IGNORECASE)


def _report() -> GradeReport:
    def result(student: str, message: str) -> GradeResult:
        cells = (
            CellResult("g1", "softmax", 2.0, 2.0, True, ""),
            CellResult("g2", "lse", 0.0, 2.0, False, message),
        )
        return GradeResult(student, "00_warmup", f"{student}.ipynb", cells, "ab" * 32)

    return GradeReport(
        (result("aaa-eve", "AssertionError: " + LURE), result("ann", "AssertionError: off by 1")),
        (),
        sources=(("00_warmup", "/labs/00_warmup.ipynb", "cd" * 32),),
    )


@pytest.fixture
def gb(tmp_path):
    with BookSession(tmp_path / "gb", SECRET, create=True) as book:
        store_report(book.db, _report(), command="grade", by="t")
        book.commit()
    return tmp_path / "gb"


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_markdown_feedback_links_no_bare_address(gb):
    code, _, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--feedback"])
    assert code == 0, err
    md = (gb / "feedback" / "aaa-eve" / "00_warmup.md").read_text()
    assert "evil" in md, "the message is still shown"
    assert LINKABLE.findall(md) == []
    assert "https\\[:\\]//evil" in md and "help\\[@\\]evil" in md
    ann = (gb / "feedback" / "ann" / "00_warmup.md").read_text()
    assert "AssertionError: off by 1" in ann and "**2 / 4**" in ann, "the honest neighbour"
    page = (gb / "feedback" / "aaa-eve" / "00_warmup.html").read_text()
    assert "https://evil.example/reset" in page and "<a " not in page, "HTML shows it as text"


def test_plain_messages_stay_readable():
    for text in ("np.allclose failed at 2.5", "x.sum() is wrong", "torch.float32, e.g. fp16"):
        assert markdown_escape(text) == text


def test_a_folder_named_like_a_report_skips_one_student_not_the_class(gb, tmp_path):
    subs = tmp_path / "subs"
    (subs / "aaa-eve" / "00_warmup-feedback.md").mkdir(parents=True)  # sorts first
    (subs / "ann").mkdir()
    code, out, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--release-feedback", str(subs)])  # fmt: skip
    assert code == 0, err
    ann = subs / "ann" / "00_warmup-feedback.md"
    assert ann.is_file() and "off by 1" in ann.read_text(), "the honest neighbour gets feedback"
    assert (subs / "ann" / "00_warmup-feedback.html").is_file()
    assert "'aaa-eve' skipped" in err and "00_warmup-feedback.md cannot be written" in err
    assert "1 skipped" in out
    assert (subs / "aaa-eve" / "00_warmup-feedback.md").is_dir(), "the student's folder untouched"
