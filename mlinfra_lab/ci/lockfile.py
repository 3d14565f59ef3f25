"""Environment reproducibility: compare a pinned lock file with what is installed.

Contract: ``check_lockfile(lock_path)`` parses ``name==version`` lines, compares each with
``importlib.metadata`` and returns a `LockReport` listing every package that is missing or
at another version (``report.ok`` is False then); ``write_lockfile(path)`` writes such a
file from the current environment (``make lock``).

Design decisions:
- The lock is the environment CI ran on, written by a command, never by hand, so it can
  always be regenerated; ``requirements.txt`` keeps the ranges a human chose.
- Names are compared in their PEP 503 normal form (``Jinja2`` == ``jinja2``,
  ``typing_extensions`` == ``typing-extensions``); versions are compared as strings,
  exactly (a lock pins, it does not range).
- The installers (pip, setuptools, wheel) and the project itself are not locked.
- Packages installed but absent from the lock are reported as ``extra``, not as failures:
  CI fails on drift of what the project pinned, and ``make lock`` adds the newcomers.
- A line that does not parse raises `LockfileError` naming the file and the line: a
  half-understood lock is worse than none.

Caveat: the project's lock describes the CPU environment of its CI machine. A GPU machine
has another torch build (``2.x.y+cu12x``) and CUDA wheels; lock it separately.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "LockReport",
    "LockfileError",
    "Mismatch",
    "check_lockfile",
    "installed_packages",
    "parse_lockfile",
    "write_lockfile",
]

_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)\s*(#.*)?$")
# Not locked: the project itself (installed editable: it is what is under test) and the
# installers (pip upgrades itself in `make setup`; pip-tools calls these "unsafe" too).
_SKIP = {"mlinfra-lab", "pip", "setuptools", "wheel"}


class LockfileError(MlinfraError, ValueError):
    """The lock file is missing or has a line that does not parse; names file and line."""


@dataclass(frozen=True)
class Mismatch:
    """One package whose installed version differs from the lock (None: not installed)."""

    name: str
    locked: str | None
    installed: str | None

    def __str__(self) -> str:
        if self.installed is None:
            return f"{self.name}=={self.locked} is locked but not installed"
        if self.locked is None:
            return f"{self.name} {self.installed} is installed but not in the lock"
        return f"{self.name}: locked {self.locked}, installed {self.installed}"


@dataclass(frozen=True)
class LockReport:
    """The result of comparing a lock file with the environment."""

    lock_path: Path
    checked: int  # locked packages compared
    mismatches: tuple[Mismatch, ...]  # missing or other version: these fail CI
    extra: tuple[Mismatch, ...]  # installed but not locked: reported only

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __str__(self) -> str:
        head = (
            f"{self.lock_path}: {self.checked} packages match the environment"
            if self.ok
            else f"{self.lock_path}: {len(self.mismatches)} of {self.checked} locked packages differ"
        )
        lines = [head, *(f"  {m}" for m in self.mismatches)]
        if self.extra:
            lines.append(
                f"  ({len(self.extra)} installed packages not in the lock; run `make lock`)"
            )
        return "\n".join(lines)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lockfile(lock_path: str | Path) -> dict[str, str]:
    """Read ``name==version`` lines (comments and blank lines allowed) into {name: version}."""
    path = Path(lock_path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise LockfileError(f"{path}: no such lock file; generate it with `make lock`") from None
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise LockfileError(
                f"{path}:{number}: cannot parse {raw.strip()!r}: expected 'name==version'"
            )
        name = _normalize(match["name"])
        if name in pins:
            raise LockfileError(f"{path}:{number}: {match['name']} is pinned twice")
        pins[name] = match["version"]
    return pins


def installed_packages() -> dict[str, str]:
    """{normalized name: version} of every distribution importlib.metadata can see."""
    import importlib.metadata as md

    found: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name and _normalize(name) not in _SKIP:
            found.setdefault(_normalize(name), dist.version)
    return found


def check_lockfile(lock_path: str | Path) -> LockReport:
    """Compare `lock_path` with the installed packages; report each mismatch."""
    pins = parse_lockfile(lock_path)
    installed = installed_packages()
    mismatches = tuple(
        Mismatch(name, version, installed.get(name))
        for name, version in sorted(pins.items())
        if installed.get(name) != version
    )
    extra = tuple(
        Mismatch(name, None, version)
        for name, version in sorted(installed.items())
        if name not in pins
    )
    return LockReport(Path(lock_path), len(pins), mismatches, extra)


def write_lockfile(lock_path: str | Path) -> int:
    """Write the installed packages as a sorted ``name==version`` lock; return how many."""
    packages = installed_packages()
    header = [
        "# requirements.lock: the exact CPU environment the project's CI runs on.",
        "# Generated by `make lock` (mlinfra-lab ci lock); checked by `make check-lock`.",
        f"# python {platform.python_version()} on {platform.system()} {platform.machine()}",
        "# A GPU machine differs (CUDA torch build): lock it separately.",
    ]
    lines = [f"{name}=={version}" for name, version in sorted(packages.items())]
    Path(lock_path).write_text("\n".join(header + lines) + "\n")
    return len(lines)
