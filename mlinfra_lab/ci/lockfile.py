"""Environment reproducibility: compare a pinned lock file with what is installed.

Contract: ``check_lockfile(lock_path)`` parses the lock's ``name==version`` entries (each may
carry a PEP 508 environment marker after ``;`` and pip's ``--hash=sha256:...`` options, over
lines joined by a trailing ``\\``), compares every pin that applies to this machine with
``importlib.metadata`` and returns a `LockReport` listing every package that is missing or
at another version (``report.ok`` is False then). ``write_lockfile(path)`` writes a freeze
of the current environment; the committed lock is a resolver's (`lock_compile`).

Design decisions:
- The lock is written by a command, never by hand, so it can always be regenerated;
  ``requirements.txt`` keeps the ranges a human chose.
- One lock for every platform: a package that exists only on some platforms carries a
  marker (``triton==3.9.0 ; sys_platform == 'linux'``: Triton has no macOS wheel), so ``pip
  install -r requirements.lock`` skips it there and ``check_lockfile`` reports it as not
  applying (`LockReport.not_here`), not as missing. A universal resolver may pin one name
  twice under disjoint markers (an older version for older Pythons): at most one may apply
  here. The freeze takes its markers from requirements.txt, so the two cannot disagree.
- Hashes are read (`LockPin.hashes`) but checked by pip, not here: ``pip install
  --require-hashes`` refuses any file whose digest is not in the lock; this module compares
  versions of what is already installed.
- Local version labels are not locked: ``torch 2.13.0+cpu`` is written ``torch==2.13.0``.
  Which build of a version is installed (CPU, CUDA) is the index's choice (the Makefile's
  ``TORCH_INDEX``); a platform without ``+cpu`` builds (macOS) installs the same lock.
- Versions are compared as PEP 440 does for ``==`` (``2.13.0`` matches an installed
  ``2.13.0+cpu``; ``1.0`` matches ``1.0.0``); names in their PEP 503 normal form
  (``Jinja2`` == ``jinja2``, ``typing_extensions`` == ``typing-extensions``).
- The installers (pip, setuptools, wheel) and the project itself are not compared (a
  resolver's lock may pin ``wheel`` where a package needs it at run time).
- Packages installed but absent from the lock are reported as ``extra``, not as failures:
  CI fails on drift of what the project pinned, and ``make lock`` adds the newcomers.
- A line that does not parse raises `LockfileError` naming the file and the line: a
  half-understood lock is worse than none.

Caveats: write a freeze on Linux (where every course package installs): one written on
macOS has no Triton line at all. A GPU machine has another torch build and CUDA wheels
(``nvidia-*``, reported as ``extra``); ``make check-lock`` skips it.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, Specifier
from packaging.version import InvalidVersion

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "LockPin",
    "LockReport",
    "LockfileError",
    "Mismatch",
    "check_lockfile",
    "installed_packages",
    "parse_lockfile",
    "read_pins",
    "requirement_markers",
    "write_lockfile",
]

_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)\s*(;(?P<marker>.*))?$"
)
# pip's hash option; the digest lengths of the algorithms pip accepts
_HASH = re.compile(r"--hash[=\s]\s*(?P<algo>[a-z0-9]+):(?P<digest>\S*)")
_DIGEST_LENGTH = {"sha256": 64, "sha384": 96, "sha512": 128}
# Not locked: the project itself (installed editable: it is what is under test) and the
# installers (pip upgrades itself in `make setup`; pip-tools calls these "unsafe" too).
_SKIP = {"mlinfra-lab", "pip", "setuptools", "wheel"}


class LockfileError(MlinfraError, ValueError):
    """The lock file is missing or has a line that does not parse; names file and line."""


@dataclass(frozen=True)
class LockPin:
    """One line of a lock: a package, its version and the platforms it applies to."""

    name: str  # PEP 503 normal form
    version: str
    marker: str | None = None  # a PEP 508 marker; None: every platform
    hashes: tuple[str, ...] = ()  # "sha256:<hex>" of each file pip may install for it

    def applies(self) -> bool:
        """Whether this machine's Python should have the package (its marker holds here)."""
        return self.marker is None or Marker(self.marker).evaluate()

    def __str__(self) -> str:
        return f"{self.name}=={self.version}" + (f" ; {self.marker}" if self.marker else "")


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
    checked: int  # locked packages that apply here, compared
    mismatches: tuple[Mismatch, ...]  # missing or other version: these fail CI
    extra: tuple[Mismatch, ...]  # installed but not locked: reported only
    not_here: tuple[LockPin, ...] = ()  # pins whose marker is false on this machine

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
        if self.not_here:
            here = f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"
            lines.append(f"  (not for {here}: {', '.join(str(p) for p in self.not_here)})")
        if self.extra:
            lines.append(
                f"  ({len(self.extra)} installed packages not in the lock; run `make lock`)"
            )
        return "\n".join(lines)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _entries(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each entry: comments dropped, ``\\`` continuations joined."""
    first = 0
    parts: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not parts:
            first = number
        if line.endswith("\\"):
            parts.append(line[:-1].strip())
            continue
        parts.append(line)
        entry = " ".join(part for part in parts if part)
        parts = []
        if entry:
            yield first, entry
    if parts and any(parts):  # the file ends inside a continuation
        yield first, " ".join(part for part in parts if part)


def _hashes(path: Path, number: int, options: str) -> tuple[str, ...]:
    """The ``--hash=algo:hex`` options of one entry; anything else is an error."""
    hashes = []
    for match in _HASH.finditer(options):
        algo, digest = match["algo"], match["digest"]
        if _DIGEST_LENGTH.get(algo) != len(digest) or not re.fullmatch(r"[0-9a-f]+", digest):
            raise LockfileError(
                f"{path}:{number}: bad hash {match[0]!r}: expected --hash=sha256: and 64 "
                f"lowercase hex digits (sha384, sha512 likewise); regenerate with `make lock`"
            )
        hashes.append(f"{algo}:{digest}")
    rest = _HASH.sub("", options).strip()
    if rest:
        raise LockfileError(
            f"{path}:{number}: unexpected {rest!r} in a lock entry: only --hash options may "
            f"follow 'name==version ; marker'"
        )
    return tuple(hashes)


def read_pins(lock_path: str | Path) -> tuple[LockPin, ...]:
    """Every pin of the lock file, for every platform, in file order.

    An entry is ``name==version``, optionally ``; marker``, then any number of ``--hash``
    options, over one line or several joined by a trailing ``\\`` (pip's requirement-file
    syntax, as ``uv pip compile --generate-hashes`` writes it).
    """
    path = Path(lock_path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise LockfileError(f"{path}: no such lock file; generate it with `make lock`") from None
    pins: list[LockPin] = []
    markers: dict[str, set[str | None]] = {}
    for number, entry in _entries(text):
        requirement, _, options = entry.partition(" --")
        match = _LINE.match(requirement.strip())
        if match is None:
            raise LockfileError(
                f"{path}:{number}: cannot parse {requirement.strip()!r}: expected "
                f"'name==version' (optionally '; marker', then --hash options)"
            )
        hashes = _hashes(path, number, "--" + options if options else "")
        marker = (match["marker"] or "").strip() or None
        if marker is not None:
            try:
                marker = str(Marker(marker))
            except InvalidMarker as err:
                raise LockfileError(f"{path}:{number}: bad environment marker: {err}") from None
        name = _normalize(match["name"])
        seen = markers.setdefault(name, set())
        if seen and (marker is None or None in seen or marker in seen):
            raise LockfileError(
                f"{path}:{number}: {match['name']} is pinned twice (a second pin needs "
                f"another environment marker)"
            )
        seen.add(marker)
        pins.append(LockPin(name, match["version"], marker, hashes))
    return tuple(pins)


def _pins_here(lock_path: str | Path, pins: tuple[LockPin, ...]) -> list[LockPin]:
    """The pins whose marker holds here; a name may have one at most."""
    here = [pin for pin in pins if pin.applies()]
    names = [pin.name for pin in here]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise LockfileError(
            f"{lock_path}: {', '.join(twice)} pinned more than once for this machine (their "
            f"markers overlap); regenerate the lock with `make lock`"
        )
    return here


def parse_lockfile(lock_path: str | Path) -> dict[str, str]:
    """{name: version} of the lock's pins that apply to this machine (markers evaluated)."""
    return {pin.name: pin.version for pin in _pins_here(lock_path, read_pins(lock_path))}


def installed_packages() -> dict[str, str]:
    """{normalized name: version} of every distribution importlib.metadata can see."""
    import importlib.metadata as md

    found: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name and _normalize(name) not in _SKIP:
            found.setdefault(_normalize(name), dist.version)
    return found


def _same(locked: str, installed: str | None) -> bool:
    """PEP 440's ``==``: `installed` is the locked version, of any build (local label)."""
    if installed is None:
        return False
    try:
        return Specifier(f"=={locked}").contains(installed, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return locked == installed  # not PEP 440: only the very same string matches


def check_lockfile(lock_path: str | Path) -> LockReport:
    """Compare `lock_path` with the installed packages; report each mismatch."""
    pins = tuple(pin for pin in read_pins(lock_path) if pin.name not in _SKIP)
    here = _pins_here(lock_path, pins)
    installed = installed_packages()
    mismatches = tuple(
        Mismatch(pin.name, pin.version, installed.get(pin.name))
        for pin in sorted(here, key=lambda p: p.name)
        if not _same(pin.version, installed.get(pin.name))
    )
    locked = {pin.name for pin in pins}
    extra = tuple(
        Mismatch(name, None, version)
        for name, version in sorted(installed.items())
        if name not in locked
    )
    not_here = tuple(pin for pin in pins if not pin.applies())
    return LockReport(Path(lock_path), len(here), mismatches, extra, not_here)


def requirement_markers(requirements: str | Path) -> dict[str, str]:
    """{normalized name: marker} of every line of a requirements file that has a marker."""
    markers: dict[str, str] = {}
    for number, raw in enumerate(Path(requirements).read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as err:
            raise LockfileError(f"{requirements}:{number}: cannot parse {line!r}: {err}") from None
        if req.marker is not None:
            markers[_normalize(req.name)] = str(req.marker)
    return markers


def write_lockfile(lock_path: str | Path, requirements: str | Path | None = None) -> int:
    """Write the installed packages as a sorted ``name==version`` lock; return how many.

    A freeze, for an environment the resolver's lock does not describe (a GPU machine's);
    the committed lock is `lock_compile.compile_lockfile`'s.

    `requirements`: the file whose markers the lock's lines carry (a package asked for with
    ``; platform_system == "Linux"`` is locked with that marker); default: the
    ``requirements.txt`` beside `lock_path`, where there is one.
    """
    lock_path = Path(lock_path)
    if requirements is None and (lock_path.parent / "requirements.txt").is_file():
        requirements = lock_path.parent / "requirements.txt"
    markers = requirement_markers(requirements) if requirements is not None else {}
    header = [
        "# A freeze of the environment it was written in (no resolver, no hashes).",
        "# Written by `mlinfra-lab ci lock --freeze`; checked by `mlinfra-lab ci check-lock`.",
        f"# python {platform.python_version()} on {platform.system()} {platform.machine()}",
        "# Builds are the index's choice: torch==X matches X+cpu (the Makefile installs the CPU",
        "# build first). Lines with a marker apply only where it holds (from requirements.txt).",
        "# A GPU machine differs (CUDA torch build): lock it separately.",
    ]
    lines = []
    for name, version in sorted(installed_packages().items()):
        pin = LockPin(name, _public(version), markers.get(name))
        lines.append(str(pin))
    lock_path.write_text("\n".join(header + lines) + "\n")
    return len(lines)


def _public(version: str) -> str:
    """`version` without its local label (``2.13.0+cpu`` -> ``2.13.0``), otherwise as written."""
    return version.split("+", 1)[0]
