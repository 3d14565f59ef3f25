"""The memory budget where no control group can be made (issue 30): the grader's watch.

One `grade_submissions` batch of lab 0 (the sandbox ``auto`` picks, judge on) with control
groups switched off in the sandbox (``sandbox.caps``: what a host without cgroup
delegation gives), so the memory budget ``MEMORY`` is held only by the grading process's
`memory_watch.MemoryWatch` (and each kernel's address-space limit, which none of these
attacks meets). Beside the honest neighbour, each hostile first solution holds twice the
budget before it computes anything honest:

- ``children``: three child processes, each touching 0.8 x MEMORY (each under the
  per-process address-space limit);
- ``memfd``: 2 x MEMORY written into six anonymous memory files (no address space, never
  mapped: no process's resident memory shows them);
- ``mapped``: the same files, each also mapped for one page (its resident memory shows 4
  KiB of each file);
- ``tmpfs`` (bubblewrap only): 2 x MEMORY of files in its home, a tmpfs large enough for
  them (``DISK``), each closed once written (no process holds them).

Each scores 0 for every exercise (the sandbox is killed in the first solution cell, so no
grader ran), its message names the budget and what the watch measured, and the neighbour
keeps 7/7. `test_grading_attack_reverted` runs the ``children`` attack with the watch
switched off and shows that it then scores.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_grading_pipeline import ATTACK_CELL_TIMEOUT, _student_copy, _write_cases
from test_grading_pipeline import _result_points as _points

from mlinfra_lab.grading import ExecutionConfig, grade_submissions
from mlinfra_lab.grading.cgroups import CgroupCaps
from mlinfra_lab.grading.sandbox import make_sandbox

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
FULL = {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}
MEMORY = 1536 << 20  # a lab-0 kernel holds ~100 MB; its address space is ~0.8 GB
DISK = 4 << 30  # tmpfs sizes: larger than what the tmpfs attack writes (2 x MEMORY)
NO_CGROUPS = "switched off by the test: a host without cgroup delegation"

HONEST = """    x = np.asarray(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)"""

CHILDREN = f"""def stable_softmax(x, axis=-1):
    import subprocess, sys
    hold = ("import sys, time; b = bytearray({MEMORY * 8 // 10}); b[::4096] = b'x' * len(b[::4096]); "
            "print('held', flush=True); time.sleep(600)")
    kids = [subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE) for _ in range(3)]
    for kid in kids:
        kid.stdout.readline()  # each holds its share now
    for kid in kids:
        kid.kill()
{HONEST}"""

MEMFD = f"""def stable_softmax(x, axis=-1):
    import mmap, os
    chunk = b"m" * (16 << 20)
    files = [os.memfd_create(f"hoard{{k}}") for k in range(6)]  # each under the file limit
    maps = []
    for _ in range({2 * MEMORY} // len(chunk) // 6):
        for fd in files:
            os.write(fd, chunk)
            if MAP and len(maps) < len(files):
                maps.append(mmap.mmap(fd, 4096))
{HONEST}"""

TMPFS = f"""def stable_softmax(x, axis=-1):
    chunk = b"t" * (16 << 20)
    for k in range(6):
        with open(f"hoard{{k}}", "wb") as fh:
            for _ in range({2 * MEMORY} // len(chunk) // 6):
                fh.write(chunk)
{HONEST}"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memory-watch")
    sandbox = make_sandbox("auto")
    sandbox.caps = CgroupCaps(missing=NO_CGROUPS)
    cases = {
        "alice": _student_copy(),
        "children": _student_copy(softmax_solution=CHILDREN),
        "memfd": _student_copy(softmax_solution="MAP = False\n" + MEMFD),
        "mapped": _student_copy(softmax_solution="MAP = True\n" + MEMFD),
    }
    if sandbox.kind == "bwrap":
        cases["tmpfs"] = _student_copy(softmax_solution=TMPFS)
    paths = _write_cases(tmp, cases)
    config = ExecutionConfig(
        cell_timeout=ATTACK_CELL_TIMEOUT, memory_limit=MEMORY, disk_limit=DISK, jobs=2
    )
    report = grade_submissions(paths, WARMUP, config, sandbox=sandbox)
    return report, {r.student: r for r in report.results}, sandbox


def _message(result, exercise: str) -> str:
    return result.exercises()[exercise][2]


def test_the_honest_neighbour_keeps_full_marks(graded):
    _, by, _ = graded
    assert _points(by["alice"]) == FULL, by["alice"].cells


@pytest.mark.parametrize("student", ["children", "memfd", "mapped", "tmpfs"])
def test_memory_of_all_processes_together_is_held_by_the_watch(graded, student):
    _, by, sandbox = graded
    if student not in by:
        pytest.skip(f"the {student} attack needs bubblewrap's tmpfs (sandbox: {sandbox.kind})")
    assert _points(by[student]) == dict.fromkeys(FULL, 0.0), by[student].cells
    message = _message(by[student], "stable_softmax")
    assert "memory budget of 1536 MiB exceeded by the notebook's processes together" in message
    assert "not run" in _message(by[student], "log_softmax")


def test_what_the_watch_measured_is_in_the_message(graded):
    _, by, _ = graded
    assert "processes held" in _message(by["children"], "stable_softmax")
    memfd = _message(by["memfd"], "stable_softmax")
    assert "memory files 0 bytes" not in memfd, memfd  # the files, not resident memory, tripped it


def test_grade_does_not_call_the_watched_memory_budget_unenforced(graded):
    report, _, _ = graded
    assert not [line for line in report.unenforced if "memory" in line], report.unenforced
    # the process count: held by RLIMIT_NPROC on a throwaway user as root, else said so
    listed = any(NO_CGROUPS in line and "process-count" in line for line in report.unenforced)
    assert listed == (os.geteuid() != 0), report.unenforced
