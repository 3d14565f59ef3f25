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
from packaging.markers import Marker
from packaging.requirements import Requirement

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


# Marker environments of the platforms the lock serves, and of one it does not promise.
PLATFORMS = {
    "Linux x86_64": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                     "platform_machine": "x86_64"},
    "Linux aarch64": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                      "platform_machine": "aarch64"},
    "macOS arm64": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
                    "platform_machine": "arm64"},
    "macOS x86_64": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
                     "platform_machine": "x86_64"},
}  # fmt: skip


def _pins_on(pins, environment: dict[str, str]) -> dict[str, str]:
    """{name: version} of the pins whose marker holds in `environment`; a name at most once."""
    chosen: dict[str, str] = {}
    for pin in pins:
        if pin.marker is None or Marker(pin.marker).evaluate(environment):
            assert pin.name not in chosen, f"{pin.name} pinned twice for {environment}"
            chosen[pin.name] = pin.version
    return chosen


def test_the_committed_lock_is_hashed_and_serves_linux_and_macos() -> None:
    pins = read_pins(ROOT / "requirements.lock")
    unhashed = [p.name for p in pins if not p.hashes]
    assert unhashed == ["torch"], f"only torch (installed by its own step) lacks hashes: {unhashed}"
    assert all(h.startswith("sha256:") for p in pins for h in p.hashes)
    assert not [p for p in pins if "+" in p.version], "requirements.lock pins a build"
    wanted = {
        name: marker for name, marker in requirement_markers(ROOT / "requirements.txt").items()
    }
    asked = {
        Requirement(line.split(" #")[0]).name.lower()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for python in ("3.11.7", "3.12.3"):
        for system, environment in PLATFORMS.items():
            env = {**environment, "python_version": python[:4], "python_full_version": python}
            here = _pins_on(pins, env)
            assert here["torch"] == _pins_on(pins, PLATFORMS["Linux x86_64"])["torch"]
            missing = sorted(
                name
                for name in asked
                if name not in here and (name not in wanted or Marker(wanted[name]).evaluate(env))
            )
            assert not missing, f"requirements.lock has no pin of {missing} for {system}"
            assert ("triton" in here) is system.startswith("Linux"), f"triton on {system}"
            assert "appnope" in here or system.startswith("Linux"), "macOS's ipykernel needs it"


def _lock_for_torch(lock: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:  # a distribution there shadows the installed one of that name
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "lock_for_torch.py"), str(lock)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_lock_for_torch_drops_only_torch_for_the_cpu_build(tmp_path: Path) -> None:
    """The CPU build pins nothing: the lock goes through less torch's unhashed line, so
    every entry pip reads carries hashes (--require-hashes refuses a line without)."""
    if [r for r in importlib.metadata.requires("torch") or [] if re.match(r"[\w.-]+\s*==", r)]:
        pytest.skip("this torch pins its own dependencies (a CUDA build): see the next test")
    out = _lock_for_torch(ROOT / "requirements.lock")
    assert out.returncode == 0 and not out.stderr, out.stderr
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    assert out.stdout.splitlines() == [line for line in lines if not line.startswith("torch==")]
    installed = tmp_path / "requirements.lock"
    installed.write_text(out.stdout)
    assert [p.name for p in read_pins(installed) if not p.hashes] == []


def _fake_torch(tmp_path: Path, version: str = "2.13.0") -> Path:
    """A torch distribution whose metadata pins triton, as PyPI's CUDA build does."""
    info = tmp_path / "site" / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
        f"Requires-Dist: triton==3.7.1; {HERE}\n"
        f"Requires-Dist: nvidia-nccl-cu13==2.29.7; {ELSEWHERE}\n"
        'Requires-Dist: opt-einsum==3.3; extra == "opt-einsum"\n'
        "Requires-Dist: filelock\n"
    )
    return tmp_path / "site"


HASH_A, HASH_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def test_lock_for_torch_lets_a_cuda_builds_own_pins_win(tmp_path: Path) -> None:
    """A torch whose metadata pins triton makes the lock's triton entry go, hashes and all:
    they are the digests of 3.9.0's files, and 3.7.1 (installed with torch) has none of them."""
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        "# header\ntorch==2.13.0\n"
        f"filelock==3.0 \\\n    --hash={HASH_A}\n    # via torch (its CPU build)\n"
        f"nvidia-nccl-cu13==1.0 --hash={HASH_A}\nopt-einsum==1.0 --hash={HASH_B}\n"
        f"triton==3.9.0 ; {HERE} \\\n    --hash={HASH_A} \\\n    --hash={HASH_B}\n"
        "    # via -r requirements.txt\n"
        f"zipp==1.0 \\\n    --hash={HASH_B}\n"
    )
    out = _lock_for_torch(lock, pythonpath=_fake_torch(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "# header",
        "filelock==3.0 \\",
        f"    --hash={HASH_A}",
        "    # via torch (its CPU build)",
        f"nvidia-nccl-cu13==1.0 --hash={HASH_A}",  # torch's pin applies elsewhere only
        f"opt-einsum==1.0 --hash={HASH_B}",  # an extra's pin: not installed with torch
        "zipp==1.0 \\",
        f"    --hash={HASH_B}",
    ]
    assert "triton==3.9.0" in out.stderr and "own pin triton==3.7.1" in out.stderr
    rewritten = tmp_path / "out.lock"
    rewritten.write_text(out.stdout)
    assert [p.name for p in read_pins(rewritten)] == [
        "filelock",
        "nvidia-nccl-cu13",
        "opt-einsum",
        "zipp",
    ]


def test_lock_for_torch_refuses_a_torch_the_lock_does_not_pin(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"torch==2.12.0\nfilelock==3.0 --hash={HASH_A}\n")
    out = _lock_for_torch(lock, pythonpath=_fake_torch(tmp_path))
    assert out.returncode == 1 and out.stdout == ""
    assert "pins torch==2.12.0, but torch 2.13.0 is installed" in out.stderr
