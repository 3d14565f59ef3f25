"""One lock for every platform (issue 31): markers, builds, and the committed lock.

`mlinfra_lab.ci.lockfile` writes a line's environment marker from requirements.txt (Triton
has no macOS wheel), drops local version labels (torch's ``+cpu``: the index picks the
build) and compares versions as PEP 440's ``==`` does. `.ci/lock_for_torch.py` lets a
torch build's own pins win over the lock (PyPI's CUDA torch pins its triton). These tests
run the real functions on this environment and on lock files written in tmp_path.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlinfra_lab.ci import LockfileError, check_lockfile, parse_lockfile
from mlinfra_lab.ci.lockfile import read_pins, requirement_markers, write_lockfile

pytestmark = pytest.mark.ci

ROOT = Path(__file__).resolve().parents[1]
HERE = f'platform_system == "{platform.system()}"'
ELSEWHERE = 'platform_system == "Plan9"'


def test_a_pin_for_another_platform_is_not_here_and_not_missing(tmp_path: Path) -> None:
    numpy = importlib.metadata.version("numpy")
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        f"numpy=={numpy} ; {HERE}\n"
        f"surely-not-installed-pkg==1.0 ; {ELSEWHERE}  # a Plan 9 only wheel\n"
    )
    report = check_lockfile(lock)
    assert report.ok and report.checked == 1, str(report)
    assert [str(p) for p in report.not_here] == [f"surely-not-installed-pkg==1.0 ; {ELSEWHERE}"]
    assert "not for " in str(report) and "surely-not-installed-pkg" in str(report)
    assert parse_lockfile(lock) == {"numpy": numpy}

    lock.write_text(f"surely-not-installed-pkg==1.0 ; {HERE}\n")
    report = check_lockfile(lock)
    assert not report.ok
    assert [str(m) for m in report.mismatches] == [
        "surely-not-installed-pkg==1.0 is locked but not installed"
    ]


def test_a_pin_without_a_local_label_matches_every_build_of_that_version(tmp_path: Path) -> None:
    torch = importlib.metadata.version("torch")  # 2.13.0+cpu here: a local label
    public = torch.split("+")[0]
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"torch=={public}\n")
    assert check_lockfile(lock).ok
    lock.write_text(f"torch=={public}+cu999\n")  # a label pins the build: it must be that one
    assert check_lockfile(lock).ok is (torch == f"{public}+cu999")
    lock.write_text("torch==0.0.1\n")
    assert [str(m) for m in check_lockfile(lock).mismatches] == [
        f"torch: locked 0.0.1, installed {torch}"
    ]


def test_write_takes_markers_from_requirements_and_drops_local_labels(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(
        "# a comment\nnumpy>=1.0; python_version >= '3'\ntqdm>=4  # no marker\n"
    )
    lock = tmp_path / "requirements.lock"
    count = write_lockfile(lock)  # requirements.txt beside the lock
    lines = [line for line in lock.read_text().splitlines() if not line.startswith("#")]
    assert len(lines) == count > 10
    numpy = importlib.metadata.version("numpy")
    assert f'numpy=={numpy} ; python_version >= "3"' in lines
    assert f"tqdm=={importlib.metadata.version('tqdm')}" in lines
    assert not [line for line in lines if "+" in line.split(";")[0]], "a local label was locked"
    assert check_lockfile(lock).ok, str(check_lockfile(lock))


def test_a_bad_marker_names_file_and_line(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("numpy==2.0.0 ; platform_system == 'x' and\n")
    with pytest.raises(LockfileError, match=r"requirements\.lock:1: bad environment marker"):
        read_pins(lock)


def test_the_committed_lock_carries_requirements_markers_and_no_build_labels() -> None:
    pins = {p.name: p for p in read_pins(ROOT / "requirements.lock")}
    markers = requirement_markers(ROOT / "requirements.txt")
    assert "triton" in markers, "requirements.txt asks for triton on Linux only"
    for name, marker in markers.items():
        if name in pins:
            assert pins[name].marker == marker, f"requirements.lock's {name}: run `make lock`"
    assert not [p for p in pins.values() if "+" in p.version], "requirements.lock pins a build"
    assert "torch" in pins and pins["torch"].marker is None


def _lock_for_torch(lock: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:  # a distribution there shadows the installed one of that name
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "lock_for_torch.py"), str(lock)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )


def test_lock_for_torch_passes_the_lock_through_for_the_cpu_build() -> None:
    if [r for r in importlib.metadata.requires("torch") or [] if re.match(r"[\w.-]+\s*==", r)]:
        pytest.skip("this torch pins its own dependencies (a CUDA build): see the next test")
    out = _lock_for_torch(ROOT / "requirements.lock")
    assert out.stdout == (ROOT / "requirements.lock").read_text() and not out.stderr


def test_lock_for_torch_lets_a_cuda_builds_own_pins_win(tmp_path: Path) -> None:
    """A torch whose metadata pins triton (as PyPI's CUDA build does) makes the lock's go."""
    info = tmp_path / "site" / "torch-2.13.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n"
        f"Requires-Dist: triton==3.7.1; {HERE}\n"
        f"Requires-Dist: nvidia-nccl-cu13==2.29.7; {ELSEWHERE}\n"
        'Requires-Dist: opt-einsum==3.3; extra == "opt-einsum"\n'
        "Requires-Dist: filelock\n"
    )
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        "# header\ntorch==2.13.0\nfilelock==3.0\nnvidia-nccl-cu13==1.0\nopt-einsum==1.0\n"
        f"triton==3.9.0 ; {HERE}\n"
    )
    out = _lock_for_torch(lock, pythonpath=tmp_path / "site")
    assert out.stdout.splitlines() == [
        "# header",
        "torch==2.13.0",
        "filelock==3.0",
        "nvidia-nccl-cu13==1.0",  # torch's pin applies on another platform only
        "opt-einsum==1.0",  # an extra's pin: not installed with torch
    ]
    assert "triton==3.9.0" in out.stderr and "own pin triton==3.7.1" in out.stderr
