"""Mitigation policies: what the parameter server does with a gradient of staleness s.

Contract: a `Policy` tells the simulator (1) whether workers must wait so that no applied
update is staler than ``max_staleness`` (``mode="wait"``), (2) the factor ``scale(s)`` that
multiplies the learning rate of an update of staleness s (0 drops it), and (3) how to
``correct(grad, theta_now, theta_pulled)`` a gradient for its delay before it is applied.

The policies (one small frozen dataclass each, composed by the simulator):
- `Sync()`: every worker pulls the same version, the server waits for all of them and
  applies their average. Staleness 0, but every update waits for the slowest worker.
- `Async()`: apply every gradient as it arrives, whatever its staleness (Hogwild!-style).
- `BoundedStaleness(max_staleness, mode)`: stale synchronous parallel (Ho et al. 2013).
  ``"wait"``: a worker whose update would leave another worker's pending gradient staler than
  the bound waits (its compute is idle, never wasted); ``BoundedStaleness(0, "wait")`` is
  `Sync()`. ``"drop"``: a gradient staler than the bound is discarded and its worker re-pulls
  (no waiting, but the compute is wasted).
- `StalenessAwareLR(weight)`: scale the step by ``weight(s)``, by default ``1/(1+s)``
  (the course's worked example: s=10 applies 1/11 ~ 9%, s=1 applies 50%);
  `StalenessAwareLR.zhang()` is the lr/s rule of Zhang et al. 2016 (IJCAI,
  "Staleness-aware Async-SGD"), ``power_weight(p)`` the family ``(1+s)^-p`` whose steepness p
  trades bias against wasted straggler compute.
- `DelayCompensated(lam)`: DC-ASGD (Zheng et al. 2017, ICML): a first-order Taylor correction
  g(theta_now) ~ g + lam * g * g * (theta_now - theta_pulled), with g*g (element-wise) a
  cheap diagonal stand-in for the Hessian.
Momentum is the simulator's ``momentum`` argument; `theory.corrected_momentum` gives the
explicit momentum that accounts for the implicit momentum asynchrony adds.

Caveats: the weight functions are called once per update, in Python; keep them cheap. With n
workers, asynchronous staleness averages n - 1, so a "wait" bound below n - 1 turns much of a
run into synchronous rounds (correct, and slow: the chapter shows it).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mlinfra_lab.staleness.errors import StalenessConfigError

__all__ = [
    "Async",
    "BoundedStaleness",
    "DelayCompensated",
    "Policy",
    "StalenessAwareLR",
    "Sync",
    "inverse_staleness",
    "power_weight",
    "zhang_weight",
]


def inverse_staleness(s: int) -> float:
    """The course's down-weighting: 1 / (1 + s)."""
    return 1.0 / (1.0 + s)


def zhang_weight(s: int) -> float:
    """Zhang et al. 2016's lr / s rule (s = 0 keeps the full step)."""
    return 1.0 / max(s, 1)


def power_weight(steepness: float) -> Callable[[int], float]:
    """The family (1 + s) ** -steepness: 0 is plain Async, 1 the course's 1/(1+s)."""
    if not (math.isfinite(steepness) and steepness >= 0):
        raise StalenessConfigError(f"steepness must be finite and >= 0, got {steepness}")

    def weight(s: int) -> float:
        return (1.0 + s) ** -steepness

    weight.__name__ = f"(1+s)^-{steepness:g}"
    return weight


class Policy(abc.ABC):
    """What the server does with a gradient of staleness s (see the module docstring)."""

    max_staleness: int | None = None  # enforced by waiting when mode == "wait"
    mode: str = "none"  # "wait", "drop" or "none"

    @abc.abstractmethod
    def scale(self, staleness: int) -> float:
        """Factor on the learning rate for an update of this staleness; 0 drops it."""

    def correct(
        self, grad: torch.Tensor, theta_now: torch.Tensor, theta_pulled: torch.Tensor
    ) -> torch.Tensor:
        """The gradient to apply, given where it was computed and where the server is now."""
        return grad

    @property
    def label(self) -> str:
        return repr(self)


@dataclass(frozen=True)
class Async(Policy):
    """Apply every gradient as it arrives, at full weight."""

    def scale(self, staleness: int) -> float:
        return 1.0


@dataclass(frozen=True)
class Sync(Policy):
    """Synchronous data parallelism: average all workers' gradients of the same version."""

    max_staleness: int | None = field(default=0, init=False, repr=False)
    mode: str = field(default="wait", init=False, repr=False)

    def scale(self, staleness: int) -> float:
        return 1.0


@dataclass(frozen=True)
class BoundedStaleness(Policy):
    """Stale synchronous parallel: no applied update is staler than `max_staleness`."""

    max_staleness: int = 8
    mode: str = "wait"  # "wait": fast workers idle; "drop": too-stale gradients are discarded

    def __post_init__(self) -> None:
        if isinstance(self.max_staleness, bool) or not isinstance(self.max_staleness, int):
            raise StalenessConfigError(
                f"max_staleness must be an int >= 0, got {self.max_staleness!r}"
            )
        if self.max_staleness < 0:
            raise StalenessConfigError(
                f"max_staleness must be >= 0 (0 is synchronous training), got {self.max_staleness}"
            )
        if self.mode not in ("wait", "drop"):
            raise StalenessConfigError(f"mode must be 'wait' or 'drop', got {self.mode!r}")

    def scale(self, staleness: int) -> float:
        return 0.0 if self.mode == "drop" and staleness > self.max_staleness else 1.0


@dataclass(frozen=True)
class StalenessAwareLR(Policy):
    """Scale an update of staleness s by ``weight(s)`` (default 1 / (1 + s))."""

    weight: Callable[[int], float] = inverse_staleness
    name: str = ""  # shown in plots; defaults to the weight function's name

    def scale(self, staleness: int) -> float:
        w = float(self.weight(staleness))
        if not (math.isfinite(w) and w >= 0):
            raise StalenessConfigError(
                f"the weight function returned {w} for staleness {staleness}; "
                "it must return a finite value >= 0 (0 drops the update)"
            )
        return w

    @classmethod
    def zhang(cls) -> StalenessAwareLR:
        """The lr / s rule of Zhang et al. 2016."""
        return cls(zhang_weight, name="lr/s (Zhang et al. 2016)")

    @property
    def label(self) -> str:
        return self.name or f"StalenessAwareLR({getattr(self.weight, '__name__', 'weight')})"


@dataclass(frozen=True)
class DelayCompensated(Policy):
    """DC-ASGD: g + lam * g * g * (theta_now - theta_pulled) (Zheng et al. 2017)."""

    lam: float = 0.5  # variance-control parameter lambda of the paper

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise StalenessConfigError(f"lam must be finite and >= 0, got {self.lam}")

    def scale(self, staleness: int) -> float:
        return 1.0

    def correct(
        self, grad: torch.Tensor, theta_now: torch.Tensor, theta_pulled: torch.Tensor
    ) -> torch.Tensor:
        return grad + self.lam * grad * grad * (theta_now - theta_pulled)
