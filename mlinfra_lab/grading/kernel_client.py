"""One sandboxed Jupyter kernel, and one request to it: the grading runner's messaging.

Contract: ``Kernel(workdir, config, sandbox, slot, env)`` launches ``ipykernel`` in
`sandbox` with its connection file and Unix sockets in `workdir`; ``kernel.start(timeout)``
waits until it answers (None) or says why it did not; ``execute(kernel, code, timeout,
...)`` sends one execute request and gathers its reply and broadcasts as a `Reply`, with
the state ``"done"``, ``"interrupted"`` or ``"dead"``; ``kernel.stop()`` ends the sandbox.
`kernel_env` builds a kernel's whole environment; `error_message` is the one-line reason a
gradebook shows for an error reply or broadcast.

Design decisions (the runner's docstring, `kernel_runner`, says why each is needed):
- The client reads the kernel's replies from its sockets; nothing passes through a file.
- Unix sockets (``ipc``) in the working folder, so a kernel without a network is reachable;
  messages over `MAX_MESSAGE_BYTES` are refused by the socket.
- Output is counted, never kept (`Reply.printed`).
- A request past its timeout is interrupted on the control channel; with no reply
  `INTERRUPT_GRACE` seconds later, the request is "dead" and the caller stops the kernel.
- The kernel's home, temporary folder and working directory are `sandbox.HOME_DIR` in its
  working folder (a size-capped tmpfs under bubblewrap); once it answers, the sandbox
  seals the working folder itself (`Sandbox.seal`): its sockets stay, nothing new is
  written there on the host's disk.
- The environment is built, not inherited (`kernel_env`), and never holds the grading
  secret, whatever the caller passes. It names the user
  (`SANDBOX_USER`) because the sandbox's throwaway uid is in no passwd file and
  ``getpass.getuser`` (torch.compile's cache folders call it) would raise, and points
  ``TMPDIR`` at the working folder, so temporary files die with the sandbox.
"""

from __future__ import annotations

import os
import queue
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from .sandbox import HOME_DIR, Sandbox, extra_import_paths, package_root
from .secret import SECRET_ENV

__all__ = [
    "IDLE_GRACE",
    "INTERRUPT_GRACE",
    "MAX_MESSAGE_BYTES",
    "Kernel",
    "Reply",
    "error_message",
    "execute",
    "expression_ok",
    "kernel_env",
    "log_tail",
]

INTERRUPT_GRACE = 10.0  # seconds an interrupted cell has to reply before the kernel is killed
IDLE_GRACE = 2.0  # seconds of iopub silence after the reply that count as the end of a cell
MAX_MESSAGE_BYTES = 16 << 20  # larger messages from the kernel are refused by the socket
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning|Quit|Group)\b")
MAX_MESSAGE = 500
SANDBOX_USER = "student"  # USER/LOGNAME: the throwaway uid has no passwd entry to name it
_PASS_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "TRITON_INTERPRET",
    "MLINFRA_ATTENTION_AUTOTUNE",
    "MLINFRA_SIZES",
    "MPLBACKEND",
)


def kernel_env(workdir: Path, extra: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The kernel's whole environment (see the module docstring)."""
    env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "HOME": str(workdir / HOME_DIR),
            "TMPDIR": str(workdir / HOME_DIR),
            "USER": SANDBOX_USER,
            "LOGNAME": SANDBOX_USER,
            "IPYTHONDIR": str(workdir / HOME_DIR / ".ipython"),
            "MPLCONFIGDIR": str(workdir / HOME_DIR / ".matplotlib"),
            "PYTHONNOUSERSITE": "1",
            "PYTHONPATH": os.pathsep.join([str(package_root()), *extra_import_paths()]),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "JUPYTER_PLATFORM_DIRS": "1",
        }
    )
    env.update(dict(extra))
    env.pop(SECRET_ENV, None)  # never in a kernel: it keys the gradebook's seal (`secret`)
    return env


def error_message(content: dict[str, Any]) -> str:
    """The last exception line(s) of an error reply or broadcast: what a student needs."""
    lines = [
        ln.rstrip()
        for ln in _ANSI.sub("", "\n".join(content.get("traceback") or [])).splitlines()
        if ln.strip()
    ]
    if lines:
        start = max(
            (i for i, ln in enumerate(lines) if _EXC_LINE.match(ln)), default=len(lines) - 1
        )
        return "\n".join(lines[start:])[:MAX_MESSAGE]
    ename, evalue = content.get("ename") or "an exception", content.get("evalue") or ""
    return f"{ename}: {evalue}"[:MAX_MESSAGE] if evalue else f"the cell raised {ename}"


class Kernel:
    """One sandboxed kernel and the client that talks to it."""

    def __init__(
        self,
        workdir: Path,
        config: Any,
        sandbox: Sandbox,
        slot: int,
        env: tuple[tuple[str, str], ...] | None = None,
    ) -> None:
        import zmq
        from jupyter_client import BlockingKernelClient
        from jupyter_client.connect import write_connection_file

        self.sandbox, self.slot, self.workdir = sandbox, slot, workdir
        conn = workdir / "kernel.json"
        write_connection_file(
            str(conn), transport="ipc", ip=str(workdir / "k"), key=secrets.token_hex(32).encode()
        )
        uid = sandbox.uid(slot)
        if uid is not None:
            os.chown(conn, uid, uid)
        self.log_path = workdir.parent / f"{workdir.name}.log"  # outside the sandbox
        argv = [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            str(conn),
            "--HistoryManager.enabled=False",
        ]
        with open(self.log_path, "wb") as log:
            self.proc = sandbox.popen(
                argv,
                workdir,
                kernel_env(workdir, config.env if env is None else env),
                log,
                config.memory_limit,
                slot,
                max_procs=getattr(config, "max_procs", None),
                disk_limit=getattr(config, "disk_limit", None),
            )
        self.context = zmq.Context()
        self.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self.client = BlockingKernelClient(connection_file=str(conn), context=self.context)
        self.client.load_connection_file()

    def start(self, timeout: float) -> str | None:
        """Wait for the kernel; None when ready, else why it is not."""
        deadline = time.monotonic() + timeout
        while not all(
            os.path.exists(f"{self.client.ip}-{p}")
            for p in (self.client.shell_port, self.client.iopub_port, self.client.control_port)
        ):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return self._why_not_started()
            time.sleep(0.05)
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=max(1.0, deadline - time.monotonic()))
        except RuntimeError:
            return self._why_not_started()
        self.sandbox.seal(self.workdir, self.slot)  # its sockets exist: no more host files
        return None

    def _why_not_started(self) -> str:
        tail = log_tail(self.log_path, 1500).strip().splitlines()[-6:]
        state = "exited" if self.proc.poll() is not None else "did not answer in time"
        return f"the grading kernel {state}: " + " / ".join(tail)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def interrupt(self) -> None:
        self.client.control_channel.send(self.client.session.msg("interrupt_request", {}))

    def stop(self) -> None:
        try:
            self.client.stop_channels()
        finally:
            self.sandbox.kill(self.proc, self.slot)
            self.context.destroy(linger=0)


class Reply:
    """What came back for one execute request."""

    def __init__(self) -> None:
        self.reply: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.idle = False
        self.printed = 0


def log_tail(path: Path, size: int) -> str:
    """The last `size` bytes of `path` as text (a kernel may write gigabytes there)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - size))
            return fh.read(size).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _output_size(msg: dict[str, Any]) -> int:
    content = msg.get("content") or {}
    if msg["msg_type"] == "stream":
        return len(content.get("text") or "")
    data = content.get("data") or {}
    return sum(len(v) if isinstance(v, str) else len(repr(v)) for v in data.values())


def execute(
    kernel: Kernel,
    code: str,
    timeout: float,
    store_history: bool = True,
    user_expressions: dict[str, str] | None = None,
) -> tuple[Reply, str]:
    """Send `code`; gather its reply and broadcasts. Returns (reply, state) where state is
    ``"done"``, ``"interrupted"`` (ran past `timeout`, then stopped) or ``"dead"``."""
    kc = kernel.client
    msg_id = kc.execute(
        code,
        silent=False,
        store_history=store_history,
        user_expressions=user_expressions or {},
        allow_stdin=False,
        stop_on_error=False,
    )
    got, state = Reply(), "done"
    deadline = time.monotonic() + timeout
    replied_at = 0.0
    while got.reply is None or not got.idle:
        if time.monotonic() > deadline:
            if state == "interrupted":
                return got, "dead"  # no reply INTERRUPT_GRACE s after the interrupt
            kernel.interrupt()
            state, deadline = "interrupted", time.monotonic() + INTERRUPT_GRACE
        if not kernel.alive:
            return got, "dead"
        try:
            msg = kc.get_iopub_msg(timeout=0.05)
        except queue.Empty:
            msg = None
        if msg is not None and msg.get("parent_header", {}).get("msg_id") == msg_id:
            kind = msg["msg_type"]
            if kind == "error" and got.error is None:
                got.error = msg["content"]
            elif kind in ("stream", "display_data", "execute_result", "update_display_data"):
                got.printed += _output_size(msg)
            elif kind == "status" and msg["content"].get("execution_state") == "idle":
                got.idle = True
        if got.reply is None:
            try:
                reply = kc.get_shell_msg(timeout=0 if msg is not None else 0.05)
            except queue.Empty:
                continue
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                got.reply, replied_at = reply["content"], time.monotonic()
        elif msg is None and time.monotonic() - replied_at > IDLE_GRACE:
            got.idle = True  # the reply is in and iopub stayed quiet: nothing more will come
    return got, state


def expression_ok(reply: Reply, name: str, token: str) -> bool:
    result = ((reply.reply or {}).get("user_expressions") or {}).get(name) or {}
    return result.get("status") == "ok" and token in str(result.get("data", {}).get("text/plain"))
