"""`.ci/lanes.sh`, make test's two lanes: both run, and a failure in either fails the whole.

A stand-in for make (a shell script given as MAKE) prints the targets it was asked for and
fails where FAIL names one of them, so each test can make one lane fail and read what the
script said. The Makefile's own stages are checked against it too: every stage that
`make test` used to run one after another is still in one of the lanes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.ci

ROOT = Path(__file__).resolve().parents[1]
LANES = ROOT / ".ci" / "lanes.sh"
BESIDE = ["notebooks", "validate", "book", "browser"]
FAKE_MAKE = """#!/bin/sh
targets=""
for arg in "$@"; do case "$arg" in -*) ;; *) targets="$targets $arg" ;; esac; done
echo "fake make:$targets"
for t in $targets; do [ "$t" = "$FAIL" ] && { echo "fake make: $t failed"; exit 1; }; done
exit 0
"""


def _run(tmp_path: Path, *stages: str, fail: str = "", lanes: str = "2"):
    make = tmp_path / "make"
    make.write_text(FAKE_MAKE)
    make.chmod(0o755)
    env = {**os.environ, "MAKE": str(make), "FAIL": fail, "LANES": lanes, "TMPDIR": str(tmp_path)}
    return subprocess.run(
        ["bash", str(LANES), *stages], capture_output=True, text=True, env=env, timeout=60
    )


def test_both_lanes_run_and_the_other_lanes_output_is_printed(tmp_path):
    done = _run(tmp_path, *BESIDE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fake make: unit" in done.stdout
    assert "fake make: notebooks validate book browser" in done.stdout
    assert "unit exit 0; notebooks validate book browser exit 0" in done.stdout
    assert list(tmp_path.glob("mlinfra-lane.*")) == [], "the lane's log is removed"


@pytest.mark.parametrize("fail", ["unit", "validate"])
def test_a_failure_in_either_lane_fails_and_the_other_lane_still_reports(tmp_path, fail):
    done = _run(tmp_path, *BESIDE, fail=fail)
    assert done.returncode != 0
    assert f"fake make: {fail} failed" in done.stdout
    assert "fake make: unit" in done.stdout and "fake make: notebooks" in done.stdout
    unit, other = ("1", "0") if fail == "unit" else ("0", "1")
    assert f"unit exit {unit}; notebooks validate book browser exit {other}" in done.stdout


def test_one_lane_when_asked(tmp_path):
    done = _run(tmp_path, *BESIDE, lanes="1")
    assert done.returncode == 0
    assert done.stdout.strip() == "fake make: unit notebooks validate book browser"


def test_no_stage_is_a_usage_error(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 2 and "usage: bash .ci/lanes.sh STAGE" in done.stderr


def test_the_makefile_runs_every_stage_in_one_lane_or_the_other():
    lines = (ROOT / "Makefile").read_text().splitlines()
    quick = next(line.split(":", 1)[1].split() for line in lines if line.startswith("test-stages:"))
    beside = next(
        line.split(":=", 1)[1].split() for line in lines if line.startswith("BESIDE_UNIT")
    )
    assert quick == ["lint", "check-lock"]
    assert beside == BESIDE
    recipe = lines[lines.index(next(x for x in lines if x.startswith("test-stages:"))) + 1]
    assert ".ci/lanes.sh $(BESIDE_UNIT)" in recipe
