"""Start N local ranks of a job, watch them, and name the rank that got lost.

Contract: `profile(config, nproc)` runs the profiled DDP loop on `nproc` local processes and
returns the `RunResult` (written to `out` when given); `run_allreduce_bench(nproc, sizes,
iters)` runs the all-reduce sweep the same way, and `compression.compression_bench` its
comm-hook measurement. A world size above the core count warns
(`OversubscribedWarning`) and still runs; a rank that dies or stops making progress for
`config.timeout_s` ends the job with `RankLostError` naming it. With
`config.stack_dump_s` every rank dumps its stacks when a step outlasts it (and when the
launcher asks, on a failure), and a failure raises `RankHungError`, whose verdict names the
rank stuck outside a collective from those dumps.

Design decisions:
- `torch.multiprocessing` with the *forkserver* start method and torch preloaded: each
  rank is forked from a server that imported torch once, so starting four ranks costs
  well under a second instead of four torch imports. The ranks rendezvous through env://
  exactly as under torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), so the same
  worker runs under a cluster's launcher (`python -m mlinfra_lab.scaling.harness`).
- The rendezvous store is the launcher's, as torchrun's agent holds it
  (``TORCHELASTIC_USE_AGENT_STORE``): a `TCPStore` bound to port 0 before any rank starts,
  so the port is ours from bind to the job's end. Picking a free port and letting rank 0
  bind it later races every other process on the machine for it (gloo's own connections
  included): under load rank 0 then dies in its rendezvous with the address in use.
- Each rank writes a heartbeat (step, phase, time) into shared memory at every phase. A
  lost rank blocks the others inside their next collective, further along than itself, so
  "who stopped" is the least advanced rank (then the first to go silent); the process
  group's own timeout is set longer than ours, so our message (with the rank, its step
  and phase) wins over gloo's anonymous one.
- A hang ends with the process group's timeout (`config.pg_timeout_s`, NCCL's watchdog on a
  GPU), and that timeout raises on the healthy ranks, which waited: the first rank to fail
  is a victim. With stack dumps armed, the launcher signals every live rank to dump once
  more and names the stuck rank from the dumps (`stacks.name_hung_rank`), not from the
  order of the errors.
- Each rank uses one intra-op thread: N ranks on a few cores must not each spawn a pool.
- Every rank is a daemon child, killed (SIGKILL) when the job ends in any way: no orphans.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from mlinfra_lab.errors import MlinfraError
from mlinfra_lab.scaling.config import RunConfig
from mlinfra_lab.scaling.results import RunResult, save_run, validate
from mlinfra_lab.scaling.stacks import (
    DUMP_SIGNAL,
    HangVerdict,
    NoStackDumpsError,
    StackDumper,
    name_hung_rank,
    read_stack_dumps,
)

__all__ = [
    "OversubscribedWarning",
    "RankHungError",
    "RankLostError",
    "profile",
    "run_allreduce_bench",
]

_PHASES = ("data", "forward", "backward", "optimizer", "done")


class OversubscribedWarning(UserWarning):
    """More ranks than CPU cores: the run works, but ranks share cores and slow each other."""


class RankLostError(MlinfraError, RuntimeError):
    """A rank died or stopped making progress; the message names it."""


class RankHungError(RankLostError):
    """A job failed and every rank's stack dump was read: `verdict` names the stuck rank."""

    def __init__(self, message: str, verdict: HangVerdict) -> None:
        super().__init__(message)
        self.verdict = verdict


def _agent_store(world: int, timeout_s: float) -> Any:
    """The job's rendezvous store, held by the launcher on a port the system chose."""
    from torch.distributed import TCPStore

    return TCPStore(
        "127.0.0.1",
        0,
        world,
        is_master=True,
        timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )


_FORWARDED = ("NCCL_", "GLOO_", "TORCH_", "NVSHMEM_", "CUDA_VISIBLE_DEVICES")


def _forwarded_env() -> dict[str, str]:
    """The communication settings of the launching process, as they are now."""
    return {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED)}


def _child(
    rank: int,
    world: int,
    port: int,
    job: str | Callable[[dict[str, Any]], Any],
    payload: dict[str, Any],
    outdir: str,
    beats: Any,
    timeout_s: float,
    env: dict[str, str],
    stack_dir: str | None = None,
) -> None:
    # The fork server was started with the environment of the first launch: replace its
    # communication settings with the launcher's current ones.
    for key in [k for k in os.environ if k.startswith(_FORWARDED) and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    os.environ.update(
        TORCHELASTIC_USE_AGENT_STORE="True",  # every rank a client of the launcher's store
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    import torch
    import torch.distributed as dist

    from mlinfra_lab.scaling import harness

    torch.set_num_threads(1)
    # Armed before the rendezvous, so a signal from the launcher always finds the handler.
    stacks = None
    if stack_dir is not None:
        stacks = StackDumper(
            Path(stack_dir, f"rank{rank}.stacks"), rank, float(payload["stack_dump_s"])
        )

    def beat(step: int, phase: int) -> None:
        beats[3 * rank : 3 * rank + 3] = [float(step), float(phase), time.time()]

    beat(-1, 0)
    backend = harness.resolve_backend(payload.get("backend", "auto"), world)
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    # By default longer than the watcher's timeout, so the watcher names the lost rank first.
    pg_timeout = payload.get("pg_timeout_s") or 2 * timeout_s + 30
    dist.init_process_group(backend, timeout=timedelta(seconds=pg_timeout))
    try:
        if job == "profile":
            config = RunConfig.from_dict(payload)
            trace = os.path.join(outdir, "trace.json") if config.trace and rank == 0 else None
            record: Any = harness.run_rank(config, out_trace=trace, heartbeat=beat, stacks=stacks)
        elif callable(job):  # a module-level function, pickled by name: its module imports us
            record = job(payload)
        else:
            from mlinfra_lab.scaling.allreduce import allreduce_bench

            record = allreduce_bench(
                payload["sizes"], payload["iters"], payload["warmup"], payload.get("link_mbps", 0.0)
            )
        Path(outdir, f"rank{rank}.json").write_text(json.dumps(record))
        beat(10**9, len(_PHASES) - 1)
        dist.barrier()
    except Exception:
        traceback.print_exc()
        raise
    finally:
        if stacks is not None:
            stacks.close()
        dist.destroy_process_group()


def _run_group(
    nproc: int,
    job: str | Callable[[dict[str, Any]], Any],
    payload: dict[str, Any],
    timeout_s: float,
    total_steps: int,
    show_progress: bool,
) -> list[Any]:
    import torch.multiprocessing as mp

    from mlinfra_lab.scaling.harness import resolve_backend

    if nproc < 1:
        raise ValueError(f"nproc must be at least 1, got {nproc}")
    # Resolved once, here: a bad request fails before any process starts, and every rank agrees.
    payload = {**payload, "backend": resolve_backend(payload.get("backend", "auto"), nproc)}
    cores = os.cpu_count() or 1
    if nproc > cores and payload["backend"] != "nccl":
        warnings.warn(
            f"{nproc} ranks on {cores} CPU cores: ranks will share cores and timings include "
            f"that contention; use --nproc {cores} or fewer for clean numbers",
            OversubscribedWarning,
            stacklevel=3,
        )
    ctx = mp.get_context("forkserver")
    # DDP's constructor imports torch._dynamo (seconds): import it once, in the server.
    ctx.set_forkserver_preload(
        ["torch", "torch.distributed", "torch._dynamo", "mlinfra_lab.scaling.harness"]
    )
    beats = ctx.Array("d", [-1.0, 0.0, 0.0] * nproc, lock=False)
    store = _agent_store(nproc, 2 * timeout_s + 30)
    port = store.port
    with tempfile.TemporaryDirectory(prefix="mlinfra-scaling-") as outdir:
        stack_dir = os.path.join(outdir, "stacks") if payload.get("stack_dump_s") else None
        env = _forwarded_env()
        procs = [
            ctx.Process(
                target=_child,
                args=(r, nproc, port, job, payload, outdir, beats, timeout_s, env, stack_dir),
                daemon=True,
            )
            for r in range(nproc)
        ]
        for p in procs:
            p.start()
        try:
            _watch(procs, beats, timeout_s, total_steps, show_progress)
        except RankLostError as err:
            if stack_dir is None:
                raise
            _request_dumps(procs, stack_dir)
            try:
                verdict = name_hung_rank(read_stack_dumps(stack_dir, nproc))
            except NoStackDumpsError:
                raise err from None
            raise RankHungError(
                f"{verdict.message}. (The launcher saw: {err} The first rank to fail is the "
                "first whose wait timed out, not the one it waited for.)",
                verdict,
            ) from err
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(5)
        records = [json.loads(Path(outdir, f"rank{r}.json").read_text()) for r in range(nproc)]
        trace = Path(outdir, "trace.json")
        if trace.exists() and job == "profile":
            records[0]["trace_text"] = trace.read_text()
    return records


def _request_dumps(procs: list[Any], stack_dir: str, wait_s: float = 5.0) -> None:
    """Ask every live rank for one more stack dump (SIGUSR1) and wait until it is written."""
    sizes = {}
    for rank, p in enumerate(procs):
        path = Path(stack_dir, f"rank{rank}.stacks")
        if p.is_alive() and path.exists() and path.stat().st_size > 0:  # handler registered
            sizes[rank] = path.stat().st_size
            os.kill(p.pid, DUMP_SIGNAL)

    def now() -> dict[int, int]:
        return {r: Path(stack_dir, f"rank{r}.stacks").stat().st_size for r in sizes}

    deadline, last = time.monotonic() + wait_s, None
    while sizes and time.monotonic() < deadline:
        current = now()
        # Every file grew, and none grew since the last look: the dumps are complete.
        if all(current[r] > n for r, n in sizes.items()) and current == last:
            return
        last = current
        time.sleep(0.1)


def _describe(beats: Any, rank: int) -> str:
    step, phase, _ = beats[3 * rank : 3 * rank + 3]
    if step < 0:
        return "before its first step"
    return f"at step {int(step)} ({_PHASES[min(int(phase), len(_PHASES) - 1)]})"


def _watch(
    procs: list[Any], beats: Any, timeout_s: float, total_steps: int, show_progress: bool
) -> None:
    from mlinfra_lab.progress import progress_bar

    nproc = len(procs)
    start = time.time()
    bar = progress_bar(
        total=total_steps, desc=f"{nproc} ranks", unit="step", leave=False, enabled=show_progress
    )
    try:
        while True:
            codes = [p.exitcode for p in procs]
            if all(c == 0 for c in codes):
                return
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                first = min(
                    failed, key=lambda r: (beats[3 * r], beats[3 * r + 1], beats[3 * r + 2])
                )
                raise RankLostError(
                    f"rank {first} exited with code {codes[first]} {_describe(beats, first)}; "
                    f"see its traceback above. The other ranks were stopped."
                )
            last = [beats[3 * r + 2] or start for r in range(nproc)]
            if time.time() - max(last) > timeout_s:
                # The others wait for it inside a collective, further along: the lost rank
                # is the least advanced (step, phase), and of those the first to go silent.
                lost = min(range(nproc), key=lambda r: (beats[3 * r], beats[3 * r + 1], last[r]))
                raise RankLostError(
                    f"rank {lost} stopped responding {_describe(beats, lost)}: no rank made "
                    f"progress for {timeout_s:g} s and rank {lost} is the least advanced. "
                    f"Check that host/process (or raise the timeout)."
                )
            done = int(min(beats[3 * r] for r in range(nproc)))
            bar.update(max(0, min(done, total_steps) - bar.n))
            time.sleep(0.05)
    finally:
        bar.close()


def profile(
    config: RunConfig, nproc: int, out: str | Path | None = None, show_progress: bool = True
) -> RunResult:
    """Run the profiled DDP loop on `nproc` local ranks; return (and optionally save) it."""
    from mlinfra_lab.scaling.harness import assemble, resolve_backend

    records = _run_group(
        nproc,
        "profile",
        config.to_dict(),
        config.timeout_s,
        config.warmup + config.steps,
        show_progress,
    )
    trace_text = records[0].pop("trace_text", None)
    if trace_text is not None and out is not None:
        records[0]["trace"]["path"] = Path(out).with_suffix(".trace.json").name
    result = validate(assemble(config, nproc, resolve_backend(config.backend, nproc), records))
    if out is not None:
        save_run(result, out)
        if trace_text is not None:
            Path(out).with_suffix(".trace.json").write_text(trace_text)
    return result


def run_allreduce_bench(
    nproc: int,
    sizes: list[int],
    iters: int = 10,
    warmup: int = 2,
    backend: str = "auto",
    timeout_s: float = 120.0,
    show_progress: bool = True,
    link_mbps: float = 0.0,
) -> list[dict[str, float]]:
    """The all-reduce sweep on `nproc` local ranks; rank 0's rows (see `allreduce_bench`)."""
    payload = {
        "sizes": list(sizes),
        "iters": iters,
        "warmup": warmup,
        "backend": backend,
        "link_mbps": link_mbps,
    }
    return _run_group(nproc, "allreduce", payload, timeout_s, 0, show_progress)[0]
