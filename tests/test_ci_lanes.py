"""`.ci/lanes.sh`, make test's lanes: every lane runs, and a failure in any fails the whole.

A stand-in for make (a shell script given as MAKE) prints the target it was asked for and
fails where FAIL names it, so each test can make one lane fail and read what the script
said. The Makefile's own lanes are checked too: every stage `make test` must run (the unit
tests in their two halves, the labs' validation, the book and the browser) is in exactly one
lane, and the browser stage comes after the book it opens. The chapters have no stage of
their own: the book stage executes them, so its configuration must fail on a cell that raises.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.ci

ROOT = Path(__file__).resolve().parents[1]
LANES = ROOT / ".ci" / "lanes.sh"
SPEC = ["unit-quick book", "unit-waiting notebooks", "validate"]
STAGES = {"lint", "check-lock", "unit-quick", "unit-waiting", "validate", "book", "browser"}
FAKE_MAKE = """#!/bin/sh
targets=""
for arg in "$@"; do case "$arg" in -*) ;; *) targets="$targets $arg" ;; esac; done
echo "fake make:$targets"
for t in $targets; do [ "$t" = "$FAIL" ] && { echo "fake make: $t failed"; exit 1; }; done
exit 0
"""


def _run(tmp_path: Path, *lanes: str, fail: str = "", one_lane: bool = False):
    make = tmp_path / "make"
    make.write_text(FAKE_MAKE)
    make.chmod(0o755)
    env = {**os.environ, "MAKE": str(make), "FAIL": fail, "TMPDIR": str(tmp_path)}
    env["LANES"] = "1" if one_lane else ""
    return subprocess.run(
        ["bash", str(LANES), *lanes], capture_output=True, text=True, env=env, timeout=60
    )


def test_every_lane_runs_and_the_other_lanes_output_is_printed(tmp_path):
    done = _run(tmp_path, *SPEC)
    assert done.returncode == 0, done.stdout + done.stderr
    for stage in ("unit-quick", "book", "unit-waiting", "notebooks", "validate"):
        assert f"fake make: {stage}\n" in done.stdout
        assert f"lanes: stage {stage}: " in done.stdout
    for lane in SPEC:
        assert f'---- lanes: "{lane}": exit 0' in done.stdout
    assert list(tmp_path.glob("mlinfra-lane.*")) == [], "the lanes' logs are removed"


@pytest.mark.parametrize("fail", ["unit-quick", "unit-waiting", "validate"])
def test_a_failure_in_any_lane_fails_and_the_other_lanes_still_report(tmp_path, fail):
    done = _run(tmp_path, *SPEC, fail=fail)
    assert done.returncode != 0
    assert f"fake make: {fail} failed" in done.stdout
    for lane in SPEC:
        code = "1" if fail in lane.split() else "0"
        assert f'---- lanes: "{lane}": exit {code}' in done.stdout, done.stdout


def test_a_lane_stops_at_its_first_failing_stage(tmp_path):
    done = _run(tmp_path, *SPEC, fail="unit-waiting")
    assert "fake make: notebooks" not in done.stdout  # after unit-waiting, in its lane
    assert "fake make: book" in done.stdout  # another lane goes on


def test_one_lane_when_asked(tmp_path):
    done = _run(tmp_path, *SPEC, one_lane=True)
    assert done.returncode == 0
    ran = [line for line in done.stdout.splitlines() if line.startswith("fake make:")]
    assert ran == [f"fake make: {s}" for lane in SPEC for s in lane.split()]


def test_no_lane_is_a_usage_error(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 2 and "usage: bash .ci/lanes.sh LANE" in done.stderr


def test_the_makefile_runs_every_stage_in_exactly_one_lane():
    lines = (ROOT / "Makefile").read_text().splitlines()
    quick = next(line.split(":", 1)[1].split() for line in lines if line.startswith("test-stages:"))
    spec = next(line.split(":=", 1)[1] for line in lines if line.startswith("TEST_LANES"))
    lanes = [lane.split() for lane in shlex.split(spec)]
    stages = [stage for lane in lanes for stage in lane]
    assert quick == [], "every stage runs in a lane"
    assert sorted(stages) == sorted(STAGES), "each stage once, none missing"
    book_lane = next(lane for lane in lanes if "book" in lane)
    assert "browser" in book_lane and book_lane.index("browser") > book_lane.index("book")
    recipe = lines[lines.index(next(x for x in lines if x.startswith("test-stages:"))) + 1]
    assert ".ci/lanes.sh $(TEST_LANES)" in recipe


def test_the_two_unit_halves_are_the_whole_unit_stage():
    text = (ROOT / "Makefile").read_text()
    unit = text.split("\nunit: setup\n", 1)[1].split("\n", 1)[0]
    assert '-m "not notebooks and not browser"' in unit
    assert '-m "($(WAITING)) and not notebooks and not browser"' in text
    assert '-m "not ($(WAITING)) and not notebooks and not browser"' in text


def test_the_book_stage_fails_on_a_chapter_cell_that_raises(tmp_path):
    """What stands in for nbval on the chapters in `make test`: a one-page book with the
    repository's `execute` settings and the Makefile's build flags, whose one notebook raises
    in its second cell, fails to build and names the notebook."""
    import sys

    import nbformat
    import yaml

    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\nbook: ", 1)[1].split("\n", 2)[1]
    flags = recipe.split("jupyter-book build . ", 1)[1].split()
    assert "-W" in flags, recipe
    execute = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    (tmp_path / "_config.yml").write_text(yaml.safe_dump({"title": "t", "execute": execute}))
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: index\nchapters:\n- file: ch\n")
    (tmp_path / "index.md").write_text("# A book\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A chapter"),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("raise ValueError('a chapter cell raised')"),
    ]
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(tmp_path / "ch.ipynb"))
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    done = subprocess.run(
        [str(jupyter_book), "build", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0, done.stdout[-2000:]
    assert "ch.ipynb: WARNING: Executing notebook failed" in done.stdout + done.stderr
