"""The hashed lock: read as pip reads it, refused by pip when a file changes, made by uv.

`read_pins` parses what ``uv pip compile --universal --generate-hashes`` writes (entries over
``\\``-joined lines, ``--hash`` options, markers, ``# via`` notes, one name under two
disjoint markers). A tampered wheel is installed by a plain ``pip install`` and refused by
``pip install --require-hashes`` of a lock line (a wheel built in tmp_path, pip with
``--no-index``: nothing is downloaded). `compile_lockfile` runs the real uv offline on wheels
in tmp_path, where uv is installed (requirements.txt installs it for `make lock`).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlinfra_lab.ci import LockCompileError, LockfileError, check_lockfile, compile_lockfile
from mlinfra_lab.ci.lock_compile import TorchBuild, find_uv, resolver_input
from mlinfra_lab.ci.lockfile import read_pins

pytestmark = pytest.mark.ci

ROOT = Path(__file__).resolve().parents[1]
HERE = f"sys_platform == '{sys.platform}'"
A, B = "a" * 64, "b" * 64


def test_read_pins_reads_a_hashed_universal_lock(tmp_path: Path) -> None:
    numpy = importlib.metadata.version("numpy")
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        "# requirements.lock: a header\n"
        "torch==2.13.0\n"
        "numpy==0.0.1 ; python_full_version < '3.0' \\\n    --hash=sha256:" + A + "\n"
        f"numpy=={numpy} ; python_full_version >= '3.0' \\\n"
        f"    --hash=sha256:{A} \\\n    --hash=sha256:{B}\n"
        "    # via\n    #   -r requirements.txt\n    #   torch (its CPU build)\n"
        f"triton==3.9.0 ; sys_platform == 'plan9' --hash=sha256:{A}  # one line\n"
        "\n# The following packages were excluded from the output:\n# setuptools\n"
    )
    pins = read_pins(lock)
    assert [(p.name, p.version, p.marker, p.hashes) for p in pins] == [
        ("torch", "2.13.0", None, ()),
        ("numpy", "0.0.1", 'python_full_version < "3.0"', (f"sha256:{A}",)),
        ("numpy", numpy, 'python_full_version >= "3.0"', (f"sha256:{A}", f"sha256:{B}")),
        ("triton", "3.9.0", 'sys_platform == "plan9"', (f"sha256:{A}",)),
    ]
    # of the two numpy pins the one for this Python is compared, the other is not for here
    lock.write_text(lock.read_text().replace("torch==2.13.0\n", ""))
    report = check_lockfile(lock)
    assert report.ok and report.checked == 1, str(report)
    assert [p.version for p in report.not_here] == ["0.0.1", "3.9.0"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (f"numpy==2.0 \\\n    --hash=sha256:{A[:-1]}\n", r"lock:1: bad hash '--hash=sha256:a+'"),
        (f"numpy==2.0 --hash=md5:{A[:32]}\n", r"lock:1: bad hash"),
        ("numpy==2.0 \\\n    --index-url https://x\n", r"lock:1: unexpected '--index-url"),
        ("zipp==1.0\nnumpy==2.0 ; os_name == 'a'\nnumpy==2.1\n", r"lock:3: numpy is pinned twice"),
        (f"numpy==2.0 ; {HERE}\nnumpy==2.1 ; {HERE}\n", r"lock:2: numpy is pinned twice"),
    ],
)
def test_a_malformed_hashed_entry_names_file_and_line(
    tmp_path: Path, text: str, error: str
) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(text)
    with pytest.raises(LockfileError, match=error):
        read_pins(lock)


def test_two_pins_of_one_name_that_both_apply_here_are_refused(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"numpy==2.0 ; {HERE}\nnumpy==2.1 ; python_version >= '3'\n")
    with pytest.raises(LockfileError, match="numpy pinned more than once for this machine"):
        check_lockfile(lock)


# --- pip refuses a tampered file --------------------------------------------------------


def _wheel(folder: Path, name: str, version: str, body: str) -> Path:
    """A pure-Python wheel of one module, `name`.py holding `body`."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": body,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _pip_install(args: list[str], target: Path) -> subprocess.CompletedProcess:
    """pip from a local folder only: no index, no configuration, no cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--no-deps",
         "--target", str(target), *args],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip


def test_a_tampered_wheel_installs_without_hashes_and_is_refused_with_them(
    tmp_path: Path,
) -> None:
    """The attack: the index serves another file under the locked name and version."""
    index = tmp_path / "index"
    genuine = _wheel(index, "tinylock", "1.0", "GENUINE = True\n")
    digest = hashlib.sha256(genuine.read_bytes()).hexdigest()
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"tinylock==1.0 \\\n    --hash=sha256:{digest}\n")
    assert read_pins(lock)[0].hashes == (f"sha256:{digest}",)
    locked = ["--require-hashes", "--find-links", str(index), "-r", str(lock)]

    ok = _pip_install(locked, tmp_path / "genuine")
    assert ok.returncode == 0, ok.stderr
    assert "GENUINE" in (tmp_path / "genuine" / "tinylock.py").read_text()

    genuine.unlink()
    _wheel(index, "tinylock", "1.0", "GENUINE = False  # tampered\n")
    plain = _pip_install(["--find-links", str(index), "tinylock==1.0"], tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr  # without hashes the attack succeeds
    assert "tampered" in (tmp_path / "plain" / "tinylock.py").read_text()

    refused = _pip_install(locked, tmp_path / "refused")
    assert refused.returncode != 0
    assert "DO NOT MATCH THE HASHES" in refused.stderr and digest in refused.stderr
    assert not (tmp_path / "refused" / "tinylock.py").exists()


# --- the resolver --------------------------------------------------------------------------

TORCH = TorchBuild("2.13.0", ("tinydep>=1.0",))


def test_resolver_input_puts_the_cpu_builds_requirements_in_torchs_place() -> None:
    main, torch = resolver_input("# deps\ntorch>=2.5  # the range\nnumpy>=1.24\n", TORCH)
    assert main.splitlines() == [
        "# deps",
        "# torch>=2.5  # the range  (resolved as its CPU build: torch-cpu.txt)",
        "numpy>=1.24",
    ]
    assert torch == "tinydep>=1.0\n"


def test_a_cuda_build_of_torch_cannot_be_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "torch-2.13.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n"
        "Requires-Dist: filelock\nRequires-Dist: triton==3.7.1; platform_system == 'Linux'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(LockCompileError, match=r"pins triton==3\.7\.1.* a CUDA build"):
        TorchBuild.installed()


def _uv() -> str:
    try:
        return find_uv()
    except LockCompileError as err:
        pytest.skip(str(err))


def test_compile_lockfile_resolves_hashes_keeps_locked_versions_and_drops_torch(
    tmp_path: Path,
) -> None:
    """uv, offline, on wheels in tmp_path: what `make lock` does with pypi.org."""
    uv = _uv()
    wheels = tmp_path / "wheels"
    files = {
        name: _wheel(wheels, *name.split("-"), "X = 1\n")
        for name in ("tinya-1.0", "tinyb-1.0", "tinyb-2.0", "tinydep-1.0")
    }
    (tmp_path / "requirements.txt").write_text(
        "torch>=2.5\ntinya>=1.0; platform_system == 'Linux'\ntinyb>=1.0\n"
    )
    lock = tmp_path / "requirements.lock"
    lock.write_text("torch==2.13.0\ntinyb==1.0\n")  # the previous lock: tinyb stays at 1.0
    offline = ["--offline", "--no-index", "--find-links", str(wheels)]
    count = compile_lockfile(lock, torch=TORCH, uv=uv, uv_args=offline)
    pins = {(p.name, p.version): p for p in read_pins(lock)}
    assert count == 4 and set(pins) == {
        ("torch", "2.13.0"),
        ("tinya", "1.0"),
        ("tinyb", "1.0"),
        ("tinydep", "1.0"),
    }
    for name, wheel in files.items():
        if name != "tinyb-2.0":
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            assert pins[tuple(name.split("-"))].hashes == (f"sha256:{digest}",), name
    assert pins[("torch", "2.13.0")].hashes == ()
    assert pins[("tinya", "1.0")].marker in {
        'platform_system == "Linux"',
        'sys_platform == "linux"',
    }
    assert "# via torch (its CPU build)" in lock.read_text()

    count = compile_lockfile(lock, torch=TORCH, uv=uv, uv_args=[*offline, "--upgrade"])
    assert ("tinyb", "2.0") in {(p.name, p.version) for p in read_pins(lock)}

    (tmp_path / "requirements.txt").write_text("torch>=2.5\ntinyb>=3.0\n")
    with pytest.raises(
        LockCompileError, match=r"(?s)uv pip compile failed \(exit 1\):.*tinyb>=3\.0"
    ):
        compile_lockfile(lock, torch=TORCH, uv=uv, uv_args=offline)
    # the lock is left as it was: the previous resolution
    assert ("tinyb", "2.0") in {(p.name, p.version) for p in read_pins(lock)}
