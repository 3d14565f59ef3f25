"""The sandbox's launcher (`mlinfra_lab.grading.launch`): limits set, then exec, or nothing.

Each test runs the real launcher command line as `subprocess` would for a sandbox and reads
what the started program sees (its limits, its user), or how a failed step ends it.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from mlinfra_lab.grading.launch import LAUNCH_FAILED, Limits, launcher


def _run(argv: list[str], limits: Limits) -> subprocess.CompletedProcess[str]:
    return subprocess.run(launcher(argv, limits), capture_output=True, text=True, timeout=60)


def test_the_program_starts_under_every_limit_asked_for():
    limits = Limits(fsize=1 << 20, memory=3 << 30, nproc=4096)
    done = _run(["sh", "-c", "ulimit -f; ulimit -v; ulimit -c; cat /proc/self/limits"], limits)
    assert done.returncode == 0, done.stderr
    fsize_blocks, vm_kb, core, *rest = done.stdout.splitlines()
    assert (int(fsize_blocks), int(vm_kb), core) == ((1 << 20) // 512, (3 << 30) // 1024, "0")
    processes = next(line for line in rest if line.startswith("Max processes"))
    assert processes.split()[2:4] == ["4096", "4096"]  # soft and hard: not raised again


def test_a_step_that_fails_stops_before_the_program_runs(tmp_path):
    marker = tmp_path / "ran"
    done = _run(["touch", str(marker)], Limits(fsize=1 << 20, cgroup_procs=("/nonexistent",)))
    assert done.returncode == LAUNCH_FAILED
    assert "joining the control group /nonexistent failed" in done.stderr
    assert not marker.exists()


def test_a_missing_program_is_named():
    done = _run(["/no/such/program"], Limits(fsize=1 << 20))
    assert done.returncode == LAUNCH_FAILED
    assert "starting /no/such/program failed" in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
def test_as_root_the_program_runs_as_the_throwaway_user_with_no_groups():
    done = _run(["id"], Limits(fsize=1 << 20, uid=123_457))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["uid=123457", "gid=123457", "groups=123457"]


def test_a_launcher_needs_a_program():
    with pytest.raises(ValueError, match="needs a command"):
        launcher([], Limits(fsize=1))
