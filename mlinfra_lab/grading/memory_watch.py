"""A memory budget for all of one sandbox's processes together where no control group can
be made: the grading process samples what they hold and kills the sandbox past the budget.

Contract: ``watch = MemoryWatch(members, limit, kill, mount_roots=...)``; ``watch.start()``
starts a daemon thread in the grading process that, every `INTERVAL` seconds, measures
`sandbox_usage` (a `Usage`: the proportional resident memory of every process
``members()`` returns, plus the memory files they hold and the sandbox's tmpfs) and, the
first time it is over `limit` bytes, records it in ``watch.tripped`` and then calls
``kill(pids)`` with the processes it measured. ``watch.stop()`` ends the thread. Nothing
here runs in, or can be reached from, the sandbox.

What is counted, per sample:
- each process's ``Pss`` and ``SwapPss`` from ``/proc/PID/smaps_rollup`` (anonymous,
  file-backed and shared-memory pages it maps, a page shared by n processes counted 1/n
  in each: shared libraries once in all), or ``RssAnon + RssFile + RssShmem`` from
  ``/proc/PID/status`` where the kernel has no rollup;
- every ``memfd`` file a process holds, open or mapped, once by inode and in full
  (its allocated blocks: pages written with ``write()`` and never mapped count too, a
  sparse file's holes do not); the
  Pss of its mappings is taken out of the process's total so nothing counts twice;
- the used bytes of the sandbox's own tmpfs mounts (bubblewrap's home, ``/tmp`` and
  ``/dev/shm``), read with ``statvfs`` through ``/proc/PID/root`` of a process in the
  sandbox, once its mount table shows each of them as a tmpfs (before that they are the
  host's folders): files there are memory even when no process holds them.

Design decisions:
- With no cgroup, ``RLIMIT_AS`` alone held the budget per process; three
  children of 0.8x the budget each, or memory files of 2x it, got past. Sampling from
  outside needs no privilege beyond reading the sandbox's ``/proc`` entries (the grader
  starts the sandbox, so it may) and cannot be switched off from inside.
- Members are the sandbox's process tree: under bubblewrap every process of its PID
  namespace descends from the sandbox's first process (orphans are re-parented to the
  namespace's init), so ``members`` is `descendants` of it; the fallback sandbox adds the
  processes its markers find (see `sandbox`).
- Kill first, explain after: past the budget the whole sandbox is killed (the runner
  then reports the cell and fails the rest, as for a cgroup's OOM kill); the `Usage` that
  tripped is the gradebook's explanation.
- Caveats: a sample every `INTERVAL` seconds lets a process go past the budget for that
  long (a kernel keeps its address-space limit as a second wall); a tmpfs file that is
  also mapped counts twice (on the side of the budget); System V shared memory that no
  process has attached is not seen (bubblewrap gives each sandbox its own IPC namespace,
  which dies with it). Standard library only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .budgets import human_bytes

__all__ = ["INTERVAL", "MemoryWatch", "Usage", "descendants", "sandbox_usage"]

INTERVAL = 0.05  # seconds between samples
_MEMFD = "/memfd:"


@dataclass(frozen=True)
class Usage:
    """One sample of a sandbox's memory (bytes)."""

    processes: int = 0  # how many processes were measured
    resident: int = 0  # their proportional resident memory (memfd mappings left out)
    memfd: int = 0  # the memfd files they hold, each once, in full
    tmpfs: int = 0  # used bytes of the sandbox's tmpfs mounts

    @property
    def total(self) -> int:
        return self.resident + self.memfd + self.tmpfs

    def describe(self) -> str:
        """``1.2 GiB: 3 processes 0.7 GiB resident, memory files 0.5 GiB, tmpfs 0``."""
        return (
            f"{_gib(self.total)} in all: {self.processes} process"
            f"{'es' if self.processes != 1 else ''} held {_gib(self.resident)} resident, "
            f"memory files {_gib(self.memfd)}, tmpfs files {_gib(self.tmpfs)}"
        )


def _gib(n: int) -> str:
    return human_bytes(n) if n % (1 << 20) == 0 else f"{n / (1 << 30):.2f} GiB"


def _ppids() -> dict[int, int]:
    """pid -> parent pid of every process (one pass over /proc)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                text = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = text[text.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            out[int(name)] = int(fields[1])
    return out


def descendants(root: int) -> list[int]:
    """`root` and every process below it, parents first (empty when `root` is gone)."""
    children: dict[int, list[int]] = {}
    ppids = _ppids()
    if root not in ppids:
        return []
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _kib(line: str) -> int:
    parts = line.split()
    return int(parts[1]) * 1024 if len(parts) >= 2 and parts[1].isdigit() else 0


def _resident(pid: int) -> int:
    """Pss + SwapPss of `pid` (bytes), or its status' Rss parts; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            lines = fh.readlines()
        return sum(_kib(ln) for ln in lines if ln.startswith(("Pss:", "SwapPss:")))
    except FileNotFoundError:
        pass
    except OSError:
        return 0
    try:
        with open(f"/proc/{pid}/status") as fh:
            lines = fh.readlines()
    except OSError:
        return 0
    return sum(_kib(ln) for ln in lines if ln.startswith(("RssAnon:", "RssFile:", "RssShmem:")))


def _memfd(pid: int, seen: dict[tuple[int, int], int]) -> int:
    """Add each memfd file `pid` holds open or maps to `seen` ((dev, inode) -> bytes, in
    full); return the Pss of its memfd mappings (smaps is read only when it maps one)."""
    links = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    for n in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{n}").startswith(_MEMFD):
                links.append(f"/proc/{pid}/fd/{n}")
        except OSError:
            continue
    try:
        with open(f"/proc/{pid}/maps") as fh:
            mapped = [line.split(None, 1)[0] for line in fh if _MEMFD in line]
    except OSError:
        mapped = []
    links += [f"/proc/{pid}/map_files/{span}" for span in mapped]
    for link in links:
        try:
            info = os.stat(link)
        except OSError:  # map_files needs CAP_SYS_ADMIN: the mapping's Pss then counts
            continue
        seen[(info.st_dev, info.st_ino)] = info.st_blocks * 512  # allocated, not sparse
    if not mapped:
        return 0
    try:
        with open(f"/proc/{pid}/smaps") as fh:
            lines = fh.readlines()
    except OSError:
        return 0
    total, inside = 0, False
    for line in lines:
        head = line.split(None, 1)[0] if line.strip() else ""
        if "-" in head and not head.endswith(":"):  # a mapping's first line
            inside = _MEMFD in line and os.path.exists(f"/proc/{pid}/map_files/{head}")
        elif inside and line.startswith(("Pss:", "SwapPss:")):
            total += _kib(line)
    return total


def _tmpfs_mounts(pid: int) -> dict[str, set[int]]:
    """Mount point -> device numbers of every tmpfs in `pid`'s mount table, as it sees them."""
    with open(f"/proc/{pid}/mountinfo") as fh:
        lines = fh.readlines()
    points: dict[str, set[int]] = {}
    for line in lines:
        # "id parent major:minor root mount-point options [optional...] - fstype source ..."
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) >= 5 and right.split()[:1] == ["tmpfs"]:
            major, _, minor = fields[2].partition(":")
            point = fields[4].replace("\\040", " ")
            points.setdefault(point, set()).add(os.makedev(int(major), int(minor)))
    return points


def _tmpfs_used(pids: Sequence[int], mount_roots: Sequence[str]) -> int:
    """Used bytes of the tmpfs mounts `mount_roots` as a process of `pids` sees them.

    Only a process that is already inside its sandbox is asked: one with a mount table of
    its own in which every path of `mount_roots` is a tmpfs mount point, and the one it
    sees there (same device: not covered by a later mount). While bubblewrap
    is still building the sandbox, its process has a copy of the host's mount table, where
    ``/proc/PID/root/tmp`` is the host's disk: counting that once killed a kernel at its
    start (30 GB of used disk read as the sandbox's memory)."""
    if not mount_roots:
        return 0
    try:
        own_ns = os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return 0
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}/ns/mnt").st_ino == own_ns:
                continue
            mounts = _tmpfs_mounts(pid)
            seen = {p: os.stat(f"/proc/{pid}/root{p}").st_dev for p in mount_roots}
            if not all(dev in mounts.get(p, ()) for p, dev in seen.items()):
                continue  # its sandbox is not built yet: these are the host's folders
            used = 0
            for path in mount_roots:
                st = os.statvfs(f"/proc/{pid}/root{path}")
                used += (st.f_blocks - st.f_bfree) * st.f_frsize
            return used
        except OSError:
            continue
    return 0


def sandbox_usage(pids: Iterable[int], mount_roots: Sequence[str] = ()) -> Usage:
    """What the processes `pids` hold together (see the module docstring)."""
    pids = list(pids)
    resident, files = 0, dict[tuple[int, int], int]()
    for pid in pids:
        resident += max(0, _resident(pid) - _memfd(pid, files))
    return Usage(len(pids), resident, sum(files.values()), _tmpfs_used(pids, mount_roots))


class MemoryWatch:
    """The sampling thread of one sandbox (see the module docstring)."""

    def __init__(
        self,
        members: Callable[[], list[int]],
        limit: int,
        kill: Callable[[list[int]], None],
        mount_roots: Sequence[str] = (),
        interval: float = INTERVAL,
    ) -> None:
        self.members, self.limit, self.kill = members, limit, kill
        self.mount_roots, self.interval = tuple(mount_roots), interval
        self.tripped: Usage | None = None
        self.peak = Usage()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlinfra-memory-watch", daemon=True)

    def start(self) -> MemoryWatch:
        self._thread.start()
        return self

    def sample(self) -> Usage:
        """Measure once; past the limit, record it and kill the sandbox (once)."""
        pids = self.members()
        usage = sandbox_usage(pids, self.mount_roots)
        if usage.total > self.peak.total:
            self.peak = usage
        if usage.total > self.limit and self.tripped is None:
            self.tripped = usage  # before the kill: the runner reads it once the kernel dies
            self.kill(pids)
        return usage

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a process vanishing mid-read: sample again
                continue
            if self.tripped is not None:
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
