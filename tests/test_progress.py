"""Progress bars draw only on a terminal; off one (a CI log) they leave one summary line."""

from __future__ import annotations

import io

import pytest

from mlinfra_lab.progress import progress_bar

pytestmark = pytest.mark.foundation


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_one_summary_line_and_no_redraws(capsys) -> None:
    assert list(progress_bar(range(3), desc="work", unit="step")) == [0, 1, 2]
    with progress_bar(total=4, desc="cells", unit="cell") as bar:
        bar.update(2)
        bar.update()
        bar.set_postfix(loss="0.5")
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("work: 3/3 step in ")
    assert lines[1].startswith("cells: 3/4 cell in ") and lines[1].endswith("(loss=0.5)")


def test_disabled_says_nothing(capsys) -> None:
    assert list(progress_bar(range(2), desc="quiet", enabled=False)) == [0, 1]
    assert capsys.readouterr().err == ""


def test_on_a_terminal_tqdm_draws_the_bar(capsys) -> None:
    out = _Terminal()
    bar = progress_bar(range(5), desc="drawn", file=out)
    assert list(bar) == list(range(5))
    assert "drawn" in out.getvalue() and "5/5" in out.getvalue()
    assert capsys.readouterr().err == ""
