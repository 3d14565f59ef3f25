"""What the profiled job trains: the model with emulated device time, and its data source.

Contract: `build_model(config)` returns the course's model, `layers` x (Linear(hidden,
hidden) + ReLU + emulated device time); `SyntheticBatches` yields deterministic regression
batches, serialised through `shared_lock_path()` when a slow shared source is injected.

Design decisions:
- Emulated device time is an autograd function whose forward sleeps and whose backward
  sleeps twice as long (backward costs about two forwards). It sits in the graph, so the
  backward pass really interleaves with DDP's bucket all-reduces, as GPU kernels do.
- Data is generated per (seed, rank, index): reproducible, different on every rank, and
  cheap, so the loader's own cost is only what a fault injects.
- The `hang` fault blocks one read forever on an event nobody sets, as a read from a dead
  network file system blocks: the rank stays alive and silent inside a call, and a stack
  dump shows it in `_read_from_dead_mount`.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from typing import Any

import torch
from torch import nn

from mlinfra_lab.scaling.config import RunConfig

__all__ = ["SyntheticBatches", "build_model", "shared_lock_path"]


class _EmulatedDevice(torch.autograd.Function):
    """Identity whose forward sleeps `seconds` and backward twice that: accelerator time."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, seconds: float) -> torch.Tensor:
        ctx.seconds = seconds
        if seconds > 0:
            time.sleep(seconds)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if ctx.seconds > 0:
            time.sleep(2 * ctx.seconds)
        return grad, None


class _Layer(nn.Module):
    def __init__(self, hidden: int, overhead_ms: float, us_per_sample: float) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        self.overhead_s, self.per_sample_s = overhead_ms / 1e3, us_per_sample / 1e6

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, hidden)
        x = torch.relu(self.linear(x))
        seconds = self.overhead_s + self.per_sample_s * x.shape[0]
        return _EmulatedDevice.apply(x, seconds) if seconds > 0 else x


def build_model(config: RunConfig) -> nn.Module:
    """The course's model: `layers` x (Linear(hidden, hidden) + ReLU + emulated device time)."""
    torch.manual_seed(config.seed)
    return nn.Sequential(
        *[
            _Layer(config.hidden, config.device_overhead_ms, config.device_us_per_sample)
            for _ in range(config.layers)
        ]
    )


class SyntheticBatches(torch.utils.data.Dataset):
    """Synthetic regression batches, deterministic per (seed, rank, index).

    Under ``slow_data`` every read holds one lock file shared by all ranks of the host for
    `delay_s`: a single-process source that serialises its readers. Reading index
    `stuck_at` (the `hang` fault) never returns.
    """

    def __init__(
        self,
        n: int,
        batch: int,
        hidden: int,
        seed: int,
        rank: int,
        delay_s: float,
        lock_path: str,
        stuck_at: int = -1,
    ) -> None:
        self.n, self.batch, self.hidden, self.seed, self.rank = n, batch, hidden, seed, rank
        self.delay_s, self.lock_path, self.stuck_at = delay_s, lock_path, stuck_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i == self.stuck_at:
            _read_from_dead_mount()
        if self.delay_s > 0:
            with open(self.lock_path, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                time.sleep(self.delay_s)
                fcntl.flock(fh, fcntl.LOCK_UN)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.rank * 7919 + i)
        x = torch.randn(self.batch, self.hidden, generator=g)  # (B, hidden)
        return x, torch.tanh(x.flip(1))  # a learnable target


def _read_from_dead_mount() -> None:
    """Block forever, alive and silent, as a read from an unreachable file system does."""
    threading.Event().wait()


def shared_lock_path() -> str:
    """A lock file shared by every rank of one job on this host (keyed by the rendezvous)."""
    tag = f"{os.environ.get('MASTER_ADDR', 'local')}-{os.environ.get('MASTER_PORT', '0')}"
    return os.path.join(tempfile.gettempdir(), f"mlinfra-slow-data-{tag}.lock")
