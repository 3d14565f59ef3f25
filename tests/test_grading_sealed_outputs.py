"""What leaves the gradebook folder is sealed: ``--verify`` fails once an export, a feedback
report or the summary is edited after the command wrote it.

Before `manifest.seal_outputs`, the manifest listed only the record and its views, and
``--verify`` passed after the Canvas export or a feedback report was edited (the first
test failed there). A later change to the gradebook is not blocked by an edited export
(it is not the record); the outputs it did not rewrite are then named as not sealed.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.views import BookSession, store_report

pytestmark = pytest.mark.grading
SECRET = "sealed-s3cret"


@pytest.fixture
def gb(tmp_path):
    cells = (CellResult("g1", "softmax", 2.0, 2.0, True, ""),)
    report = GradeReport(
        tuple(GradeResult(s, "00_warmup", f"{s}.ipynb", cells, "ab" * 32) for s in ("ann", "eve")),
        (),
        sources=(("00_warmup", "/labs/00_warmup.ipynb", "cd" * 32),),
    )
    with BookSession(tmp_path / "gb", SECRET, create=True) as book:
        store_report(book.db, report, command="grade", by="t")
        book.commit()
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(tmp_path / "gb"),
                      "--export", "canvas", "--feedback", "--summary"])  # fmt: skip
    assert code == 0, err
    return tmp_path / "gb"


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@pytest.mark.parametrize(
    "name", ["export-canvas.csv", "feedback/eve/00_warmup.md", "feedback/eve/00_warmup.html", "summary.txt"]
)  # fmt: skip
def test_verify_fails_when_an_output_is_edited(gb, name):
    assert _cli(["grade", "--secret", SECRET, "--verify", str(gb)])[0] == 0
    path = gb / name
    path.write_text(path.read_text().replace("2", "9"))  # eve's 2 / 2 becomes 9 / 9
    code, err = _cli(["grade", "--secret", SECRET, "--verify", str(gb)])
    assert code == 1 and f"{path}: edited after grading" in err, err
    assert str(gb / "feedback" / "ann" / "00_warmup.md") not in err, "the neighbour verifies"


def test_an_edited_export_does_not_block_the_gradebook_and_is_named_unsealed(gb):
    export = gb / "export-canvas.csv"
    export.write_text(export.read_text() + "eve,,,eve,,9\n")
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--summary"])
    assert code == 0, err
    code, err = _cli(["grade", "--secret", SECRET, "--verify", str(gb)])
    assert code == 0 and f"{export}: not sealed" in err, err
    assert "summary.txt: not sealed" not in err, "rewritten just now, so sealed again"
