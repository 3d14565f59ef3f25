"""The memory watch counts a sandbox's tmpfs files only once the sandbox is built.

While bubblewrap builds a sandbox, its process already has a mount table of its own, a
copy of the host's: ``/proc/PID/root/tmp`` is then the host's disk, and reading its used
bytes as the sandbox's memory killed a kernel at its start (CI: a ``children`` notebook
of `test_grading_attack_memory_watch` reported "the grading kernel exited" with an empty
log). A process in a fresh mount namespace that has not mounted anything stands for that
moment here; a bubblewrap sandbox with its tmpfs mounts shows the files still count.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from mlinfra_lab.grading.memory_watch import sandbox_usage

HELD = 64 << 20  # bytes the sandbox writes into its /tmp


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the test's process did not start: {proc.returncode}")
        time.sleep(0.02)


def _start(argv: list[str], ready: Path) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(ready, proc)
    except AssertionError:
        proc.kill()
        err = proc.communicate()[1].decode(errors="replace").strip()
        pytest.skip(f"{argv[0]} cannot make a mount namespace here: {err}")
    return proc


def test_a_sandbox_not_yet_built_counts_no_tmpfs(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is not installed")
    home = tmp_path / "home"
    home.mkdir()
    ready = tmp_path / "ready"
    argv = ["unshare", "--mount", "--propagation", "private"]
    argv += ["sh", "-c", f"touch {ready}; sleep 60"]
    proc = _start(argv, ready)
    try:
        usage = sandbox_usage([proc.pid], ["/tmp", "/dev/shm", str(home)])
    finally:
        proc.kill()
        proc.wait()
    assert usage.tmpfs == 0, f"the host's folders were read as the sandbox's: {usage}"


@pytest.mark.parametrize("covered", [False, True], ids=["built", "home-covered"])
def test_the_files_of_a_built_sandbox_count(tmp_path, covered):
    """Built: its tmpfs files count. Home covered (a later bind mount hides the home
    tmpfs, so the path is the host's disk again): the sandbox is not as the grader built
    it, and nothing of the host's is read as its memory."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap is not installed")
    home = tmp_path / "home"
    home.mkdir()
    ready = tmp_path / "ready"
    script = f"head -c {HELD} /dev/zero > /tmp/held; touch {ready}; sleep 60"
    bind = ["--bind", str(tmp_path), str(tmp_path)]
    mounts = ["--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    mounts += [*bind, "--tmpfs", str(home)] if not covered else ["--tmpfs", str(home), *bind]
    argv = [bwrap, "--dev-bind", "/", "/", *mounts, "--unshare-pid", "--die-with-parent"]
    proc = _start([*argv, "sh", "-c", script], ready)
    try:
        kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
        pids = [proc.pid, *map(int, kids.stdout.split())]
        usage = sandbox_usage(pids, ["/tmp", "/dev/shm", str(home)])
    finally:
        proc.kill()
        proc.wait()
    if covered:
        assert usage.tmpfs == 0, usage
    else:
        assert HELD <= usage.tmpfs < 2 * HELD, usage
