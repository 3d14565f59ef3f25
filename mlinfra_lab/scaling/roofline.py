"""The communication roofline of data parallelism: the per-GPU batch at which compute covers
the all-reduce.

Contract: `ComputeRate` is a GPU's compute time per step as a line in the per-GPU batch,
``t(b) = fixed_s + per_sample_s * b``, fitted to measured runs by `ComputeRate.fit`;
`critical_batch(rate, comm_s)` is the per-GPU batch b* at which that compute time equals an
all-reduce time `comm_s`. Below b* the step is communication-bound: even a perfect overlap
leaves communication exposed, and shrinking the batch per GPU (more GPUs at a fixed global
batch) makes it worse. Above b* compute can hide all of it.

Design decisions:
- The roofline of "How to Scale Your Model": data parallelism's compute per step grows with
  the per-device batch while its gradient all-reduce does not, so there is one batch where
  the two meet; the all-reduce time comes from a cost model (`Cluster.allreduce`,
  `StepModel.comm_time`) at the world size in question, since crossing the node boundary
  moves b*.
- A straight line, not a curve: a fixed cost per step (launches, weight reads, the
  optimizer) plus a cost per sample is what the course's harness measures at a few batch
  sizes; the fit weighs each point by 1/time (relative error), as `fit_alpha_beta` does.
- The whole step's compute is compared with the all-reduce. DDP can only hide communication
  under the backward pass, so the batch at which overlap really hides it is larger, by about
  1 / backward share; `critical_batch(..., window=2/3)` gives that one.

Caveats: the line holds between the batches it was fitted on; far above them a GPU saturates
(per-sample cost flattens), far below them launch overheads dominate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mlinfra_lab.errors import MlinfraError

__all__ = ["ComputeRate", "RooflineError", "critical_batch"]


class RooflineError(MlinfraError, ValueError):
    """Measurements or parameters the roofline cannot use."""


@dataclass(frozen=True)
class ComputeRate:
    """Compute time per step as a line in the per-GPU batch: ``fixed_s + per_sample_s * b``."""

    fixed_s: float  # seconds per step whatever the batch
    per_sample_s: float  # seconds per sample
    source: str = ""  # what it was fitted on (device, date)

    def __post_init__(self) -> None:
        if self.fixed_s < 0 or self.per_sample_s <= 0:
            raise RooflineError(
                f"need fixed_s >= 0 and per_sample_s > 0, got {self.fixed_s}, "
                f"{self.per_sample_s}: fit on runs whose compute grows with the batch"
            )

    def time(self, batch: float) -> float:
        """Compute seconds per step at a per-GPU batch of `batch` samples."""
        return self.fixed_s + self.per_sample_s * batch

    @classmethod
    def fit(cls, points: Sequence[tuple[float, float]], source: str = "") -> ComputeRate:
        """Fit the line to (per-GPU batch, compute seconds per step) points.

        The fit minimises relative error; a negative intercept is clipped to zero.
        """
        if len({b for b, _ in points}) < 2:
            raise RooflineError("fit a compute rate on at least two different batch sizes")
        if any(b <= 0 or t <= 0 for b, t in points):
            raise RooflineError(f"batches and times must be positive, got {points}")
        b = np.array([p[0] for p in points], dtype=float)
        t = np.array([p[1] for p in points], dtype=float)
        w = 1 / t
        design = np.stack([np.ones_like(b), b], axis=1) * w[:, None]
        (fixed, per_sample), *_ = np.linalg.lstsq(design, t * w, rcond=None)
        if fixed < 0:  # refit through the origin
            fixed, per_sample = 0.0, float(np.sum(w * w * b * t) / np.sum(w * w * b * b))
        if per_sample <= 0:
            raise RooflineError(
                "compute does not grow with the batch in these runs: measure a wider range of "
                f"batch sizes (got {sorted(b.tolist())})"
            )
        return cls(float(fixed), float(per_sample), source)

    @classmethod
    def from_runs(cls, runs: list[Any]) -> ComputeRate:
        """Fit on measured runs (`RunResult` or paths): forward + backward + optimizer."""
        from mlinfra_lab.scaling.results import load_run

        loaded = [load_run(r) for r in runs]
        points = []
        for run in loaded:
            b = run.breakdown()
            points.append((run.rank_batch, b["forward"] + b["backward"] + b["optimizer"]))
        env = loaded[0].data.get("environment", {}) if loaded else {}
        source = f"{env.get('device', '?')}, {str(env.get('date', '?'))[:10]}"
        return cls.fit(points, source=source)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def critical_batch(rate: ComputeRate, comm_s: float, window: float = 1.0) -> float:
    """The per-GPU batch at which ``window * compute`` equals the all-reduce time `comm_s`.

    `window` is the share of compute that can hide communication: 1 compares the whole step
    (the roofline), DDP's backward share (about 2/3) gives the batch above which overlap can
    hide the whole all-reduce. 0 when compute covers `comm_s` at any batch.
    """
    if comm_s < 0 or not math.isfinite(comm_s):
        raise RooflineError(f"comm_s must be a finite, non-negative time, got {comm_s}")
    if not 0 < window <= 1:
        raise RooflineError(f"window must lie in (0, 1], got {window}")
    return max(0.0, (comm_s / window - rate.fixed_s) / rate.per_sample_s)
