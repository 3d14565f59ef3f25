"""Write the hashed lock of the CPU environment with a resolver (``make lock``).

Contract: ``compile_lockfile(lock_path)`` resolves ``requirements.txt`` beside the lock for
every platform at once (``uv pip compile --universal --generate-hashes``), with torch's CPU
build standing in for torch, and writes the result to `lock_path`: every package pinned
with the sha256 of each file pip may install for it, except torch, which is pinned without
a hash (see below). It returns how many entries it wrote; it raises `LockCompileError` when
uv is missing, torch is not a CPU build, or the resolution fails (uv's message included).

Design decisions:
- uv, not pip-tools or ``pip lock``: ``uv pip compile --universal`` writes one
  requirements-format file for every platform, with markers where a platform differs
  (``triton ; sys_platform == 'linux'``, ``appnope ; sys_platform == 'darwin'``), and the
  hashes of every wheel of each version. pip-tools resolves for the machine it runs on
  only, so a Linux lock would miss macOS's packages; ``pip lock`` writes pylock.toml,
  which pip cannot install yet. pip still installs the lock (``pip install
  --require-hashes``): uv is only the maintainer's tool, itself pinned by the lock.
- The previous lock is the resolver's preference (uv reads the output file it replaces),
  so a regeneration moves a version only where the requirements force it; ``--upgrade``
  passed through `uv_args` moves everything.
- torch is excluded from the resolution, and the installed CPU build's own requirements
  (filelock, sympy, ...) take its place: PyPI's metadata for torch is the CUDA build's,
  which would lock the nvidia-* libraries and another triton. torch is installed by its own
  step first (the Makefile's ``TORCH_CPU_PIN``, from PyTorch's CPU index or a local wheel
  folder), so its line carries no hash: its files on PyTorch's index are not PyPI's, and
  pip trusts a package already installed. ``.ci/lock_for_torch.py`` drops the line before
  ``pip install --require-hashes`` reads the file, after checking the installed version.
- The installers (pip, setuptools) are not written (``--no-emit-package``): the venv and
  torch's step install them; ``wheel`` is, because a package needs it at run time.
- ``--python-version`` is the resolution's floor (``LOCK_PYTHON`` in the Makefile): the
  lock serves that Python and every later one. uv's own configuration files are ignored
  (``--no-config``) so a maintainer's uv.toml cannot change the lock.

Caveats: the resolution reads pypi.org (every file's hash), so ``make lock`` needs the
network; pip's configuration (a local wheel folder, another index) does not apply to uv.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from mlinfra_lab.ci.lockfile import LockfileError, read_pins
from mlinfra_lab.errors import MlinfraError

__all__ = ["LockCompileError", "TorchBuild", "compile_lockfile", "find_uv", "resolver_input"]

_TORCH_INPUT = "torch-cpu.txt"  # the resolver's second input file: torch's requirements
_NOT_EMITTED = ("pip", "setuptools")


class LockCompileError(MlinfraError, RuntimeError):
    """The lock could not be resolved; the message says what to install or fix."""


@dataclass(frozen=True)
class TorchBuild:
    """The torch build the lock is for: its public version and its own requirements."""

    version: str  # without a local label: "2.13.0" for 2.13.0+cpu
    requires: tuple[str, ...]  # its Requires-Dist, extras' dropped: the resolver's input

    @classmethod
    def installed(cls) -> TorchBuild:
        """The torch of this environment; it must be a CPU build (one that pins nothing)."""
        try:
            version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            raise LockCompileError(
                "torch is not installed: `make lock` runs in the set-up venv (make setup)"
            ) from None
        requires = []
        for line in importlib.metadata.requires("torch") or []:
            req = Requirement(line)
            if req.marker is not None and "extra" in str(req.marker):
                continue
            if any(spec.operator == "==" for spec in req.specifier):
                raise LockCompileError(
                    f"torch {version} pins {req} itself: a CUDA build. The lock is the CPU "
                    f"environment: run `make lock` where torch's CPU build is installed "
                    f"(`make setup` on a machine without a GPU)"
                )
            requires.append(str(req))
        return cls(version.split("+", 1)[0], tuple(requires))


def resolver_input(requirements: str, torch: TorchBuild) -> tuple[str, str]:
    """(requirements.txt less its torch line, torch's requirements): uv's two input files."""
    kept = []
    for raw in requirements.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            try:
                if Requirement(line).name.lower() == "torch":
                    kept.append(f"# {raw}  (resolved as its CPU build: {_TORCH_INPUT})")
                    continue
            except InvalidRequirement as err:
                raise LockCompileError(f"requirements.txt: cannot parse {line!r}: {err}") from None
        kept.append(raw)
    return "\n".join(kept) + "\n", "\n".join(torch.requires) + "\n"


def find_uv() -> str:
    """The uv beside this Python (the venv's, pinned by the lock), else the one on PATH."""
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        raise LockCompileError(
            "uv is not installed: `make setup` installs it (requirements.txt), or `pip install uv`"
        )
    return found


def _header(torch: TorchBuild, python_version: str) -> list[str]:
    return [
        "# requirements.lock: the CPU environment, resolved for every platform, with hashes.",
        "# Generated by `make lock` (mlinfra_lab.ci.lock_compile: uv pip compile --universal",
        f"# --generate-hashes, Python {python_version} and later); never edit it by hand.",
        "# Installed by `make setup` with pip install --require-hashes; checked by",
        "# `make check-lock`. Lines with a marker apply only where it holds.",
        "#",
        "# torch: no hash. `make setup` installs its CPU build first (TORCH_CPU_PIN, from",
        "# PyTorch's CPU index or a local wheel folder); .ci/lock_for_torch.py drops this line",
        "# after checking the installed version. Its requirements below are the CPU build's.",
        f"torch=={torch.version}",
    ]


def compile_lockfile(
    lock_path: str | Path,
    requirements: str | Path | None = None,
    *,
    torch: TorchBuild | None = None,
    python_version: str = "3.11",
    uv: str | None = None,
    uv_args: Sequence[str] = (),
) -> int:
    """Resolve `requirements` (default: requirements.txt beside the lock) into `lock_path`.

    `torch`: the build to lock for (default: the installed one, which must be a CPU build);
    `uv_args`: more arguments for ``uv pip compile`` (``--upgrade``; a test's
    ``--offline --no-index --find-links DIR``). Returns the number of entries written.
    """
    lock_path = Path(lock_path)
    requirements = Path(requirements or lock_path.parent / "requirements.txt")
    torch = torch or TorchBuild.installed()
    uv = uv or find_uv()
    main_input, torch_input = resolver_input(requirements.read_text(), torch)
    with tempfile.TemporaryDirectory(prefix="mlinfra-lock-") as tmp:
        work = Path(tmp)
        (work / "requirements.txt").write_text(main_input)
        (work / _TORCH_INPUT).write_text(torch_input)
        (work / "excludes.txt").write_text("torch\n")
        out = work / "requirements.lock"
        if lock_path.is_file():  # the previous lock: uv's preferred versions
            shutil.copyfile(lock_path, out)
        command = [
            uv, "pip", "compile", "--quiet", "--no-config", "--universal", "--generate-hashes",
            "--no-header", "--python-version", python_version, "--excludes", "excludes.txt",
            *(arg for name in _NOT_EMITTED for arg in ("--no-emit-package", name)),
            *uv_args, "requirements.txt", _TORCH_INPUT, "--output-file", out.name,
        ]  # fmt: skip
        done = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LockCompileError(
                f"uv pip compile failed (exit {done.returncode}):\n{done.stderr.strip()}"
            )
        body = out.read_text().replace(f"-r {_TORCH_INPUT}", "torch (its CPU build)")
    if re.search(r"^torch==", body, flags=re.MULTILINE):
        raise LockCompileError("the resolver locked torch itself: PyPI's build, not the CPU one")
    text = "\n".join(_header(torch, python_version)) + "\n" + body
    lock_path.write_text(text)
    try:
        return len(read_pins(lock_path))
    except LockfileError as err:  # uv wrote what the checker cannot read: say so now
        raise LockCompileError(f"the resolved lock does not parse: {err}") from None
