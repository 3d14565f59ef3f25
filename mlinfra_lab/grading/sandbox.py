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
  after one notebook never touches a neighbour's kernel.
- A GPU is passed through (``/dev/nvidia*``, ``/sys``) only where one exists.
- Limits set before exec: address space (``RLIMIT_AS``, see `budgets`), file size (so a
  kernel cannot fill the disk through its log or its folder) and core dumps off.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from .errors import GradingError

__all__ = [
    "SANDBOX_KINDS",
    "SANDBOX_UID_BASE",
    "BwrapSandbox",
    "RlimitSandbox",
    "Sandbox",
    "SandboxUnavailable",
    "make_sandbox",
]

SANDBOX_KINDS = ("auto", "bwrap", "rlimit")
SANDBOX_UID_BASE = 61000  # throwaway uids (not in /etc/passwd): 61000 + the job slot
MAX_FILE_BYTES = 1 << 30  # RLIMIT_FSIZE: the largest file a kernel may write
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


class SandboxUnavailable(GradingError):
    """The requested sandbox cannot run on this machine (the message says what to install)."""


def _limits(memory_limit: int | None, uid: int | None) -> Callable[[], None]:
    """A ``preexec_fn``: resource limits, then (fallback only) the throwaway user."""
    import resource

    def apply() -> None:
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)

    return apply


class Sandbox:
    """Start and end one kernel per working folder (see the module docstring)."""

    kind = "none"
    warning = ""  # what this sandbox cannot do here, for the gradebook and the log

    def __init__(self) -> None:
        self.root = os.geteuid() == 0

    def uid(self, slot: int) -> int | None:
        """The throwaway uid of `slot` when running as root, else None (keep the user)."""
        return SANDBOX_UID_BASE + slot if self.root else None

    def prepare(self, workdir: Path, slot: int) -> None:
        """Create `workdir` (empty, private) and give it to the sandbox's user."""
        workdir.mkdir(mode=0o700)
        uid = self.uid(slot)
        if uid is not None:
            os.chown(workdir, uid, uid)

    def popen(
        self,
        argv: Sequence[str],
        workdir: Path,
        env: Mapping[str, str],
        log: IO[bytes],
        memory_limit: int | None,
        slot: int,
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
        uid = self.uid(slot)
        if uid is not None:
            _kill_uid(uid)


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

    def __init__(self) -> None:
        super().__init__()
        self.warning = ""
        self.markers: dict[int, str] = {}
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
                [sys.executable, "-c", "import mlinfra_lab"],
                capture_output=True,
                timeout=60,
                cwd="/",
                preexec_fn=_limits(None, SANDBOX_UID_BASE),
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
    ) -> subprocess.Popen:
        marker = self.markers[slot] = f"{slot}-{os.urandom(16).hex()}"
        return subprocess.Popen(
            list(argv),
            cwd=workdir,
            env={**env, self.MARKER_ENV: marker},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_limits(memory_limit, self.uid(slot)),
        )

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
        self.bwrap = bwrap or shutil.which("bwrap")
        if not self.bwrap:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed: apt-get install "
                "bubblewrap, or grade with --sandbox rlimit (see the "
                "instructors' page for what that does not stop)"
            )
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
        self, argv: Sequence[str], workdir: Path, env: Mapping[str, str], slot: int
    ) -> list[str]:
        """The full bwrap command line that runs `argv` in the sandbox."""
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
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/dev/shm",
        ]
        if not self.root:
            cmd.append("--unshare-user")
        cmd += self._mounts(workdir)
        cmd += ["--chdir", str(workdir), "--clearenv"]
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        if self.root:  # drop to the throwaway user, with no way back
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
    ) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(argv, workdir, env, slot),
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_limits(memory_limit, None),
        )


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
