"""The budget attacks can score: each defence reverted, its attack gets through (issue 30).

The acceptance of issue 30 asks that every defence have a hostile submission scoring 0
with it and scoring without it. The attacks of `test_grading_attack_budgets` (process
count, disk) and `test_grading_attack_memory_watch` (memory without control groups) run
here once more, in one `grade_submissions` batch of lab 0, with their defences switched
off inside the test, never through a flag of ``grade``:

- memory: no control groups (``sandbox.caps``) and no memory watch
  (``sandbox.memory_watch = False``): ``children``'s three processes hold 2.4 x MEMORY and
  its solution then scores;
- processes: no control groups and no ``RLIMIT_NPROC`` (``sandbox.nproc_limit``):
  ``forks``' 2 x PROCS children are all forked;
- disk: the tmpfs unsized (``disk_limit=None``) and the host working folder left unsealed
  (``sandbox.seal`` a no-op): ``disk`` writes 2 x DISK into its home and into the host
  folder, and both exercises score.

The address-space limit per kernel stays on: none of these attacks meets it, which is why
it is no defence against them. The honest neighbour keeps 7/7 here too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_grading_attack_budgets import DISK_HOME, DISK_HOST, FORKS, PROCS
from test_grading_attack_memory_watch import CHILDREN, MEMORY
from test_grading_pipeline import ATTACK_CELL_TIMEOUT, _student_copy, _write_cases
from test_grading_pipeline import _result_points as _points

from mlinfra_lab.grading import ExecutionConfig, grade_submissions
from mlinfra_lab.grading.cgroups import CgroupCaps
from mlinfra_lab.grading.sandbox import make_sandbox

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
FULL = {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reverted")
    cases = {
        "alice": _student_copy(),
        "children": _student_copy(softmax_solution=CHILDREN),
        "forks": _student_copy(softmax_solution=FORKS),
        "disk": _student_copy(softmax_solution=DISK_HOME, lse_solution=DISK_HOST),
    }
    paths = _write_cases(tmp, cases)
    sandbox = make_sandbox("auto")
    sandbox.caps = CgroupCaps(missing="reverted by the test")  # no memory or pids caps
    sandbox.memory_watch = False  # no memory watch
    sandbox.nproc_limit = lambda slot, max_procs: None  # no RLIMIT_NPROC either
    sandbox.seal = lambda workdir, slot: None  # the host working folder stays writable
    config = ExecutionConfig(
        cell_timeout=ATTACK_CELL_TIMEOUT,
        memory_limit=MEMORY,
        max_procs=PROCS,
        disk_limit=None,
        jobs=2,
    )
    report = grade_submissions(paths, WARMUP, config, sandbox=sandbox)
    return {r.student: r for r in report.results}, sandbox


def test_the_honest_neighbour_keeps_full_marks(graded):
    by, _ = graded
    assert _points(by["alice"]) == FULL, by["alice"].cells


@pytest.mark.parametrize("student", ["children", "forks"])
def test_without_the_caps_the_memory_and_fork_attacks_score(graded, student):
    by, _ = graded
    assert _points(by[student]) == FULL, by[student].cells


def test_without_the_sized_tmpfs_and_the_seal_the_disk_attack_scores(graded):
    by, sandbox = graded
    if sandbox.kind != "bwrap" or not sandbox.root:
        pytest.skip("the disk budget is enforced by bubblewrap run as root only")
    assert _points(by["disk"]) == FULL, by["disk"].cells
