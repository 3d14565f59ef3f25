"""The process budget without control groups (issue 30, item 2): ``RLIMIT_NPROC``.

Where no control group counts a sandbox's tasks (``pids.max``), a grader run as root still
holds the process budget: each sandbox's processes run as a throwaway user of their own,
and ``RLIMIT_NPROC`` on that user counts their tasks alone (`Sandbox.nproc_limit`). The
attack of `test_grading_attack_budgets` (``forks``: 2 x PROCS forked children) runs in one
batch of lab 0 with the control groups switched off inside the test: its fork is refused,
the exercise scores 0 with a message naming the budget, ``grade`` no longer lists the
process count among the budgets it cannot hold, and the honest neighbour keeps 7/7.
`test_grading_attack_reverted` shows the same attack scoring with the limit off too.
As an ordinary user the limit would count every process of that user, the grader's own
included, so it is not set there (the test is skipped).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_grading_attack_budgets import FORKS, PROCS
from test_grading_pipeline import ATTACK_CELL_TIMEOUT, _student_copy, _write_cases
from test_grading_pipeline import _result_points as _points

from mlinfra_lab.grading import ExecutionConfig, grade_submissions
from mlinfra_lab.grading.cgroups import CgroupCaps
from mlinfra_lab.grading.sandbox import make_sandbox

pytestmark = [
    pytest.mark.grading,
    pytest.mark.skipif(os.geteuid() != 0, reason="throwaway users need root"),
]

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
FULL = {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nproc")
    cases = {"alice": _student_copy(), "forks": _student_copy(softmax_solution=FORKS)}
    paths = _write_cases(tmp, cases)
    sandbox = make_sandbox("auto")
    sandbox.caps = CgroupCaps(missing="switched off by the test")  # no pids.max
    config = ExecutionConfig(cell_timeout=ATTACK_CELL_TIMEOUT, max_procs=PROCS, jobs=2)
    report = grade_submissions(paths, WARMUP, config, sandbox=sandbox)
    by = {r.student: r for r in report.results}
    assert set(by) == set(cases), report.problems  # a notebook lost to a grader crash says why
    return by, sandbox


def test_the_honest_neighbour_keeps_full_marks(graded):
    by, _ = graded
    assert _points(by["alice"]) == FULL, by["alice"].cells


def test_a_fork_past_the_budget_is_refused_and_scores_nothing(graded):
    by, _ = graded
    points, _max, text = by["forks"].exercises()["stable_softmax"]
    assert points == 0, text
    assert f"{PROCS} processes and threads per notebook (--max-procs)" in text


def test_the_process_budget_is_not_listed_as_unenforced(graded):
    _, sandbox = graded
    assert sandbox.nproc_limit(0, PROCS) == PROCS
    missing = " ".join(sandbox.limits_missing(None, PROCS, None))
    assert "process-count" not in missing
