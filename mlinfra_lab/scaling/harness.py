"""The profiled DDP training loop one rank runs: per-step data wait, forward, backward, exposed
communication and optimizer time, with the bucket all-reduces timed by a DDP comm hook.

Contract: inside an initialised process group, `run_rank(config, out_trace=None)` trains the
course's model for `config.warmup + config.steps` steps and returns this rank's record (the
``ranks[i]`` entry of a result file). `python -m mlinfra_lab.scaling.harness --config C.json
--out RUN.json` does the same under a cluster's own ``torchrun``/``srun`` (it reads RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and rank 0 writes the whole result file.

Design decisions:
- Exposed communication is measured, not inferred from a profile: DDP calls the comm hook
  when a bucket's gradients are ready, so the last hook call marks the end of backward
  compute; ``loss.backward()`` returns only after every bucket's all-reduce finished, so
  what lies between the two is communication that compute did not hide. The union of the
  buckets' launch-to-completion intervals is the step's communication time (`comm_total`),
  from which the in-job bus bandwidth follows.
- On a GPU every boundary is a CUDA event on the compute stream (host timers would measure
  kernel launches, not kernels); on the CPU, `time.perf_counter`.
- Faults act at the points where the real ones act: a straggler computes longer, a slow
  source holds a lock shared by all ranks of the host, a capped transport delays the
  completion of each all-reduce, `no_overlap` puts all gradients in one bucket.
- With `RunConfig.stack_dump_s`, each step arms a `stacks.StackDumper`: a step that outlasts
  it dumps the rank's stacks, so a hang leaves one file per rank saying where each waits.
- The loader is also run alone for a few batches before training (step 1b of the course
  text): its rate, against the rate training consumes, is the loader's headroom.

- The profiler's start, steps, stop and export run inside `profiling.quiet_kineto`, so
  Kineto's progress lines (``USDT:... profiler_start``) never reach the notebook the ranks
  print into; each block is one profiler call, so the rest of the step's stderr is not held.

Caveats: the step-boundary synchronisation on a GPU costs a little overlap between steps;
the emulated device time of `RunConfig` is a sleep (see `config.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from mlinfra_lab.errors import MlinfraError
from mlinfra_lab.profiling import quiet_kineto
from mlinfra_lab.scaling.config import RunConfig
from mlinfra_lab.scaling.results import SCHEMA
from mlinfra_lab.scaling.stacks import StackDumper
from mlinfra_lab.scaling.workload import SyntheticBatches, build_model, shared_lock_path

__all__ = [
    "BackendError",
    "assemble",
    "build_parser",
    "environment",
    "main",
    "resolve_backend",
    "run_rank",
]

Heartbeat = Callable[[int, int], None]  # (step, phase index) -> None
PHASE_CODES = {"data": 0, "forward": 1, "backward": 2, "optimizer": 3, "done": 4}


class _Clock:
    """Timestamps: CUDA events on a GPU (resolved after a sync), perf_counter on the CPU."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


class _CommTimer:
    """State of the timing comm hook: bucket launches, completions and sizes of one step.

    With a rate cap (the emulated link, or `slow_transport`) the buckets share one link:
    each occupies it for its ring traffic at the capped rate, after the previous one.
    """

    def __init__(self, clock: _Clock, world_size: int, cap_bytes_per_s: float | None) -> None:
        self.clock, self.world_size, self.cap = clock, world_size, cap_bytes_per_s
        self.link_free_at = 0.0
        self.reset()

    def reset(self) -> None:
        self.buckets: list[list[Any]] = []  # [start mark, end mark, bytes]
        self.last_ready: Any = None

    def link_finish(self, nbytes: int, launched: float) -> float:
        """When a bucket launched at `launched` leaves the capped link (perf_counter s)."""
        assert self.cap is not None, "link_finish is for a capped link (cap_bytes_per_s set)"
        n = self.world_size
        wire = nbytes * 2 * (n - 1) / n / self.cap  # ring traffic per rank at the capped rate
        self.link_free_at = max(self.link_free_at, launched) + wire
        return self.link_free_at


class _Step(TypedDict):
    """One timed step of a rank's record (seconds; the keys `results.RunResult` reads)."""

    data_wait: float
    forward: float
    backward: float
    exposed_comm: float
    optimizer: float
    step: float
    comm_total: float
    buckets_s: list[list[float]]  # [start, end] of each bucket's all-reduce, from step start
    comm_bytes: float
    loss: float


def _timed_allreduce_hook(state: _CommTimer, bucket):  # noqa: ANN001 (DDP checks annotations)
    """DDP comm hook: average the bucket with all_reduce, recording when it started and ended.

    `bucket` is a `dist.GradBucket`; it is left unannotated because DDP rejects the string
    annotations that ``from __future__ import annotations`` produces.
    """
    tensor = bucket.buffer()
    start = state.clock.mark()
    state.last_ready = start
    record = [start, None, tensor.numel() * tensor.element_size()]
    state.buckets.append(record)
    capped = state.cap is not None and not state.clock.cuda
    finish_at = state.link_finish(record[2], start) if capped else 0.0
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def finish(f: torch.futures.Future) -> torch.Tensor:
        left = finish_at - time.perf_counter() if capped else 0.0
        if left > 0:  # one clock read: a second one, on a busy machine, can be past finish_at
            time.sleep(left)
        record[1] = state.clock.mark()
        return f.value()[0].div_(state.world_size)

    return fut.then(finish)


def environment() -> dict[str, Any]:
    """Device, versions and date, stored in every result file."""
    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "cpu_count": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def run_rank(
    config: RunConfig,
    out_trace: str | None = None,
    heartbeat: Heartbeat | None = None,
    stacks: StackDumper | None = None,
) -> dict[str, Any]:
    """Train on this rank and return its record: per-step phase times and loader rate.

    With `stacks`, every step is armed: a step that outlasts its `after_s` dumps the stacks.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    clock, beat = _Clock(cuda), heartbeat or (lambda step, phase: None)
    batch = config.rank_batch(world)
    slow = config.fault("slow_data")
    straggler = config.fault("straggler")
    straggle_s = straggler.get("ms") / 1e3 if straggler and straggler.get("rank") == rank else 0.0
    lost = config.fault("lost_rank")
    lost_step = int(lost.get("step", 1)) if lost and lost.get("rank") == rank else -1
    hang = config.fault("hang")
    hang_step = int(hang.get("step")) if hang and hang.get("rank") == rank else -1
    cap = config.link_bytes_per_s()

    model = build_model(config).to(device)
    bucket_mb = 1e4 if config.fault("no_overlap") else config.bucket_mb
    ddp = DDP(model, device_ids=[device.index] if cuda else None, bucket_cap_mb=bucket_mb)
    timer = _CommTimer(clock, world, cap)
    ddp.register_comm_hook(timer, _timed_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)

    total = config.warmup + config.steps
    data = SyntheticBatches(
        total + config.loader_probe_batches,
        batch,
        config.hidden,
        config.seed,
        rank,
        slow.get("ms") / 1e3 if slow else 0.0,
        shared_lock_path(),
        # The loader reads index probe + step at each step (in order, no shuffling).
        stuck_at=config.loader_probe_batches + hang_step if hang_step >= 0 else -1,
    )
    loader = iter(torch.utils.data.DataLoader(data, batch_size=None, shuffle=False))

    # Step 1b: the loader alone, all ranks at once (a shared source shows its limit here).
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(config.loader_probe_batches):
        next(loader)
    probe_s = time.perf_counter() - t0
    loader_rate = config.loader_probe_batches * batch / probe_s if probe_s > 0 else None
    dist.barrier()

    profiler = _profiler(cuda, config) if (config.trace and rank == 0 and out_trace) else None
    steps: list[_Step] = []
    with profiler or contextlib.nullcontext():
        for step in range(total):
            beat(step, PHASE_CODES["data"])
            if stacks is not None:
                stacks.arm()
            if step == lost_step:
                assert lost is not None, "lost_step is set only by a lost_rank fault"
                if lost.get("exit", 0.0):
                    os._exit(3)  # the lost rank dies, as a crashed node does
                time.sleep(10**6)  # the lost rank: alive but silent, as a hung node is
            wall0 = time.perf_counter()
            m0 = clock.mark()
            x, y = next(loader)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            m1 = clock.mark()
            beat(step, PHASE_CODES["forward"])
            loss = nn.functional.mse_loss(ddp(x), y)
            if straggle_s:
                time.sleep(straggle_s)
            m2 = clock.mark()
            beat(step, PHASE_CODES["backward"])
            timer.reset()
            loss.backward()
            m3 = clock.mark()
            beat(step, PHASE_CODES["optimizer"])
            opt.step()
            opt.zero_grad(set_to_none=True)
            m4 = clock.mark()
            if cuda:
                torch.cuda.synchronize()
            wall = time.perf_counter() - wall0
            if stacks is not None:
                stacks.disarm()
            if profiler is not None:
                profiler.step()
            if step < config.warmup:
                continue
            ready = timer.last_ready if timer.last_ready is not None else m3
            buckets = [[clock.seconds(m0, s), clock.seconds(m0, e)] for s, e, _ in timer.buckets]
            steps.append(
                {
                    "data_wait": clock.seconds(m0, m1),
                    "forward": clock.seconds(m1, m2),
                    "backward": clock.seconds(m2, ready),
                    "exposed_comm": clock.seconds(ready, m3),
                    "optimizer": clock.seconds(m3, m4),
                    "step": wall,
                    "comm_total": _busy(buckets),
                    "buckets_s": buckets,
                    "comm_bytes": float(sum(b for _, _, b in timer.buckets)),
                    "loss": float(loss.detach()),
                }
            )
    beat(total, PHASE_CODES["done"])
    record: dict[str, Any] = {
        "rank": rank,
        "batch": batch,
        "steps": steps,
        "loader_samples_per_s": loader_rate,
        "buckets": len(timer.buckets),
    }
    if profiler is not None and out_trace:
        from mlinfra_lab.scaling.trace import summarise_trace

        profiler.export_chrome_trace(out_trace)
        record["trace"] = {"path": os.path.basename(out_trace), **summarise_trace(out_trace)}
    return record


def _busy(intervals: list[list[float]]) -> float:
    """Length of the union of (start, end) intervals: time some all-reduce was in flight."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


class _QuietProfiler:
    """A `torch.profiler.profile` whose every call prints none of Kineto's progress lines:
    ``with``, `step` and `export_chrome_trace` each run inside `quiet_kineto`."""

    def __init__(self, profiler: Any) -> None:
        self._profiler = profiler

    def __enter__(self) -> _QuietProfiler:
        with quiet_kineto():
            self._profiler.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        with quiet_kineto():
            self._profiler.__exit__(*exc)

    def step(self) -> None:
        with quiet_kineto():
            self._profiler.step()

    def export_chrome_trace(self, path: str) -> None:
        with quiet_kineto():
            self._profiler.export_chrome_trace(path)


def _profiler(cuda: bool, config: RunConfig) -> _QuietProfiler:
    """A profiler that records the timed steps only: the warm-up steps are skipped (the
    last one warms the profiler up, its events discarded), as the phase medians skip them;
    it prints no Kineto progress lines (`_QuietProfiler`)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    warm = min(1, config.warmup)
    return _QuietProfiler(
        profile(
            activities=activities,
            record_shapes=True,
            schedule=schedule(
                wait=config.warmup - warm, warmup=warm, active=config.steps, repeat=1
            ),
        )
    )


def assemble(
    config: RunConfig, world_size: int, backend: str, ranks: list[dict[str, Any]]
) -> dict[str, Any]:
    """The result file's content from every rank's record."""
    ranks = sorted(ranks, key=lambda r: r["rank"])
    return {
        "schema": SCHEMA,
        "config": config.to_dict(),
        "world_size": world_size,
        "backend": backend,
        "rank_batch": config.rank_batch(world_size),
        "grad_bytes": sum(p.numel() * 4 for p in build_model(config).parameters()),
        "environment": environment(),
        "ranks": ranks,
    }


class BackendError(MlinfraError, ValueError):
    """The requested process-group backend cannot run this many ranks here."""


def resolve_backend(requested: str, ranks_per_host: int = 1) -> str:
    """ "auto" -> nccl when every local rank can have a GPU of its own, else gloo.

    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so two ranks on a one-GPU
    machine (a Colab, a laptop) run on gloo, on the CPU. Asking for nccl there raises.
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "auto":
        return "nccl" if 0 < ranks_per_host <= gpus else "gloo"
    if requested == "nccl" and ranks_per_host > gpus:
        raise BackendError(
            f"backend nccl needs one GPU per rank: {ranks_per_host} ranks, {gpus} GPU(s) here; "
            f"use backend='gloo' (or 'auto'), or at most {gpus} ranks"
        )
    if requested not in ("gloo", "nccl"):
        raise BackendError(f"unknown backend {requested!r}: use 'auto', 'gloo' or 'nccl'")
    return requested


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m mlinfra_lab.scaling.harness`` (cluster/torchrun.sh)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="RunConfig as JSON")
    parser.add_argument("--out", required=True, help="result file written by rank 0")
    parser.add_argument(
        "--stack-dir",
        help="where each rank writes rank<R>.stacks when config.stack_dump_s is set "
        "(default: OUT with the suffix .stacks, a folder)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point under an external launcher (torchrun, srun): env:// rendezvous."""
    args = build_parser().parse_args(argv)
    config = RunConfig.from_dict(json.loads(Path(args.config).read_text()))
    backend = resolve_backend(config.backend, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    from datetime import timedelta

    timeout = config.pg_timeout_s or config.timeout_s
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    stacks = None
    if config.stack_dump_s:
        folder = Path(args.stack_dir or Path(args.out).with_suffix(".stacks"))
        rank = dist.get_rank()
        stacks = StackDumper(folder / f"rank{rank}.stacks", rank, config.stack_dump_s)
    try:
        trace = str(Path(args.out).with_suffix(".trace.json")) if config.trace else None
        record = run_rank(config, out_trace=trace, stacks=stacks)
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, record)
        if dist.get_rank() == 0:
            result = assemble(config, dist.get_world_size(), backend, gathered)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(result, indent=1))
    finally:
        if stacks is not None:
            stacks.close()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
