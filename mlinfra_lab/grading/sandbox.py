"""One sandbox per graded notebook: what the student's kernel can see, reach and leave behind.

Contract: ``sandbox = make_sandbox(kind)`` (``"auto"``, ``"bwrap"`` or ``"rlimit"``) gives a
`Sandbox`; ``sandbox.prepare(workdir, slot)`` hands a fresh, empty working folder to the
sandbox's user, ``sandbox.popen(argv, workdir, env, log, memory_limit, slot)`` starts
`argv` (the kernel) inside it, and ``sandbox.kill(proc, slot)`` ends it with every process
it started: nothing survives a submission. `SandboxUnavailable` says why a requested kind
cannot run here, and what to install.

What the kernel gets, with ``bwrap`` (bubblewrap, Debian's ``bubblewrap`` package):
- a new mount namespace holding only the operating system (``/usr`` and its links, a few
  files of ``/etc``), this Python (its prefixes, read-only), the `mlinfra_lab` package
  (read-only: only the package folder, never the checkout around it, which holds the
  instructor's labs), a private ``/tmp`` and ``/dev/shm``, and its working folder (the only
  place it can write). ``--source``, other submissions, the gradebook folder and the home
  folders do not exist inside.
- new PID, network, IPC and UTS namespaces: it sees only its own processes in ``/proc`` (not
  the ``grade`` command line, not its neighbours), cannot signal the grader, and has a
  loopback interface and nothing else. The kernel's channels are Unix sockets in the
  working folder (jupyter's ``ipc`` transport), so the grader reaches it without a network.
- as root, the kernel runs as a throwaway user (uid `SANDBOX_UID_BASE` + slot) with no
  capabilities and ``no_new_privs``; as another user, it keeps that user (an unprivileged
  user namespace) and still sees none of the files above.
- ``--die-with-parent`` and the PID namespace: when the grader kills the sandbox (or dies),
  the kernel and everything it started, daemons included, die with it.

The fallback, ``rlimit`` (no bubblewrap; ``auto`` picks it with a warning): a fresh working
folder, a new session, the same resource limits and, as root, the throwaway user (so the
sources are readable only if they are world-readable: keep ``--source`` in a folder of mode
0700) whose every process is killed at the end. It hides nothing else: without root the
kernel runs as the grader's user and can read what that user reads and signal its
processes. The instructors' page of the book says which to use when.

Design decisions:
- bubblewrap rather than containers: it is one small setuid-free program from the
  distribution, needs no daemon, and starts in milliseconds (a container per notebook would
  cost seconds); where an instructor has Docker, running the whole ``grade`` command in a
  container adds an outer wall, not a replacement for this per-notebook one.
- Intermediate folders of each bound path are created with mode 0755 (bubblewrap's own are
  0700 when it runs as root, which the throwaway user cannot cross).
- The throwaway uid differs per slot (parallel job), so killing "every process of this uid"
  after one notebook never touches a neighbour's kernel; and per grading process: each
  `Sandbox` claims its own block of uids (a lock file per block, `UID_LOCKS`), so two
  ``grade`` commands on one machine (or two test runs) never kill each other's kernels.
- A GPU is passed through (``/dev/nvidia*``, ``/sys``) only where one exists.
- No user namespace of its own: bubblewrap loads `seccomp.no_user_namespaces`, so the
  throwaway user cannot become root in a namespace and mount a tmpfs no budget counts.
- Limits set before exec, by a launcher program (`launch`, never a ``preexec_fn``: the
  grader runs ``--jobs`` kernels from threads): the sandbox's control group (`cgroups`:
  memory and tasks of all its processes together, where this machine allows), address
  space (``RLIMIT_AS``, see `budgets`), file size (so a kernel cannot fill the disk
  through its log or its folder) and core dumps off.
- Disk: the kernel's home, temporary folder and working directory
  (`HOME_DIR`), ``/tmp`` and ``/dev/shm`` are tmpfs of ``disk_limit`` bytes each
  (bubblewrap's ``--size``); its working folder on the host holds only its sockets and
  connection file, and `Sandbox.seal` makes it root's once the kernel answers, so nothing
  new reaches the host's disk (the judge's record files are made by the grader, see
  `judge`). Without root the folder cannot be sealed: `Sandbox.limits_missing` says so.
- Where no control group caps memory, a `memory_watch.MemoryWatch` thread of the grading
  process samples the sandbox's processes, memory files and tmpfs and kills the sandbox
  past the budget; `Sandbox.overrun` reports either the same way.
  ``Sandbox.memory_watch = False`` switches the watch off (the tests do, to show the
  attack it stops), never a flag of ``grade``.
- bubblewrap itself starts with an environment of its own (`_BWRAP_ENV`), never the
  grader's: its init process is readable in the sandbox's ``/proc``.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from .cgroups import CgroupCaps, Group
from .errors import GradingError
from .launch import Limits, launcher
from .memory_watch import MemoryWatch, descendants
from .seccomp import filter_fd, no_user_namespaces

__all__ = [
    "SANDBOX_KINDS",
    "SANDBOX_UID_BASE",
    "BwrapSandbox",
    "RlimitSandbox",
    "Sandbox",
    "SandboxUnavailable",
    "HOME_DIR",
    "make_sandbox",
]

SANDBOX_KINDS = ("auto", "bwrap", "rlimit")
SANDBOX_UID_BASE = 100_000  # throwaway uids (in no passwd file): a block's base + the job slot
UID_BLOCK = 4096  # uids per grading process: job slots, and the judges' (slot + 1000)
UID_BLOCKS = 256  # sandboxes (grading processes) that can exist side by side on one machine
UID_LOCKS = "/tmp/mlinfra-sandbox-uids"  # one lock file per block, held while a block is used
MAX_FILE_BYTES = 1 << 30  # RLIMIT_FSIZE: the largest file a kernel may write
HOME_DIR = "home"  # the kernel's home, temporary folder and cwd, inside its working folder
_ETC = (
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/fonts",
    "/etc/matplotlibrc",
)


# bubblewrap itself gets no environment of the grader's: its init process inside the PID
# namespace keeps the environment it was started with (``--clearenv`` applies to the
# command), and without root the kernel could read it in /proc/1/environ (the grading
# secret, credentials). The kernel's own environment is passed with --setenv.
_BWRAP_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


class SandboxUnavailable(GradingError):
    """The requested sandbox cannot run on this machine (the message says what to install)."""


def _limits(
    memory_limit: int | None,
    uid: int | None,
    group: Group | None = None,
    nproc: int | None = None,
) -> Limits:
    """What `launch` applies before the sandbox's command runs: the control group,
    resource limits, then (fallback only) the throwaway user. `nproc`: ``RLIMIT_NPROC``,
    for a sandbox whose processes run as a throwaway user and that no control group
    counts (`Sandbox.nproc_limit`)."""
    return Limits(
        fsize=MAX_FILE_BYTES,
        memory=memory_limit,
        nproc=nproc,
        uid=uid,
        cgroup_procs=tuple(group.procs_files) if group is not None else (),
    )


def _claim_uid_block() -> tuple[int, int]:
    """(the first uid of a block of `UID_BLOCK` throwaway uids no other grading process on
    this machine holds, the open lock file that holds it for this process's life)."""
    import fcntl

    os.makedirs(UID_LOCKS, mode=0o755, exist_ok=True)
    for k in range(UID_BLOCKS):
        fd = os.open(os.path.join(UID_LOCKS, f"{k}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return SANDBOX_UID_BASE + k * UID_BLOCK, fd
    raise SandboxUnavailable(
        f"all {UID_BLOCKS} blocks of throwaway uids are held by other grading processes "
        f"on this machine (locks in {UID_LOCKS}); wait for one to finish"
    )


class Sandbox:
    """Start and end one kernel per working folder (see the module docstring)."""

    kind = "none"
    warning = ""  # what this sandbox cannot do here, for the gradebook and the log
    memory_watch = True  # sample memory from outside where no cgroup caps it (see above)

    def __init__(self) -> None:
        self.root = os.geteuid() == 0
        self.uid_base, self._uid_lock = _claim_uid_block() if self.root else (0, -1)
        self.caps = CgroupCaps.probe()
        self.groups: dict[int, Group] = {}
        self.watches: dict[int, MemoryWatch] = {}

    def nproc_limit(self, slot: int, max_procs: int | None) -> int | None:
        """``RLIMIT_NPROC`` for the sandbox in `slot`: `max_procs` where its processes run as
        a throwaway user (grading as root: the limit then counts the sandbox's tasks alone)
        and no control group counts them; None elsewhere (with a group, ``pids.max`` holds
        the budget and says so; as an ordinary user the limit would count all of the
        user's processes, the grader's own included)."""
        group = self.groups.get(slot)
        if max_procs is None or not self.root or (group is not None and group.pids):
            return None
        return max_procs

    def watched(self) -> bool:
        """True where the memory budget is held by a `MemoryWatch` (no cgroup caps it)."""
        return self.memory_watch and self.caps.kind == "none"

    def members(self, proc: subprocess.Popen, slot: int) -> list[int]:
        """The processes of the sandbox `proc` started (its tree: see `memory_watch`)."""
        return descendants(proc.pid)

    def mount_roots(self, workdir: Path) -> list[str]:
        """The sandbox's own tmpfs mounts, as its processes see them (none here)."""
        return []

    def watch(
        self, proc: subprocess.Popen, slot: int, workdir: Path, memory: int | None
    ) -> MemoryWatch | None:
        """Start the memory watch of the sandbox `proc` started, where one is needed."""
        old = self.watches.pop(slot, None)
        if old is not None:
            old.stop()
        group = self.groups.get(slot)
        if memory is None or not self.memory_watch or (group is not None and group.memory):
            return None

        def kill(pids: list[int]) -> None:
            for pid in [proc.pid, *pids]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

        watch = MemoryWatch(
            lambda: self.members(proc, slot), memory, kill, self.mount_roots(workdir)
        )
        self.watches[slot] = watch.start()
        return watch

    def group(self, slot: int, memory: int | None, procs: int | None) -> Group | None:
        """A fresh control group for the sandbox of `slot` (None: no caps, or none here)."""
        old = self.groups.pop(slot, None)
        if old is not None:
            old.close()
        try:
            group = self.caps.group(f"s{slot}", memory, procs)
        except OSError:
            group = None
        if group is not None:
            self.groups[slot] = group
        return group

    def overrun(self, slot: int) -> str | None:
        """The cap ("memory", "processes") the sandbox of `slot` ran into, or None."""
        group = self.groups.get(slot)
        if group is not None and (over := group.overrun()) is not None:
            return over
        watch = self.watches.get(slot)
        return "memory" if watch is not None and watch.tripped is not None else None

    def overrun_detail(self, slot: int) -> str | None:
        """What the memory watch measured when it stopped the sandbox of `slot`, or None."""
        watch = self.watches.get(slot)
        return watch.tripped.describe() if watch is not None and watch.tripped else None

    def seal(self, workdir: Path, slot: int) -> None:
        """After the kernel has made its sockets: its host folder becomes read-only to it
        (as root: owned by root again), so it can write only to its size-capped tmpfs
        and to the record files the judge hands it (see `judge`)."""
        if self.uid(slot) is None:
            return
        for path in (workdir / "kernel.json", workdir):
            if path.exists():
                os.chown(path, 0, 0)
        os.chmod(workdir, 0o755)

    def limits_missing(self, memory: int | None, procs: int | None, disk: int | None) -> list[str]:
        """One line per budget asked for that this sandbox cannot enforce here."""
        lines = []
        if memory is not None and self.watched() and self.kind != "bwrap" and not self.root:
            lines.append(
                "the memory budget is held by sampling the kernel's process tree and the "
                "processes that carry its marker; in this fallback sandbox a process that "
                "leaves the tree and clears its environment escapes it (install bubblewrap)"
            )
        memory = None if self.watched() else memory  # held by the memory watch
        procs = None if self.root else procs  # RLIMIT_NPROC on the throwaway user holds it
        if (memory is not None or procs is not None) and self.caps.kind == "none":
            which = " and ".join(
                n for n, v in (("memory", memory), ("process-count", procs)) if v is not None
            )
            lines.append(
                f"the {which} budget is not enforced for a sandbox's processes together: "
                f"{self.caps.missing}"
                + ("; memory falls back to an address-space limit per process" if memory else "")
            )
        if disk is not None and (self.kind != "bwrap" or not self.root):
            lines.append(
                "the disk budget is enforced only by the bubblewrap sandbox run as root (a "
                "size-capped tmpfs, and a working folder the kernel cannot write); here a "
                "kernel can write up to 1 GiB per file in its working folder"
            )
        return lines

    def __del__(self) -> None:
        if getattr(self, "_uid_lock", -1) >= 0:
            os.close(self._uid_lock)
            self._uid_lock = -1

    def uid(self, slot: int) -> int | None:
        """The throwaway uid of `slot` when running as root, else None (keep the user)."""
        return self.uid_base + slot if self.root else None

    def prepare(self, workdir: Path, slot: int) -> None:
        """Create `workdir` (empty, private) and its `HOME_DIR`, and give both to the
        sandbox's user."""
        workdir.mkdir(mode=0o700)
        (workdir / HOME_DIR).mkdir(mode=0o700)
        uid = self.uid(slot)
        if uid is not None:
            os.chown(workdir, uid, uid)
            os.chown(workdir / HOME_DIR, uid, uid)

    def popen(
        self,
        argv: Sequence[str],
        workdir: Path,
        env: Mapping[str, str],
        log: IO[bytes],
        memory_limit: int | None,
        slot: int,
        max_procs: int | None = None,
        disk_limit: int | None = None,
    ) -> subprocess.Popen:
        raise NotImplementedError

    def kill(self, proc: subprocess.Popen, slot: int) -> None:
        """End the sandbox and everything in it; wait for it."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        watch = self.watches.get(slot)  # kept until the slot's next sandbox: overrun reads it
        if watch is not None:
            watch.stop()
        uid = self.uid(slot)
        if uid is not None:
            _kill_uid(uid)
        group = self.groups.pop(slot, None)
        if group is not None:
            group.close()


def _kill_uid(uid: int) -> None:
    """SIGKILL every process owned by `uid` (a throwaway uid: all of them are ours)."""
    for _ in range(3):  # a process may fork while we look: look again
        found = False
        for status in glob.glob("/proc/[0-9]*/status"):
            try:
                with open(status) as fh:
                    owner = next((ln.split()[1] for ln in fh if ln.startswith("Uid:")), None)
                if owner == str(uid):
                    found = True
                    os.kill(int(status.split("/")[2]), signal.SIGKILL)
            except (OSError, ValueError):
                continue
        if not found:
            return
        time.sleep(0.05)


def _marked(marker: str, uid: int | None) -> list[int]:
    """The processes whose environment holds `marker`, or owned by `uid` when given."""
    needle, found = marker.encode(), []
    for entry in glob.glob("/proc/[0-9]*"):
        try:
            if uid is not None and os.stat(entry).st_uid == uid:
                found.append(int(entry[6:]))
                continue
            with open(f"{entry}/environ", "rb") as fh:
                if needle in fh.read():
                    found.append(int(entry[6:]))
        except (OSError, ValueError):
            continue
    return found


def _kill_marked(marker: str) -> None:
    """SIGKILL every process whose environment holds `marker` (one kernel's processes)."""
    needle = marker.encode()
    for _ in range(3):
        found = False
        for environ in glob.glob("/proc/[0-9]*/environ"):
            try:
                with open(environ, "rb") as fh:
                    if needle in fh.read():
                        found = True
                        os.kill(int(environ.split("/")[2]), signal.SIGKILL)
            except (OSError, ValueError):
                continue
        if not found:
            return
        time.sleep(0.05)


class RlimitSandbox(Sandbox):
    """The fallback: a new session, resource limits and, as root, a throwaway user.

    The throwaway user is used only if it can run this Python (a Python installed under
    ``/root``, mode 0700, cannot be run by another user); otherwise the kernels run as the
    grader's user and `warning` says so. At the end the process group, every process of the
    throwaway user and every process carrying this kernel's marker (`MARKER_ENV`, set in its
    environment) is killed, which also ends daemons that left the process group.
    """

    kind = "rlimit"
    MARKER_ENV = "MLINFRA_SANDBOX_MARKER"
    MARKED_EVERY = 10  # memory-watch samples between two scans of every process

    def __init__(self) -> None:
        super().__init__()
        self.warning = ""
        self.markers: dict[int, str] = {}
        self._samples: dict[int, int] = {}
        self._marked: dict[int, list[int]] = {}
        if self.root and not self._throwaway_user_can_run_python():
            self.root = False
            self.warning = (
                f"the rlimit sandbox runs kernels as root: the throwaway user "
                f"cannot run {sys.executable} (is it under /root?); install "
                "bubblewrap, or a Python that other users can read"
            )

    def _throwaway_user_can_run_python(self) -> bool:
        try:
            done = subprocess.run(
                launcher(
                    [sys.executable, "-c", "import mlinfra_lab"], _limits(None, self.uid_base)
                ),
                capture_output=True,
                timeout=60,
                cwd="/",
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return done.returncode == 0

    def popen(
        self,
        argv: Sequence[str],
        workdir: Path,
        env: Mapping[str, str],
        log: IO[bytes],
        memory_limit: int | None,
        slot: int,
        max_procs: int | None = None,
        disk_limit: int | None = None,
    ) -> subprocess.Popen:
        marker = self.markers[slot] = f"{slot}-{os.urandom(16).hex()}"
        group = self.group(slot, memory_limit, max_procs)
        limits = _limits(memory_limit, self.uid(slot), group, self.nproc_limit(slot, max_procs))
        proc = subprocess.Popen(
            launcher(argv, limits),
            cwd=workdir / HOME_DIR,
            env={**env, self.MARKER_ENV: marker},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.watch(proc, slot, workdir, memory_limit)
        return proc

    def members(self, proc: subprocess.Popen, slot: int) -> list[int]:
        """The kernel's process tree, plus (every `MARKED_EVERY` samples: a scan of all of
        /proc) the processes of the throwaway user and those carrying the kernel's marker,
        which a process that left the tree by double-forking still does."""
        self._samples[slot] = count = self._samples.get(slot, 0) + 1
        if count % self.MARKED_EVERY == 1:
            marker = f"{self.MARKER_ENV}={self.markers.get(slot, '-')}"
            self._marked[slot] = _marked(marker, self.uid(slot))
        return list(dict.fromkeys([*descendants(proc.pid), *self._marked.get(slot, ())]))

    def kill(self, proc: subprocess.Popen, slot: int) -> None:
        super().kill(proc, slot)
        if slot in self.markers:
            _kill_marked(f"{self.MARKER_ENV}={self.markers.pop(slot)}")


def package_root() -> Path:
    """The folder that holds the `mlinfra_lab` package (a checkout or site-packages)."""
    import mlinfra_lab

    return Path(mlinfra_lab.__file__).resolve().parent.parent


def extra_import_paths() -> list[str]:
    """The grader's ``PYTHONPATH`` folders, for the kernel too (packages installed with
    ``pip --target``, as on a cluster or a GPU image without Jupyter). The folder holding
    `mlinfra_lab` is left out: in a checkout it also holds the instructor's labs, and the
    kernel gets the package alone."""
    root = package_root()
    out = []
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        path = Path(entry).resolve() if entry else None
        if path and path.is_dir() and path != root and not (path / "mlinfra_lab").exists():
            out.append(str(path))
    return list(dict.fromkeys(out))


def _python_paths() -> list[str]:
    """Folders this Python needs, read-only: its prefixes, the grader's `extra_import_paths`
    and the mlinfra_lab package."""
    exe = Path(sys.executable)
    paths = {
        sys.prefix,
        sys.base_prefix,
        str(exe.resolve().parent.parent),
        str(package_root() / "mlinfra_lab"),
        *extra_import_paths(),
    }
    return sorted(p for p in paths if p and Path(p).is_dir())


class BwrapSandbox(Sandbox):
    """bubblewrap: namespaces and a mount tree of only what a kernel needs."""

    kind = "bwrap"

    def __init__(self, bwrap: str | None = None) -> None:
        super().__init__()
        found = bwrap or shutil.which("bwrap")
        if not found:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed: apt-get install "
                "bubblewrap, or grade with --sandbox rlimit (see the "
                "instructors' page for what that does not stop)"
            )
        self.bwrap: str = found
        self.setpriv = shutil.which("setpriv") if self.root else None
        if self.root and not self.setpriv:
            raise SandboxUnavailable(
                "setpriv (util-linux) is needed to drop root inside the "
                "sandbox: apt-get install util-linux"
            )

    def _mounts(self, workdir: Path) -> list[str]:
        args: list[str] = []
        made: set[str] = {"/", "/tmp", "/dev", "/proc"}

        def parents(path: str) -> None:
            for parent in reversed(Path(path).parents):
                p = str(parent)
                if p not in made:
                    made.add(p)
                    args.extend(["--perms", "0755", "--dir", p])

        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            p = Path("/") / top
            if p.is_symlink():
                args.extend(["--symlink", os.readlink(p), str(p)])
            elif p.is_dir():
                args.extend(["--ro-bind", str(p), str(p)])
        args.extend(["--ro-bind", "/usr", "/usr"])
        for path in _ETC:
            if os.path.exists(path):
                parents(path)
                args.extend(["--ro-bind", path, path])
        for path in _python_paths():
            if not path.startswith("/usr/"):
                parents(path)
                args.extend(["--ro-bind", path, path])
        if glob.glob("/dev/nvidia*"):  # a GPU: its device files and the driver's view of /sys
            for dev in sorted(glob.glob("/dev/nvidia*")):
                args.extend(["--dev-bind", dev, dev])
            args.extend(["--ro-bind", "/sys", "/sys"])
        parents(str(workdir))
        args.extend(["--bind", str(workdir), str(workdir)])
        return args

    def command(
        self,
        argv: Sequence[str],
        workdir: Path,
        env: Mapping[str, str],
        slot: int,
        disk_limit: int | None = None,
        seccomp_fd: int | None = None,
    ) -> list[str]:
        """The full bwrap command line that runs `argv` in the sandbox; `seccomp_fd`: an
        open file holding the filter of `seccomp.no_user_namespaces` (inherited by bwrap)."""
        cmd = [
            self.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *_sized(disk_limit),
            "--tmpfs",
            "/tmp",
            *_sized(disk_limit),
            "--tmpfs",
            "/dev/shm",
        ]
        if not self.root:
            cmd.append("--unshare-user")
        cmd += self._mounts(workdir)
        cmd += ["--perms", "01777", *_sized(disk_limit), "--tmpfs", str(workdir / HOME_DIR)]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        cmd += ["--chdir", str(workdir / HOME_DIR), "--clearenv"]
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        if self.root:  # drop to the throwaway user, with no way back
            assert self.setpriv is not None, "__init__ refuses a root sandbox without setpriv"
            uid = str(self.uid(slot))
            cmd += [
                "--",
                self.setpriv,
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
            ]
        else:
            cmd += ["--cap-drop", "ALL", "--"]
        return cmd + list(argv)

    def popen(
        self,
        argv: Sequence[str],
        workdir: Path,
        env: Mapping[str, str],
        log: IO[bytes],
        memory_limit: int | None,
        slot: int,
        max_procs: int | None = None,
        disk_limit: int | None = None,
    ) -> subprocess.Popen:
        group = self.group(slot, memory_limit, max_procs)
        limits = _limits(memory_limit, None, group, self.nproc_limit(slot, max_procs))
        program = no_user_namespaces()
        fd = filter_fd(program) if program is not None else None
        try:
            proc = subprocess.Popen(
                launcher(self.command(argv, workdir, env, slot, disk_limit, fd), limits),
                cwd=workdir,
                env=_BWRAP_ENV,  # bwrap's own: its processes in the sandbox are readable there
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=() if fd is None else (fd,),
            )
        finally:
            if fd is not None:
                os.close(fd)  # bwrap holds its own copy
        self.watch(proc, slot, workdir, memory_limit)
        return proc

    def mount_roots(self, workdir: Path) -> list[str]:
        """The tmpfs mounts `command` gives the kernel: ``/tmp``, ``/dev/shm``, its home."""
        return ["/tmp", "/dev/shm", str(workdir / HOME_DIR)]


def _sized(limit: int | None) -> list[str]:
    """bubblewrap's size option for the next ``--tmpfs`` (none: the tmpfs default)."""
    return ["--size", str(int(limit))] if limit else []


def _bwrap_works(sandbox: BwrapSandbox) -> str | None:
    """None when a trivial command runs in `sandbox`, else bwrap's complaint."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mlinfra-sandbox-probe-") as tmp:
        work = Path(tmp) / "w"
        sandbox.prepare(work, 0)
        cmd = sandbox.command([sys.executable, "-c", "pass"], work, {"PATH": "/usr/bin"}, 0)
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            return str(err)
        return None if done.returncode == 0 else done.stderr.decode(errors="replace").strip()


def make_sandbox(kind: str = "auto") -> Sandbox:
    """The sandbox `kind` names; ``auto``: bubblewrap when it works here, else the fallback."""
    if kind not in SANDBOX_KINDS:
        raise SandboxUnavailable(f"unknown sandbox {kind!r}: use one of {', '.join(SANDBOX_KINDS)}")
    if kind == "rlimit":
        return RlimitSandbox()
    try:
        sandbox = BwrapSandbox()
        problem = _bwrap_works(sandbox)
    except SandboxUnavailable:
        if kind == "bwrap":
            raise
        return RlimitSandbox()
    if problem is None:
        return sandbox
    if kind == "bwrap":
        raise SandboxUnavailable(
            f"bubblewrap is installed but cannot start a sandbox here "
            f"({problem[:300]}); grade with --sandbox rlimit, or run "
            "where unprivileged namespaces are allowed"
        )
    return RlimitSandbox()
