"""Budgets that are caps (issue 30, item 2): each attack at twice its limit, one batch.

One `grade_submissions` batch of lab 0 (bubblewrap, judge on) under small budgets: memory
``MEMORY`` for all of a sandbox's processes together, ``PROCS`` tasks, ``DISK`` bytes of
tmpfs. Beside the honest neighbour, each hostile submission's first solution goes past one
budget by a factor of two before it computes anything honest:

- ``memfd``: writes 2 x MEMORY into six anonymous memory files (no address space used:
  the old ``RLIMIT_AS`` budget never saw them; each stays under the 1 GiB file limit);
- ``children``: three child processes, each under the per-process limit, together 2 x
  MEMORY;
- ``forks``: 2 x PROCS forked children;
- ``disk``: 2 x DISK into its home (a tmpfs), then the same into its host working folder;
- ``nested``: a user namespace of its own (``unshare -rm``), where it is root and mounts a
  tmpfs of 1 GiB to write 2 x DISK into: no budget counted such a mount, so the sandbox
  refuses the namespace (`seccomp`; `test_grading_seccomp` shows the attack with the filter
  off).

Each scores 0 for the exercise whose code went past the budget (a fork or a file write
fails there; memory that the kernel's OOM killer had to reclaim, or a refused fork, ends
the notebook, so it also scores 0 for what it did not finish), says which budget in its
message, and the neighbour keeps 7/7. Needs a machine where control groups can be made (root here); else
the memory and process tests are skipped and the warning ``grade`` gives is checked.
"""

from __future__ import annotations

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
PROCS = 64  # tasks: a kernel and its threads take ~15
DISK = 64 << 20

HONEST = """    x = np.asarray(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)"""

MEMFD = f"""def stable_softmax(x, axis=-1):
    import os
    chunk = b"m" * (64 << 20)
    files = [os.memfd_create(f"hoard{{k}}") for k in range(6)]  # each under the file limit
    for _ in range({2 * MEMORY} // len(chunk) // 6):
        for fd in files:
            os.write(fd, chunk)
{HONEST}"""

# Each child says when it holds its share (the parent waits for all three, never for a
# fixed time: on a busy machine the pages take longer to get); one the OOM killer took
# says nothing, and the parent's read ends there.
CHILDREN = f"""def stable_softmax(x, axis=-1):
    import subprocess, sys
    hold = ("import sys, time; b = bytearray({2 * MEMORY // 3}); b[::4096] = b'x' * len(b[::4096]); "
            "print('held', flush=True); time.sleep(600)")
    kids = [subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE) for _ in range(3)]
    for kid in kids:
        kid.stdout.readline()  # 'held', or '' once the child was killed
    for kid in kids:
        kid.kill()
{HONEST}"""

FORKS = f"""def stable_softmax(x, axis=-1):
    import os, time
    for _ in range({2 * PROCS}):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
{HONEST}"""

DISK_HOME = f"""def stable_softmax(x, axis=-1):
    with open("hoard.bin", "wb") as fh:
        for _ in range({2 * DISK} // (1 << 20)):
            fh.write(b"d" * (1 << 20))
{HONEST}"""

DISK_HOST = f"""def logsumexp(x, axis=-1):
    import os
    with open(os.path.join(os.path.dirname(os.getcwd()), "hoard.bin"), "wb") as fh:
        for _ in range({2 * DISK} // (1 << 20)):
            fh.write(b"d" * (1 << 20))
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return np.squeeze(out, axis=axis)"""

NESTED = f"""def stable_softmax(x, axis=-1):
    import subprocess
    hoard = "mount -t tmpfs -o size=1g none /tmp && head -c {2 * DISK} /dev/zero > /tmp/hoard"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", hoard], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr.strip())
{HONEST}"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("budgets")
    cases = {
        "alice": _student_copy(),
        "memfd": _student_copy(softmax_solution=MEMFD),
        "children": _student_copy(softmax_solution=CHILDREN),
        "forks": _student_copy(softmax_solution=FORKS),
        "disk": _student_copy(softmax_solution=DISK_HOME, lse_solution=DISK_HOST),
        "nested": _student_copy(softmax_solution=NESTED),
    }
    paths = _write_cases(tmp, cases)
    config = ExecutionConfig(
        cell_timeout=ATTACK_CELL_TIMEOUT,
        memory_limit=MEMORY,
        max_procs=PROCS,
        disk_limit=DISK,
        jobs=2,  # two sandboxes side by side, as `grade --jobs 2`: each keeps its own caps
    )
    sandbox = make_sandbox("auto")
    report = grade_submissions(paths, WARMUP, config, sandbox=sandbox)
    by = {r.student: r for r in report.results}
    return report, by, sandbox


def _message(result, exercise: str) -> str:
    return result.exercises()[exercise][2]


needs_cgroups = pytest.mark.skipif(
    CgroupCaps.probe().kind == "none", reason="no control groups can be made on this machine"
)


def test_the_honest_neighbour_keeps_full_marks(graded):
    _, by, _ = graded
    assert _points(by["alice"]) == FULL, by["alice"].cells


@needs_cgroups
@pytest.mark.parametrize("student", ["memfd", "children"])
def test_memory_of_all_processes_together_is_capped(graded, student):
    _, by, _ = graded
    assert _points(by[student]) == dict.fromkeys(FULL, 0.0), by[student].cells
    message = _message(by[student], "stable_softmax")
    assert "budget of 1536 MiB of memory for all its processes" in message, message
    assert "not run" in _message(by[student], "log_softmax")


@needs_cgroups
def test_process_count_is_capped(graded):
    _, by, _ = graded
    assert _points(by["forks"]) == dict.fromkeys(FULL, 0.0), by["forks"].cells
    assert f"{PROCS} processes and threads" in _message(by["forks"], "stable_softmax")


def test_disk_is_capped_in_the_home_and_the_host_folder(graded):
    report, by, sandbox = graded
    if sandbox.kind != "bwrap" or not sandbox.root:
        assert any("disk budget" in line for line in report.unenforced)
        pytest.skip("the disk budget is enforced by bubblewrap run as root only")
    points = _points(by["disk"])
    assert points["stable_softmax"] == 0.0, _message(by["disk"], "stable_softmax")
    assert "No space left on device" in _message(by["disk"], "stable_softmax")
    assert points["logsumexp"] == 0.0, _message(by["disk"], "logsumexp")
    assert "Permission denied" in _message(by["disk"], "logsumexp")
    assert points["log_softmax"] == 3.0  # its own code stayed within the budgets


def test_a_user_namespace_of_its_own_is_refused(graded):
    _, by, sandbox = graded
    if sandbox.kind != "bwrap":
        pytest.skip("the seccomp filter is bubblewrap's (--seccomp)")
    points = _points(by["nested"])
    assert points["stable_softmax"] == 0.0, _message(by["nested"], "stable_softmax")
    assert "Operation not permitted" in _message(by["nested"], "stable_softmax")
    assert points["logsumexp"] == 2.0 and points["log_softmax"] == 3.0  # its honest code


def test_unenforced_budgets_are_said(graded):
    report, _, sandbox = graded
    if CgroupCaps.probe().kind == "none":
        assert any("not enforced" in line for line in report.unenforced)
    else:
        assert not [line for line in report.unenforced if "memory" in line]
    assert report.as_dict()["config"]["budgets_not_enforced"] == list(report.unenforced)
    assert sandbox.kind in ("bwrap", "rlimit")
