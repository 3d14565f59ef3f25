"""An all_reduce_perf in the style of nccl-tests, and the alpha-beta fit of its timings.

Contract: inside an initialised process group, `allreduce_bench(sizes, iters)` times an
all-reduce of each message size and returns one row per size: bytes, seconds, algbw and
busbw (bytes/s); `fit_alpha_beta(rows)` fits ``time = latency + bytes * per_byte`` and, for a
world size of 2 or more, the ring model's per-step ``alpha`` and per-byte ``beta``.

Design decisions:
- The same definitions as nccl-tests (`doc/PERFORMANCE.md` there): algbw = bytes / time,
  busbw = algbw * 2(n-1)/n, the number comparable with the link's speed whatever n is.
- Timing: warm-up iterations, a barrier, then `iters` back-to-back all-reduces timed as one
  interval (CUDA events on a GPU), so the per-call launch cost is part of the latency, as
  in nccl-tests.
- The fit weights each point by 1/time (it minimises relative error): message sizes span
  six orders of magnitude, and an unweighted fit would ignore the small messages that
  carry the latency.

Caveats: at world size 1 an all-reduce moves no bytes over any link (busbw is 0); the sweep
then measures the call's fixed cost only.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["AlphaBetaFit", "allreduce_bench", "default_sizes", "fit_alpha_beta"]


def default_sizes(max_bytes: int = 256 * 2**20, min_bytes: int = 8, factor: int = 4) -> list[int]:
    """Message sizes from `min_bytes` to `max_bytes`, each `factor` times the last."""
    sizes, n = [], min_bytes
    while n <= max_bytes:
        sizes.append(n)
        n *= factor
    return sizes


def allreduce_bench(
    sizes: list[int], iters: int = 10, warmup: int = 2, link_mbps: float = 0.0
) -> list[dict[str, Any]]:
    """Time a float32 all-reduce (sum) of each size in `sizes` (bytes) on the current group.

    `link_mbps` (CPU only) emulates the same capped link as `RunConfig.link_mbps`: each
    all-reduce lasts at least its ring traffic at that rate.
    """
    import torch
    import torch.distributed as dist

    n = dist.get_world_size()
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    rows = []
    for nbytes in sizes:
        x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(x)
        dist.barrier()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(iters):
                dist.all_reduce(x)
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1e3 / iters
        else:
            wire = nbytes * 2 * (n - 1) / n / (link_mbps * 1e6 / 8) if link_mbps > 0 else 0.0
            t0 = time.perf_counter()
            for _ in range(iters):
                t = time.perf_counter()
                dist.all_reduce(x)
                left = wire - (time.perf_counter() - t)  # one clock read (see harness)
                if left > 0:
                    time.sleep(left)
            seconds = (time.perf_counter() - t0) / iters
        size = x.numel() * 4
        algbw = size / seconds
        rows.append(
            {
                "bytes": size,
                "time_s": seconds,
                "algbw": algbw,
                "busbw": algbw * 2 * (n - 1) / n,
                "world_size": n,
            }
        )
    return rows


@dataclass(frozen=True)
class AlphaBetaFit:
    """`time = latency_s + bytes * per_byte_s`; `alpha`/`beta` per ring step when n >= 2."""

    latency_s: float
    per_byte_s: float
    world_size: int | None
    alpha: float | None  # latency of one ring step: latency_s / (2(n-1))
    beta: float | None  # seconds per byte on one link: per_byte_s / (2(n-1)/n)
    max_rel_error: float  # worst relative residual of the fit over the points

    @property
    def bus_bandwidth(self) -> float | None:
        """1 / beta in bytes/s: the busbw the model reaches for very large messages."""
        return 1 / self.beta if self.beta else None

    def predict(self, nbytes: float) -> float:
        return self.latency_s + nbytes * self.per_byte_s

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_alpha_beta(results: list[dict[str, Any]], world_size: int | None = None) -> AlphaBetaFit:
    """Fit latency and per-byte cost to all-reduce timings (rows with `bytes`, `time_s`).

    Weighted least squares on relative error; both costs are kept non-negative (when noise
    tilts the line below zero, the better one-term fit is used). `world_size` defaults to
    the rows' own ``world_size``. Raises ValueError with fewer than two distinct sizes or
    non-positive times.
    """
    import numpy as np

    if not results:
        raise ValueError("fit_alpha_beta needs timings: rows with 'bytes' and 'time_s'")
    try:
        x = np.array([float(r["bytes"]) for r in results])
        t = np.array([float(r["time_s"]) for r in results])
    except (KeyError, TypeError) as err:
        raise ValueError(f"each row needs numeric 'bytes' and 'time_s' ({err})") from None
    if len(set(x.tolist())) < 2:
        raise ValueError("fit_alpha_beta needs at least two different message sizes")
    if (t <= 0).any():
        raise ValueError("all-reduce times must be positive")
    w = 1.0 / t  # minimise relative error
    design = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (latency, per_byte), *_ = np.linalg.lstsq(design, t * w, rcond=None)
    if latency < 0 or per_byte < 0:
        # Noisy timings (small messages on a busy machine) can tilt the line below zero;
        # a cost cannot be negative, so take the best fit with that term pinned at zero.
        latency, per_byte = min(
            (
                (float(np.sum(t * w * w) / np.sum(w * w)), 0.0),  # latency only
                (0.0, float(np.sum(x * t * w * w) / np.sum(x * x * w * w))),  # bandwidth only
            ),
            key=lambda c: float(np.sum(((c[0] + c[1] * x - t) * w) ** 2)),
        )
    predicted = latency + per_byte * x
    n = world_size or results[0].get("world_size")
    alpha = beta = None
    if n and n >= 2:
        alpha = float(latency) / (2 * (n - 1))
        beta = float(per_byte) / (2 * (n - 1) / n)
    return AlphaBetaFit(
        float(latency), float(per_byte), n, alpha, beta, float(np.max(np.abs(predicted - t) / t))
    )
