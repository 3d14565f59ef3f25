"""Gradient compression through DDP comm hooks, measured in bytes sent to the all-reduce.

Contract: `compression_bench(hooks, nproc)` trains the course's model for a few steps on
`nproc` local gloo ranks under each comm hook of `hooks` (names of `HOOKS`: the plain
all-reduce, PyTorch's `fp16_compress_hook` and `powerSGD_hook` at a chosen rank) and
returns one `CompressionRow` per hook: the bytes each rank handed to all-reduces in one
step, the number of those calls, what a ring sends per rank for them, the ratio against
the uncompressed gradients, and the relative error of the averaged gradient. Inside a
process group, `measure_hook(name, config)` is the same for one hook on this rank.

Design decisions:
- Bytes are counted, not computed from the hook's documentation: `counting_hook(inner)`
  wraps any hook with DDP's signature, and while it is installed every tensor passed to
  `torch.distributed.all_reduce` is counted (PowerSGD issues its second all-reduce, of the
  Q factors, from a future's callback, after the hook has returned, so counting inside the
  hook call alone would miss it). The wrapper also records each bucket's uncompressed size,
  the baseline, from the same run. The plain all-reduce is PyTorch's `allreduce_hook`, the
  Python twin of DDP's built-in reduction, so all hooks are counted the same way.
- "On the wire" is the ring all-reduce's traffic: each rank sends 2(p-1)/p times the
  payload (`ring_wire_bytes`); gloo and NCCL may pick other algorithms, with the same
  payload.
- Accuracy is measured too: the exact average of the ranks' gradients (an uncompressed,
  uncounted all-reduce of a plain copy of the model's gradients on the same batch) against
  what DDP left in `.grad` under the hook. PowerSGD keeps an error-feedback memory, so its
  one-step error overstates what training loses; the measured step is the first after
  `POWERSGD_START` plain ones (PowerSGD needs two with error feedback, and DDP rebuilds its
  buckets after the first).
- The model is `build_model` without the emulated device time: bytes do not depend on it.
- All gradients go in one bucket (`ONE_BUCKET_MB`). PowerSGD's callbacks block a gloo
  worker thread while they wait for their next all-reduce; with more buckets in flight than
  gloo has threads (two) every thread waits and the step deadlocks (observed with the four
  buckets of `RunConfig`'s default). NCCL has no such limit; the bytes are the same.

Caveats: the counter patches `torch.distributed.all_reduce` in the rank process for the
duration of the measurement; it is meant for a dedicated process such as a rank of
`compression_bench`, not for a training job that runs other collectives concurrently.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from mlinfra_lab.errors import MlinfraError
from mlinfra_lab.scaling.config import RunConfig

if TYPE_CHECKING:  # torch is imported where it is used: importing this module stays cheap
    import torch

__all__ = [
    "HOOKS",
    "CompressionRow",
    "UnknownHookError",
    "compression_bench",
    "count_allreduce_bytes",
    "counting_hook",
    "measure_hook",
    "ring_wire_bytes",
]

HOOKS = ("allreduce", "fp16", "powersgd-1", "powersgd-4")  # powersgd-R: rank-R approximation
POWERSGD_START = 2  # plain all-reduce steps before PowerSGD starts (2 is its minimum)
ONE_BUCKET_MB = 1e4  # a bucket cap larger than the model: one bucket (see the docstring)


class UnknownHookError(MlinfraError, ValueError):
    """A hook name that is neither "allreduce", "fp16" nor "powersgd-R" with R >= 1."""


@dataclass(frozen=True)
class CompressionRow:
    """What one hook sent in one step, per rank, and what it cost in accuracy."""

    hook: str
    world_size: int
    gradient_bytes: int  # the uncompressed gradients: what the buckets held
    sent_bytes: int  # payload handed to all-reduce calls in the step
    calls: int  # all-reduce calls in the step (each pays the latency alpha)
    wire_bytes: float  # what a ring all-reduce sends per rank for that payload
    relative_error: float  # |averaged grad - exact average| / |exact average|

    @property
    def ratio(self) -> float:
        """Uncompressed bytes over sent bytes: 2 for fp16, much more for PowerSGD."""
        return self.gradient_bytes / self.sent_bytes if self.sent_bytes else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


def ring_wire_bytes(payload: float, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of `payload` bytes: 2(p-1)/p x payload."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    return 2 * (world_size - 1) / world_size * payload


class _Count:
    """Bytes and calls seen by the counting all-reduce; callbacks may run on gloo's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.bytes = self.calls = self.bucket_bytes = 0

    def add(self, nbytes: int, bucket: bool = False) -> None:
        with self._lock:
            if bucket:
                self.bucket_bytes += nbytes
            else:
                self.bytes += nbytes
                self.calls += 1


@contextlib.contextmanager
def count_allreduce_bytes() -> Iterator[_Count]:
    """Count the bytes and calls of every `torch.distributed.all_reduce` inside the block."""
    import torch.distributed as dist

    count, original = _Count(), dist.all_reduce

    def counting(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        count.add(tensor.numel() * tensor.element_size())
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counting
    try:
        yield count
    finally:
        dist.all_reduce = original


def counting_hook(inner: Callable[[Any, Any], Any], count: _Count) -> Callable[[Any, Any], Any]:
    """A DDP comm hook that records each bucket's uncompressed bytes, then calls `inner`.

    Register it with ``ddp.register_comm_hook(inner_state, counting_hook(inner, count))``
    inside `count_allreduce_bytes()`, which counts what `inner` actually sends.
    """

    def hook(state, bucket):  # noqa: ANN001 (DDP rejects string annotations)
        tensor = bucket.buffer()
        count.add(tensor.numel() * tensor.element_size(), bucket=True)
        return inner(state, bucket)

    return hook


def _hook_and_state(name: str, process_group: Any) -> tuple[Callable[[Any, Any], Any], Any]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    if name == "allreduce":
        return default.allreduce_hook, process_group
    if name == "fp16":
        return default.fp16_compress_hook, process_group
    if name.startswith("powersgd-") and name[9:].isdigit() and int(name[9:]) >= 1:
        state = powersgd.PowerSGDState(
            process_group=process_group,
            matrix_approximation_rank=int(name[9:]),
            start_powerSGD_iter=POWERSGD_START,
            random_seed=0,
        )
        return powersgd.powerSGD_hook, state
    raise UnknownHookError(
        f"unknown comm hook {name!r}: use one of {', '.join(HOOKS)} "
        "(powersgd-R for any rank R >= 1)"
    )


def _grad(p: torch.nn.Parameter) -> torch.Tensor:
    """The gradient of `p`, which every parameter has after the course model's backward."""
    assert p.grad is not None, "a parameter has no gradient: run backward() first"
    return p.grad


def measure_hook(name: str, config: RunConfig) -> CompressionRow:
    """On this rank of an initialised process group: one step's bytes under hook `name`."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from mlinfra_lab.scaling.workload import build_model

    hook, state = _hook_and_state(name, dist.group.WORLD)
    rank, world = dist.get_rank(), dist.get_world_size()
    quiet = replace(config, device_overhead_ms=0.0, device_us_per_sample=0.0)
    model = build_model(quiet)
    plain = build_model(quiet)  # same seed, same weights: the exact gradients' twin
    ddp = DDP(model, bucket_cap_mb=ONE_BUCKET_MB)
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + rank)
    with count_allreduce_bytes() as count:
        ddp.register_comm_hook(state, counting_hook(hook, count))
        for _ in range(POWERSGD_START + 1):  # the last step is the one measured
            x = torch.randn(config.batch, config.hidden, generator=gen)  # (B, hidden)
            y = torch.tanh(x.flip(1))
            plain.load_state_dict(model.state_dict())
            plain.zero_grad(set_to_none=True)
            ddp.zero_grad(set_to_none=True)
            nn.functional.mse_loss(plain(x), y).backward()
            count.reset()
            nn.functional.mse_loss(ddp(x), y).backward()
            sent, calls, bucket_bytes = count.bytes, count.calls, count.bucket_bytes
            exact = torch.cat([_grad(p).flatten() for p in plain.parameters()])
            dist.all_reduce(exact)  # inside the block, after reading the count: not counted
            exact /= world
            with torch.no_grad():  # a plain SGD step keeps the steps apart
                for p in model.parameters():
                    p.sub_(1e-2 * _grad(p))
    got = torch.cat([_grad(p).flatten() for p in model.parameters()])
    error = float((got - exact).norm() / exact.norm())
    return CompressionRow(
        hook=name,
        world_size=world,
        gradient_bytes=bucket_bytes,
        sent_bytes=sent,
        calls=calls,
        wire_bytes=ring_wire_bytes(sent, world),
        relative_error=error,
    )


def compression_bench(
    hooks: tuple[str, ...] = HOOKS,
    nproc: int = 2,
    config: RunConfig | None = None,
    show_progress: bool = False,
) -> list[CompressionRow]:
    """Each hook of `hooks` on `nproc` local gloo ranks; rank 0's rows, in order."""
    from mlinfra_lab.scaling.launch import _run_group

    config = replace(config or RunConfig(), backend="gloo")
    for name in hooks:
        _hook_and_state(name, None)  # a bad name fails here, before any process starts
    payload = {"hooks": list(hooks), "config": config.to_dict(), "backend": "gloo"}
    rows = _run_group(nproc, run_rank, payload, config.timeout_s, 0, show_progress)[0]
    return [CompressionRow(**r) for r in rows]


def run_rank(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The rank's side of `compression_bench` (called by the launcher)."""
    import torch

    config = RunConfig.from_dict(payload["config"])
    # powerSGD_hook calls torch.cuda.synchronize(bucket.device) whenever CUDA is available,
    # which raises for the CPU buckets measured here on a GPU machine (torch 2.11 to 2.13).
    # This rank process never touches the GPU, so it tells the hook there is none.
    torch.cuda.is_available = lambda: False
    return [asdict(measure_hook(name, config)) for name in payload["hooks"]]
