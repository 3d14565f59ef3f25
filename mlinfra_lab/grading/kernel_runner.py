"""Run one notebook cell by cell in a sandboxed kernel; judge each cell by the kernel's reply.

Contract: ``run_notebook(path, config, sandbox, slot)`` starts a fresh kernel in `sandbox`
(an empty working folder of its own; the notebook file itself never enters it), sends the
notebook's code cells one by one and returns ``cell_id -> CellOutcome`` (plus
``"note:<cell_id>"`` budget remarks). A cell passed when its ``execute_reply`` says ``ok``
*and* the kernel broadcast no error for it; everything else (an error reply, an error
broadcast, a timeout, a kernel that died) is a failure with a one-line message. A cell not
reached (the kernel died, or was stopped after a hang) has no outcome. Nothing is raised for
what a notebook does; `ExecutionError` only when this machine cannot start kernels at all.

Design decisions:
- The grading process drives the kernel itself over jupyter's messaging protocol
  (``jupyter_client``), reading the replies from the kernel's sockets: no outcome passes
  through a file, a pytest plugin or anything else the kernel could write to.
- Both signals are required: ``execute_reply.status == "ok"`` (what nbval never read; a
  custom exception handler, a silenced traceback or an exception IPython does not broadcast
  still gives an error reply) and no ``error`` message on iopub.
- Before each grader or read-only cell, `kernel_reset.reset` puts back IPython's error
  machinery, transformers, hooks and builtins (through the reply's ``user_expressions``,
  which no input transformer touches); its token must come back, else the grader fails
  with a message saying the notebook changed the kernel's machinery. Grader cells run with
  ``store_history=False``, so later student cells cannot read their text from ``In``.
- Channels are Unix sockets (``ipc``) in the working folder, so a kernel with no network
  is still reachable; messages over `MAX_MESSAGE_BYTES` are refused by the sockets, so one
  huge ``print`` cannot blow up the grader's memory. Output is counted, never kept: past
  ``config.output_cap`` bytes for a cell a note says what was dropped.
- A cell past ``config.cell_timeout`` is interrupted (an ``interrupt_request`` on the
  control channel); if no reply comes within `INTERRUPT_GRACE` seconds, the sandbox is
  killed and the notebook stops there. Before each cell, a notebook past
  ``config.notebook_timeout`` fails its remaining cells with the budget's message.
- The kernel's environment is built, not inherited: a short allow-list of the grader's
  variables (locale, threads, CUDA/Triton switches), never credentials, plus
  ``config.env``; its home and caches are the working folder. Its ``PYTHONPATH`` is the
  package's folder and the grader's own ``PYTHONPATH`` folders (`extra_import_paths`).
"""

from __future__ import annotations

import os
import queue
import re
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .budgets import human_bytes, notebook_timeout_message
from .errors import ExecutionError
from .kernel_reset import TOKEN
from .markers import is_grader, is_readonly
from .outcome import CellOutcome
from .sandbox import Sandbox, extra_import_paths, package_root

__all__ = ["INTERRUPT_GRACE", "MAX_MESSAGE_BYTES", "run_notebook"]

INTERRUPT_GRACE = 10.0  # seconds an interrupted cell has to reply before the kernel is killed
IDLE_GRACE = 2.0  # seconds of iopub silence after the reply that count as the end of a cell
MAX_MESSAGE_BYTES = 16 << 20  # larger messages from the kernel are refused by the socket
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning|Quit|Group)\b")
MAX_MESSAGE = 500
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
_RESET = "__import__('mlinfra_lab.grading.kernel_reset', fromlist=['reset']).{}()"


def kernel_env(workdir: Path, extra: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The kernel's whole environment (see the module docstring)."""
    env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "HOME": str(workdir),
            "IPYTHONDIR": str(workdir / ".ipython"),
            "MPLCONFIGDIR": str(workdir / ".matplotlib"),
            "PYTHONNOUSERSITE": "1",
            "PYTHONPATH": os.pathsep.join([str(package_root()), *extra_import_paths()]),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "JUPYTER_PLATFORM_DIRS": "1",
        }
    )
    env.update(dict(extra))
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


class _Kernel:
    """One sandboxed kernel and the client that talks to it."""

    def __init__(self, workdir: Path, config: Any, sandbox: Sandbox, slot: int) -> None:
        import zmq
        from jupyter_client import BlockingKernelClient
        from jupyter_client.connect import write_connection_file

        self.sandbox, self.slot = sandbox, slot
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
                argv, workdir, kernel_env(workdir, config.env), log, config.memory_limit, slot
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


class _Reply:
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


def _execute(
    kernel: _Kernel,
    code: str,
    timeout: float,
    store_history: bool = True,
    user_expressions: dict[str, str] | None = None,
) -> tuple[_Reply, str]:
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
    got, state = _Reply(), "done"
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


def _expression_ok(reply: _Reply, name: str) -> bool:
    result = ((reply.reply or {}).get("user_expressions") or {}).get(name) or {}
    return result.get("status") == "ok" and TOKEN in str(result.get("data", {}).get("text/plain"))


def run_notebook(
    path: Path,
    config: Any,
    sandbox: Sandbox,
    slot: int,
    workdir: Path,
    on_cell: Callable[[CellOutcome], None] | None = None,
) -> dict[str, CellOutcome]:
    """Run the code cells of notebook `path` in `sandbox` (see the module docstring)."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if c.get("cell_type") == "code"]
    results: dict[str, CellOutcome] = {}

    def record(outcome: CellOutcome) -> None:
        key = outcome.cell_id or f"#{outcome.cell_num}"
        results[f"note:{key}" if outcome.outcome == "note" else key] = outcome
        if on_cell is not None and outcome.outcome != "note":
            on_cell(outcome)

    sandbox.prepare(workdir, slot)
    kernel = _Kernel(workdir, config, sandbox, slot)
    try:
        problem = kernel.start(config.startup_timeout)
        if problem is None:
            ready, _ = _execute(
                kernel,
                "",
                config.startup_timeout,
                store_history=False,
                user_expressions={"r": _RESET.format("snapshot")},
            )
            if not _expression_ok(ready, "r"):
                problem = "the grading kernel could not be prepared (kernel_reset.snapshot)"
        if problem is not None:
            if "No module named ipykernel" in problem:
                raise ExecutionError(
                    f"cannot start a grading kernel here: {problem}; "
                    "install ipykernel in this environment"
                )
            for num, cell in enumerate(cells):
                record(CellOutcome(cell.get("id"), num, "failed", f"not run: {problem}"))
            return results
        started = time.monotonic()
        for num, cell in enumerate(cells):
            cell_id = cell.get("id")
            if config.notebook_timeout and time.monotonic() - started > config.notebook_timeout:
                for later in range(num, len(cells)):
                    record(
                        CellOutcome(
                            cells[later].get("id"),
                            later,
                            "failed",
                            notebook_timeout_message(config.notebook_timeout),
                        )
                    )
                break
            trusted = is_grader(cell) or is_readonly(cell)
            if trusted:
                reset, state = _execute(
                    kernel,
                    "",
                    config.cell_timeout,
                    store_history=False,
                    user_expressions={"r": _RESET.format("reset")},
                )
                if state == "dead":
                    break
                if not _expression_ok(reset, "r"):
                    record(
                        CellOutcome(
                            cell_id,
                            num,
                            "failed",
                            "not run: grading could not restore the kernel before "
                            "this cell (the notebook changed IPython's machinery)",
                        )
                    )
                    continue
            got, state = _execute(
                kernel, cell.source, config.cell_timeout, store_history=not trusted
            )
            if config.output_cap and got.printed > config.output_cap:
                record(
                    CellOutcome(
                        cell_id,
                        num,
                        "note",
                        f"output truncated: code cell {num} printed more than "
                        f"{human_bytes(config.output_cap)}; grading dropped the "
                        f"rest ({human_bytes(got.printed - config.output_cap)})",
                    )
                )
            if state == "dead":
                if got.reply is None:
                    why = (
                        "the kernel died while this cell ran (it crashed, was killed or "
                        "ran out of memory)"
                        if not kernel.alive
                        else f"Timeout of {config.cell_timeout:g} seconds exceeded, and the "
                        "cell did not stop when interrupted: the kernel was stopped"
                    )
                    record(CellOutcome(cell_id, num, "failed", why))
                break
            status = (got.reply or {}).get("status")
            if state == "interrupted":
                record(
                    CellOutcome(
                        cell_id,
                        num,
                        "failed",
                        f"Timeout of {config.cell_timeout:g} seconds exceeded: "
                        "the cell was interrupted",
                    )
                )
            elif status == "ok" and got.error is None:
                record(CellOutcome(cell_id, num, "passed", ""))
            else:
                detail = got.error or (got.reply if status == "error" else None)
                message = (
                    error_message(detail)
                    if detail
                    else f"the kernel replied {status!r} instead of 'ok'"
                )
                record(CellOutcome(cell_id, num, "failed", message))
    finally:
        kernel.stop()
    return results
