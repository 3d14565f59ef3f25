"""Run one notebook cell by cell in a sandboxed kernel; judge each cell by the kernel's reply.

Contract: ``run_notebook(path, config, sandbox, slot, workdir)`` starts a fresh kernel in `sandbox`
(an empty working folder of its own; the notebook file itself never enters it), sends the
notebook's code cells one by one and returns ``cell_id -> CellOutcome`` (plus
``"note:<cell_id>"`` budget remarks). A cell passed when its ``execute_reply`` says ``ok``
*and* the kernel broadcast no error for it; everything else (an error reply, an error
broadcast, a timeout, a kernel that died) is a failure with a one-line message. A cell not
reached (the kernel died, or was stopped after a hang) has no outcome. Nothing is raised for
what a notebook does; `ExecutionError` only when this machine cannot start kernels at all.

Design decisions:
- nbval's cell semantics, held more strictly: under ``pytest --nbval-lax`` a cell fails when
  it raises and no output is compared, and so here; nbval's own markers (``NBVAL_SKIP``, a
  ``raises-exception`` tag) are not honoured: every cell runs, and a grader that raises
  fails. The restored notebook (`restored`) reruns a submission's visible tests under nbval
  itself, with those markers neutralised.
- The grading process drives the kernel itself over jupyter's messaging protocol
  (``jupyter_client``), reading the replies from the kernel's sockets, instead of running
  nbval: no outcome passes through a file, a pytest plugin or anything else the kernel
  could write to, and the runner can do what nbval does not (the two signals below, the
  kernel reset, the judge, the budgets).
- Both signals are required: ``execute_reply.status == "ok"`` (what nbval never read; a
  custom exception handler, a silenced traceback or an exception IPython does not broadcast
  still gives an error reply) and no ``error`` message on iopub.
- Before each grader or read-only cell, `kernel_reset.reset` puts back IPython's error
  machinery, transformers, hooks and builtins (through the reply's ``user_expressions``,
  which no input transformer touches); its token must come back, else the grader fails
  with a message saying the notebook changed the kernel's machinery. Grader cells run with
  ``store_history=False``, so later student cells cannot read their text from ``In``.
- With `judge_texts`, each of those graders is also judged (`judge.Judge`): a second kernel,
  which never runs the student's code, re-runs the grader's checks on the values the
  student's functions returned in the first. A grader passes only when it passed in both;
  a failure only the judge saw starts with `JUDGED`.
- A failed grader's message is the judge's where the judge failed it too (made of the
  grader's words, see `judge`), and always passes `messages.failure_message`: one capped,
  escaped line, withheld when it quotes the grader's hidden tests.
- Channels are Unix sockets (``ipc``) in the working folder, so a kernel with no network
  is still reachable; messages over `MAX_MESSAGE_BYTES` are refused by the sockets, so one
  huge ``print`` cannot blow up the grader's memory. Output is counted, never kept: past
  ``config.output_cap`` bytes for a cell a note says what was dropped.
- A cell past ``config.cell_timeout`` is interrupted (an ``interrupt_request`` on the
  control channel); if no reply comes within `INTERRUPT_GRACE` seconds, the sandbox is
  killed and the notebook stops there. Before each cell, a notebook past
  ``config.notebook_timeout`` fails its remaining cells with the budget's message.
- The grading secret never reaches a kernel: the kernels get the seed table of
  the notebook's graders instead (`secret.seed_table`); `kernel_client.kernel_env` drops the
  secret's variable whatever the caller passes.
- The kernel's environment is built, not inherited: a short allow-list of the grader's
  variables (locale, threads, CUDA/Triton switches), never credentials, plus
  ``config.env``; its home and caches are the working folder. Its ``PYTHONPATH`` is the
  package's folder and the grader's own ``PYTHONPATH`` folders (`extra_import_paths`).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .budgets import (
    human_bytes,
    notebook_timeout_message,
    overrun_message,
    overrun_rest_message,
)
from .errors import ExecutionError
from .judge import Judge
from .judge_names import python_text
from .kernel_client import (
    INTERRUPT_GRACE,
    MAX_MESSAGE_BYTES,
    Kernel,
    Reply,
    error_message,
    execute,
    expression_ok,
    kernel_env,
)
from .kernel_reset import TOKEN
from .markers import is_grader, is_readonly
from .messages import failure_message, student_text
from .outcome import CellOutcome
from .sandbox import Sandbox
from .secret import SECRET_ENV, SEEDS_ENV, current_secret, seed_table, seeded_names

__all__ = ["INTERRUPT_GRACE", "JUDGED", "MAX_MESSAGE_BYTES", "kernel_env", "run_notebook"]

JUDGED = "judged outside your kernel"  # the prefix of a failure only the judge saw
_RECORD_DONE = "__import__('mlinfra_lab.grading.judge_record', fromlist=['disarm']).disarm()"
_RESET = "__import__('mlinfra_lab.grading.kernel_reset', fromlist=['reset']).{}()"


def _seeds(cells: list[Any], secret: str) -> str:
    """The seed table of a notebook's grader cells (see `secret`): their exercises and the
    names their text seeds with."""
    names: set[str] = set()
    for cell in cells:
        if is_grader(cell):
            exercise = cell.get("metadata", {}).get("exercise")
            names |= {exercise} if isinstance(exercise, str) else set()
            names |= seeded_names(python_text(cell.source))
    return seed_table(names, secret)


def _judge_env(config: Any, cells: list[Any]) -> tuple[tuple[str, str], ...]:
    """The kernels' extra environment: ``config.env`` without the grading secret, the seed
    table derived from it, and one hash seed for both kernels."""
    secret = dict(config.env).get(SECRET_ENV) or current_secret()
    env = tuple((k, v) for k, v in config.env if k not in (SECRET_ENV, SEEDS_ENV))
    env = (*env, (SEEDS_ENV, _seeds(cells, secret)))
    if any(k == "PYTHONHASHSEED" for k, _ in env) or "PYTHONHASHSEED" in os.environ:
        return env
    return (*env, ("PYTHONHASHSEED", str(secrets.randbelow(2**32))))


def run_notebook(
    path: Path,
    config: Any,
    sandbox: Sandbox,
    slot: int,
    workdir: Path,
    on_cell: Callable[[CellOutcome], None] | None = None,
    judge_texts: Mapping[str, str] | None = None,
) -> dict[str, CellOutcome]:
    """Run the code cells of notebook `path` in `sandbox` (see the module docstring);
    `judge_texts` (grader cell id -> judge text) turns the judge on for those graders."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if c.get("cell_type") == "code"]
    results: dict[str, CellOutcome] = {}
    judge_texts = dict(judge_texts or {})

    def record(outcome: CellOutcome) -> None:
        key = outcome.cell_id or f"#{outcome.cell_num}"
        results[f"note:{key}" if outcome.outcome == "note" else key] = outcome
        if on_cell is not None and outcome.outcome != "note":
            on_cell(outcome)

    def stopped_at(num: int) -> bool:
        """Whether the sandbox ran into a cap while cell `num` ran; if so, that cell and
        every later one are recorded as failed with the budget's message."""
        over = sandbox.overrun(slot)
        if over is None:
            return False
        limit = config.memory_limit if over == "memory" else config.max_procs
        detail = sandbox.overrun_detail(slot)
        record(
            CellOutcome(cells[num].get("id"), num, "failed", overrun_message(over, limit, detail))
        )
        for later in range(num + 1, len(cells)):
            rest = overrun_rest_message(over)
            record(CellOutcome(cells[later].get("id"), later, "failed", rest))
        return True

    # -- a fresh sandbox, its kernel (and the judge's), the kernel's machinery snapshotted ----
    env = _judge_env(config, cells)
    sandbox.prepare(workdir, slot)
    kernel = Kernel(workdir, config, sandbox, slot, env)
    judge = None
    try:
        if judge_texts:
            judge = Judge(workdir.with_name(workdir.name + "-judge"), config, sandbox, slot, env)
        problem = kernel.start(config.startup_timeout)
        if problem is None:
            ready, _ = execute(
                kernel,
                "",
                config.startup_timeout,
                store_history=False,
                user_expressions={"r": _RESET.format("snapshot")},
            )
            if not expression_ok(ready, "r", TOKEN):
                problem = "the grading kernel could not be prepared (kernel_reset.snapshot)"
        if problem is not None and (over := sandbox.overrun(slot)) is not None:
            detail = sandbox.overrun_detail(slot)
            problem += f" (stopped at its {over} budget" + (f": {detail})" if detail else ")")
        if problem is not None:
            if "No module named ipykernel" in problem:
                raise ExecutionError(
                    f"cannot start a grading kernel here: {problem}; "
                    "install ipykernel in this environment"
                )
            for num, cell in enumerate(cells):
                record(CellOutcome(cell.get("id"), num, "failed", f"not run: {problem}"))
            return results
        if judge is not None:
            judge.start(config.startup_timeout)
        # -- the cells, one at a time, within the notebook's time budget ---------------------
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
            # a trusted cell (grader, read-only) gets the kernel's machinery back first; a
            # grader with a judge text is judged too
            trusted = is_grader(cell) or is_readonly(cell)
            judged = judge is not None and is_grader(cell) and cell_id in judge_texts
            judging = judge if judged else None  # the judge, where it judges this cell
            if judging is not None:
                text = judge_texts.pop(cell_id)  # the first cell with the id only
                names, record_path, prepare = judging.before(text, workdir, num)
            if trusted:
                expressions = {"r": _RESET.format("reset")}
                if judging is not None:
                    expressions["j"] = prepare
                reset, state = execute(
                    kernel,
                    "",
                    config.cell_timeout,
                    store_history=False,
                    user_expressions=expressions,
                )
                if state == "dead":
                    stopped_at(num)
                    break
                if not expression_ok(reset, "r", TOKEN):
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
            # the cell itself, then what the sandbox's caps and the reply say of it
            got, state = execute(
                kernel, cell.source, config.cell_timeout, store_history=not trusted
            )
            if stopped_at(num):  # a cap of the whole sandbox: stop here (see `budgets`)
                break
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
            outcome = _outcome(cell_id, num, got, state, config.cell_timeout)
            # a judged grader: the judge's second opinion, on the values the kernel recorded
            if judging is not None:
                execute(
                    kernel,
                    "",
                    config.cell_timeout,
                    store_history=False,
                    user_expressions={"d": _RECORD_DONE},
                )
                verdict = judging.check(text, names, record_path, config.cell_timeout)
                if outcome.outcome == "passed" and verdict is not None:
                    outcome = CellOutcome(cell_id, num, "failed", f"{JUDGED}: {verdict}")
                elif verdict is not None and judging.replayed:  # the student's exception
                    outcome = CellOutcome(cell_id, num, "failed", student_text(outcome.message))
                elif verdict is not None and not outcome.message.startswith("Timeout"):
                    outcome = CellOutcome(cell_id, num, "failed", verdict)  # the judge's words
            if trusted and not outcome.passed:
                outcome = CellOutcome(
                    cell_id, num, outcome.outcome, failure_message(outcome.message, cell.source)
                )
            record(outcome)
    finally:
        kernel.stop()
        if judge is not None:
            judge.stop()
    return results


def _outcome(cell_id: str | None, num: int, got: Reply, state: str, timeout: float) -> CellOutcome:
    """A cell's outcome from its reply (see the module docstring)."""
    status = (got.reply or {}).get("status")
    if state == "interrupted":
        return CellOutcome(
            cell_id,
            num,
            "failed",
            f"Timeout of {timeout:g} seconds exceeded: the cell was interrupted",
        )
    if status == "ok" and got.error is None:
        return CellOutcome(cell_id, num, "passed", "")
    detail = got.error or (got.reply if status == "error" else None)
    message = error_message(detail) if detail else f"the kernel replied {status!r} instead of 'ok'"
    return CellOutcome(cell_id, num, "failed", message)
