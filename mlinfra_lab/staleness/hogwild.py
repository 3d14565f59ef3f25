"""Real asynchronous training: processes updating shared-memory parameters, staleness measured.

Contract: ``run_hogwild(problem, workers, updates, lr, seed)`` starts `workers` processes
(torch.multiprocessing) that each loop: read the shared parameters, compute a real minibatch
gradient, apply it to the shared parameters; it returns a `HogwildResult` with the staleness
of every applied update as real processes produced it, to compare with the simulator's.

Design decisions:
- Parameters live in one shared-memory tensor; a shared version counter counts applied
  updates. Reads are lock-free (a worker may read a half-written vector, as in Hogwild!,
  Niu et al. 2011); the apply and the counter increment happen under one lock, so that the
  staleness (version at apply - version read before the pull) is counted exactly. The
  gradient computation, where the time goes, runs concurrently: that is where staleness comes
  from.
- ``slowdown`` adds a sleep per gradient to chosen workers, to make a straggler on purpose.
- Each process runs torch single-threaded. The "fork" start method is used where available
  (Linux: fast, nothing pickled), "spawn" elsewhere and wherever this process has already
  initialised CUDA (a GPU notebook has, when it printed its runtime): CUDA does not support
  a forked child of a CUDA process, and torch refuses to use it there. The problem must then
  be picklable, which the course's problems are. ``start_method`` overrides the choice.
- A worker that raises sends its traceback to the parent through a pipe before it exits;
  `run_hogwild` raises `HogwildWorkerError` quoting it, so a notebook shows the cause rather
  than an exit code.

Caveats: on a 2-core machine shared with other jobs, the OS scheduler decides who is slow, so
the distribution varies run to run: compare shapes, not exact counts. Time is wall-clock.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.multiprocessing as mp

from mlinfra_lab.errors import MlinfraError
from mlinfra_lab.staleness.errors import StalenessConfigError
from mlinfra_lab.staleness.problems import Problem

if TYPE_CHECKING:  # multiprocessing.synchronize fails to import where there is no sem_open
    from multiprocessing.connection import Connection
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Lock

__all__ = ["HogwildResult", "HogwildWorkerError", "run_hogwild"]


class HogwildWorkerError(MlinfraError, RuntimeError):
    """A worker process died; the message quotes its traceback (or says it gave none)."""


@dataclass(frozen=True, eq=False)
class HogwildResult:
    """Staleness and worker of each update applied by real processes, and the losses."""

    staleness: np.ndarray  # (U,) measured staleness of each applied update
    worker: np.ndarray  # (U,) the process that applied it
    initial_loss: float
    final_loss: float
    seconds: float  # wall-clock of the whole run (start-up included)
    workers: int
    lr: float
    seed: int


def _worker(rank: int, errors: Connection, *args: Any) -> None:  # args: `_loop`'s, after rank
    """Process entry point: run the loop; on an exception, send its traceback, exit 1."""
    try:
        _loop(rank, *args)
    except BaseException:
        errors.send((rank, traceback.format_exc()))
        raise
    finally:
        errors.close()


def _loop(
    rank: int,
    problem: Problem,
    theta: torch.Tensor,
    version: Synchronized[int],
    lock: Lock,
    staleness: torch.Tensor,
    who: torch.Tensor,
    updates: int,
    lr: float,
    seed: int,
    sleep_s: float,
) -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng([seed, rank])
    n, b = problem.num_examples, problem.batch_size
    while True:
        seen = version.value  # read before the pull: the pull sees at least this version
        pulled = theta.clone()
        if sleep_s > 0:
            time.sleep(sleep_s)
        grad, _ = problem.batched_grads(pulled[None], rng.integers(0, n, (1, b)))
        with lock:
            slot = version.value
            if slot >= updates:
                return
            staleness[slot] = slot - seen
            who[slot] = rank
            theta.sub_(lr * grad[0])
            version.value = slot + 1


def run_hogwild(
    problem: Problem,
    workers: int,
    updates: int = 400,
    lr: float = 0.1,
    seed: int = 0,
    slowdown: Sequence[float] | None = None,
    timeout: float = 120.0,
    start_method: str | None = None,
) -> HogwildResult:
    """Train `problem` with `workers` real processes sharing parameters; see the module doc.

    slowdown: optional seconds of sleep per gradient for each worker (a made straggler).
    start_method: "fork", "spawn" or "forkserver"; default: see the module docstring.
    Raises `StalenessConfigError` on bad arguments, `TimeoutError` if the processes do not
    finish within `timeout` seconds (they are terminated) and `HogwildWorkerError` with the
    worker's traceback if one fails.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise StalenessConfigError(f"workers must be an int >= 1, got {workers!r}")
    if updates < 1 or not (math.isfinite(lr) and lr > 0):
        raise StalenessConfigError(f"need updates >= 1 and a finite lr > 0; got {updates}, {lr}")
    sleeps = list(slowdown) if slowdown is not None else [0.0] * workers
    if len(sleeps) != workers or any(s < 0 for s in sleeps):
        raise StalenessConfigError(f"slowdown needs {workers} values >= 0, got {slowdown}")
    ctx = mp.get_context(start_method or _default_start_method())
    theta = problem.initial_params().share_memory_()
    staleness = torch.full((updates,), -1, dtype=torch.int64).share_memory_()
    who = torch.full((updates,), -1, dtype=torch.int64).share_memory_()
    version, lock = ctx.Value("q", 0), ctx.Lock()
    initial = problem.full_loss(theta)
    # warm up in the parent: first-call set-up of torch.func is then inherited, not repeated
    problem.batched_grads(theta[None].clone(), np.zeros((1, problem.batch_size), dtype=np.int64))
    start = time.perf_counter()
    procs, receivers = [], []
    for r in range(workers):
        receive, send = ctx.Pipe(duplex=False)
        args = (
            r,
            send,
            problem,
            theta,
            version,
            lock,
            staleness,
            who,
            updates,
            lr,
            seed,
            sleeps[r],
        )
        # typeshed's BaseContext (what get_context(str) returns) lacks Process; every
        # concrete start method's context has it.
        procs.append(ctx.Process(target=_worker, args=args, daemon=True))  # type: ignore[attr-defined]
        procs[-1].start()
        send.close()  # the child holds its own end; EOF reaches us when it exits
        receivers.append(receive)
    deadline = start + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.perf_counter()))
    if any(p.is_alive() for p in procs):
        for p in procs:
            p.terminate()
        raise TimeoutError(
            f"hogwild workers did not finish {updates} updates in {timeout:.0f} s; "
            "use fewer updates or a larger timeout"
        )
    try:
        if any(p.exitcode != 0 for p in procs):
            raise HogwildWorkerError(_failure_message(procs, receivers, ctx.get_start_method()))
    finally:
        for receive in receivers:
            receive.close()
    seconds = time.perf_counter() - start
    return HogwildResult(
        staleness=staleness.numpy().copy(),
        worker=who.numpy().copy(),
        initial_loss=initial,
        final_loss=problem.full_loss(theta),
        seconds=seconds,
        workers=workers,
        lr=lr,
        seed=seed,
    )


def _default_start_method() -> str:
    """ "fork" where available and safe (no CUDA context in this process), else "spawn"."""
    cuda_live = torch.cuda.is_available() and torch.cuda.is_initialized()
    return "fork" if "fork" in mp.get_all_start_methods() and not cuda_live else "spawn"


def _failure_message(procs: list, receivers: list, method: str) -> str:
    """What failed: each dead worker's traceback (its last lines), or its exit code alone."""
    parts = []
    for rank, (proc, receive) in enumerate(zip(procs, receivers, strict=True)):
        if proc.exitcode == 0:
            continue
        text = ""
        if receive.poll():
            try:
                text = receive.recv()[1]
            except EOFError:
                pass
        tail = "\n".join(text.strip().splitlines()[-6:]) if text else "(no traceback: killed?)"
        parts.append(f"worker {rank} exited with code {proc.exitcode} ({method}):\n{tail}")
    return "a hogwild worker failed:\n" + "\n".join(parts)
