"""A hostile name_cause in lab 2 reads the answer off the run object instead of its timings.

Lab 2's graders hand `name_cause` measured runs (whose config lists the injected faults and
whose file name says them) and synthetic mysteries (whose source said them). The read-only
`checked_causes` cell, through which every grader calls the student's code, must hide all of
that (`scaling.hide_faults`); this runs the lab's own cells against the lab's own cheating
wrong answer, and shows the cheat would win without the hiding.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from mlinfra_lab.scaling import load_run, mystery_set
from mlinfra_lab.scaling.data import example_path

LAB = Path(__file__).resolve().parents[1] / "labs" / "02_scaling_debug.ipynb"
LABELLED = {
    "straggler": "cpu-w4-straggler.json",
    "data_loading": "cpu-w4-slow_data.json",
    "small_batch": "cpu-w4-small_batch.json",
    "transport": "cpu-w4-slow_transport.json",
    "communication": "cpu-w4-no_overlap.json",
}


@pytest.fixture(scope="module")
def lab_namespace() -> dict:
    cells = {c.get("id"): c.source for c in nbformat.read(str(LAB), as_version=4).cells}
    ns: dict = {}
    exec(cells["cause-check"], ns)  # the read-only cell the graders call name_cause through
    exec(cells["cause-wrong-reads-the-label"], ns)  # the cheat, as a student would write it
    return ns


def test_the_cheat_would_win_on_the_runs_as_they_are(lab_namespace, monkeypatch):
    from mlinfra_lab.scaling.diagnose import scaling_efficiency

    monkeypatch.setitem(lab_namespace, "scaling_efficiency", scaling_efficiency)
    small = load_run(example_path("cpu-w2-clean.json"))
    for cause, name in LABELLED.items():
        got = lab_namespace["name_cause"](small, load_run(example_path(name)))["causes"]
        assert got == [cause]


def test_through_the_graders_the_cheat_sees_no_label(lab_namespace):
    small = load_run(example_path("cpu-w2-clean.json"))
    checked = lab_namespace["checked_causes"]
    for cause, name in LABELLED.items():
        assert checked(small, load_run(example_path(name)), name) == {"none"}, cause
    for m in mystery_set(7):
        assert checked(small, m.run, m.name) == {"none"}, m.faults
