"""Caps on what all the processes of one sandbox use together: memory and process count.

Contract: ``CgroupCaps.probe()`` returns the caps this machine can enforce (a control-group
hierarchy this process may create groups in: cgroup v2, else the v1 ``memory`` and
``pids`` hierarchies), or a `CgroupCaps` whose ``kind`` is ``"none"`` and whose `missing`
says why. ``caps.group(name, memory, pids)`` creates one group per sandbox: `memory` bytes
for the resident memory of all its processes together (anonymous memory, page cache,
shared memory, ``memfd`` files and tmpfs pages included, swap not allowed) and `pids`
tasks (processes and threads); its ``join`` writes a pid into it (the sandbox calls it
between fork and exec, so every process the kernel starts is inside), ``overrun()`` says
which cap was hit (memory: the kernel's OOM killer ran; processes: a fork was refused),
and ``close()`` removes the group once its processes are gone.

Design decisions:
- Control groups, not only ``RLIMIT_AS``: an address-space limit is per process and does not
  count ``memfd`` or tmpfs pages, so three children or one memory file held 4.8 GiB under a
  2 GiB budget. A group counts what its processes hold together, and the
  kernel enforces it: past the cap, its OOM killer ends a process of that group only.
- ``RLIMIT_NPROC`` counts every process of a uid, the grader's included when the kernel runs
  as the grader's user; ``pids.max`` counts the group's tasks only.
- The groups are made under this process's own group (``/proc/self/cgroup``), so a limit
  an outer container sets still holds; each group's name carries this process's pid.
- Where no hierarchy is writable (no root, no delegation), nothing is enforced here and
  `missing` says so: ``grade`` then prints it once before it starts (see `grade`).
- Standard library only; nothing runs in the student's kernel.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CGROUP_ROOT", "CgroupCaps", "Group"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own(hierarchy: str) -> str:
    """This process's group in `hierarchy` (``""`` for v2), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, names, path = line.split(":", 2)
        if (hierarchy == "" and names == "") or hierarchy in names.split(","):
            return path or "/"
    return "/"


def _writable_dir(path: Path) -> bool:
    probe = path / f"mlinfra-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        probe.rmdir()
    except OSError:
        pass
    return True


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _count(text: str, key: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


@dataclass
class Group:
    """One sandbox's control group(s) (see the module docstring)."""

    kind: str  # "cgroup2" or "cgroup1"
    dirs: dict[str, Path]  # controller ("memory", "pids", or "" for v2) -> its folder
    memory: int | None
    pids: int | None
    procs_files: list[str] = field(default_factory=list)

    def overrun(self) -> str | None:
        """Which cap the group's processes ran into, or None."""
        if self.kind == "cgroup2":
            folder = self.dirs[""]
            if self.memory and _count(_read(folder / "memory.events"), "oom_kill"):
                return "memory"
            if self.pids and _count(_read(folder / "pids.events"), "max"):
                return "processes"
            return None
        memory = self.dirs.get("memory")
        if memory and self.memory and _count(_read(memory / "memory.oom_control"), "oom_kill"):
            return "memory"
        pids = self.dirs.get("pids")
        if pids and self.pids and _count(_read(pids / "pids.events"), "max"):
            return "processes"
        return None

    def close(self) -> None:
        """Remove the group's folders (its processes must be gone: the sandbox killed them)."""
        for folder in self.dirs.values():
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # a process still exiting: try again shortly
                    import time

                    time.sleep(0.02)


@dataclass
class CgroupCaps:
    """What this machine can cap per sandbox (see the module docstring)."""

    kind: str = "none"  # "cgroup2", "cgroup1" or "none"
    parents: dict[str, Path] = field(default_factory=dict)
    missing: str = ""  # why nothing is capped here ("" when kind is not "none")
    _made: int = 0

    @classmethod
    def probe(cls, root: Path = CGROUP_ROOT) -> CgroupCaps:
        """The caps of this machine (never raises)."""
        try:
            v2 = root / "cgroup.controllers"
            if v2.exists():
                parent = root / _own("").lstrip("/")
                wanted = {"memory", "pids"}
                if wanted <= set(_read(parent / "cgroup.subtree_control").split()) and (
                    _writable_dir(parent)
                ):
                    return cls("cgroup2", {"": parent})
                return cls(
                    missing="cgroup v2 is mounted but this process cannot create groups "
                    f"with the memory and pids controllers under {parent} (run grade as "
                    "root, or in a systemd scope with delegation: systemd-run --user "
                    "--scope -p Delegate=yes)"
                )
            parents = {c: root / c / _own(c).lstrip("/") for c in ("memory", "pids")}
            if all(p.is_dir() and _writable_dir(p) for p in parents.values()):
                return cls("cgroup1", parents)
            return cls(
                missing="no control-group hierarchy for memory and pids is writable here "
                "(run grade as root, or where cgroups are delegated)"
            )
        except OSError as err:
            return cls(missing=f"control groups cannot be used here ({type(err).__name__})")

    def group(self, name: str, memory: int | None, pids: int | None) -> Group | None:
        """A new group for one sandbox with these caps (None: nothing to cap, or no cgroups)."""
        if self.kind == "none" or (memory is None and pids is None):
            return None
        self._made += 1
        leaf = f"mlinfra-{os.getpid()}-{self._made}-{name}"
        if self.kind == "cgroup2":
            folder = self.parents[""] / leaf
            folder.mkdir()
            if memory is not None:
                _write(folder / "memory.max", str(memory))
                _write(folder / "memory.swap.max", "0")
            if pids is not None:
                _write(folder / "pids.max", str(pids))
            return Group("cgroup2", {"": folder}, memory, pids, [str(folder / "cgroup.procs")])
        dirs: dict[str, Path] = {}
        if memory is not None:
            dirs["memory"] = self.parents["memory"] / leaf
            dirs["memory"].mkdir()
            _write(dirs["memory"] / "memory.limit_in_bytes", str(memory))
            if (dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                _write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory))
        if pids is not None:
            dirs["pids"] = self.parents["pids"] / leaf
            dirs["pids"].mkdir()
            _write(dirs["pids"] / "pids.max", str(pids))
        procs = [str(d / "cgroup.procs") for d in dirs.values()]
        return Group("cgroup1", dirs, memory, pids, procs)
