"""The sandbox's seccomp filter: no user namespace of its own, everything else as before.

An attack (issue 30): the throwaway user makes a user namespace (``unshare -rm``), is root
there and mounts a tmpfs that no budget counts. Run in a real bubblewrap sandbox with the
filter (what `BwrapSandbox.popen` starts) the namespace is refused; run with the filter
left out of the same command line, the attack goes through, so the first test can fail.
Threads and child processes still start under the filter (``clone3`` answers ``ENOSYS``
and the C library falls back to ``clone``).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys

import pytest

from mlinfra_lab.grading.sandbox import BwrapSandbox, SandboxUnavailable
from mlinfra_lab.grading.seccomp import no_user_namespaces

pytestmark = pytest.mark.grading

ATTACK = "unshare -rm sh -c 'mount -t tmpfs -o size=1g none /tmp && echo MOUNTED'"
ORDINARY = (
    "import subprocess, threading; t = threading.Thread(target=print, args=('thread',)); "
    "t.start(); t.join(); print('child', subprocess.run(['true']).returncode)"
)


@pytest.fixture(scope="module")
def sandbox():
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is not installed")
    try:
        return BwrapSandbox()
    except SandboxUnavailable as err:
        pytest.skip(str(err))


def _run(sandbox: BwrapSandbox, tmp_path, script: str, *, filtered: bool) -> str:
    workdir = tmp_path / "w"
    sandbox.prepare(workdir, 0)
    env = {"PATH": "/usr/bin:/bin"}
    if filtered:
        with open(tmp_path / "log", "wb") as log:
            sandbox.popen(["sh", "-c", script], workdir, env, log, None, 0).wait()
        return (tmp_path / "log").read_text()
    cmd = sandbox.command(["sh", "-c", script], workdir, env, 0)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


def test_a_user_namespace_is_refused_in_the_sandbox(sandbox, tmp_path):
    out = _run(sandbox, tmp_path, ATTACK, filtered=True)
    assert "MOUNTED" not in out and "Operation not permitted" in out, out


def test_without_the_filter_the_attack_mounts(sandbox, tmp_path):
    out = _run(sandbox, tmp_path, ATTACK, filtered=False)
    if "MOUNTED" not in out:
        pytest.skip(f"this host refuses unprivileged user namespaces anyway: {out.strip()}")
    assert "MOUNTED" in out


def test_threads_and_children_start_under_the_filter(sandbox, tmp_path):
    out = _run(sandbox, tmp_path, f'{sys.executable} -c "{ORDINARY}"', filtered=True)
    assert "thread" in out and "child 0" in out, out


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_program_is_well_formed(machine):
    program = no_user_namespaces(machine)
    assert program is not None and len(program) % 8 == 0
    records = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    for at, (op, jt, jf, _) in enumerate(records):
        if op & 0x07 == 0x05:  # a jump: both targets inside the program
            assert at + 1 + max(jt, jf) < len(records)
    assert records[-1][0] == 0x06  # it ends with a return


def test_a_cpu_without_numbers_gets_no_filter():
    assert no_user_namespaces("riscv64") is None
