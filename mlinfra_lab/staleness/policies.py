"""Mitigation policies: what the parameter server does with a gradient of staleness s.

Contract: a `Policy` tells the simulator (1) whether workers must wait, and by which rule:
no applied update staler than ``max_staleness`` updates (``mode="wait"``) or no worker more
than ``clock_bound`` iterations ahead of the slowest (``mode="clock"``, SSP), (2) the factor
``scale(s)`` that multiplies the learning rate of an update of staleness s (0 drops it), and
(3) how to ``correct(grad, theta_now, theta_pulled)`` a gradient for its delay before it is
applied.

Two bounds, two units. Staleness s counts *updates* (applied while a gradient was computed);
a clock counts a worker's own *iterations*. The literature bounds either:
- `SSP(s)`: stale synchronous parallel (Ho et al. 2013, NeurIPS): a worker at clock c may
  start its next iteration only if the slowest worker's clock is >= c - s, else it waits
  (the rule is `clocks.ClockGate`). ``SSP(0)`` is bulk-synchronous parallel (BSP): everyone
  waits for everyone at every clock; a bound at least as long as the run is plain `Async`.
  Each gradient is applied alone as it arrives (SSP's updates are additive), so one BSP round
  applies n gradients computed at the same parameters: ``SSP(0)`` with learning rate lr is
  `Sync()` (which averages) with lr * n. SSP bounds update staleness only through n:
  at most (n - 1)(2s + 1) (`clocks.update_staleness_bound`).
- `BoundedDelay(tau, mode)`: a bound on the delay in updates, the "maximum delay" of the
  asynchronous-SGD analyses (Lian et al. 2015, NeurIPS, bound T on a gradient's age).
  ``"wait"``: a worker whose update would leave another worker's pending gradient staler
  than tau waits (its compute is idle, never wasted). The decision is the pure function
  `delay_wait_group` (which held gradients to apply now), replaceable through ``wait_rule``
  (the lab has students write it). Workers at the bound pulled the same version and are
  averaged into one update, so ``BoundedDelay(0, "wait")`` is `Sync()` *in this simulator*;
  a server that applied each of them alone would, at tau = 0, admit one worker at a time.
  ``"drop"``: a gradient staler than tau is discarded and its worker re-pulls (no waiting,
  but the compute is wasted). `BoundedStaleness` is its former, deprecated name.

The other policies (one small frozen dataclass each, composed by the simulator):
- `Sync()`: every worker pulls the same version, the server waits for all of them and
  applies their average. Staleness 0, but every update waits for the slowest worker.
- `Async()`: apply every gradient as it arrives, whatever its staleness (Hogwild!-style).
- `StalenessAwareLR(weight)`: scale the step by ``weight(s)``, by default ``1/(1+s)``
  (the course's worked example: s=10 applies 1/11 ~ 9%, s=1 applies 50%);
  `StalenessAwareLR.zhang()` is the lr/s rule of Zhang et al. 2016 (IJCAI,
  "Staleness-aware Async-SGD"), ``power_weight(p)`` the family ``(1+s)^-p`` whose steepness p
  trades bias against wasted straggler compute.
  Staleness conventions: Zhang et al. stamp the weights with a scalar clock i (each update adds
  1) and a gradient with the stamp j of the weights it was computed from; its staleness is
  tau = i - j >= 0 when it reaches the server at stamp i. That counts the updates applied while
  it was computed, which is this simulator's s, so their alpha_0 / tau is lr / s with no shift
  (a fresh gradient, s = 0, keeps the full step). The course's 1/(1+s) is the same rule with s
  shifted by one: it is defined at s = 0 and halves the step at s = 1, where lr/s does not.
- `DelayCompensated(lam)`: DC-ASGD (Zheng et al. 2017, ICML): a first-order Taylor correction
  g(theta_now) ~ g + lam * g * g * (theta_now - theta_pulled), with g*g (element-wise) a
  cheap diagonal stand-in for the Hessian. ``adaptive=True`` is the paper's DC-ASGD-a:
  lam_t = lam / sqrt(m_t + eps) element-wise, with m_t = momentum * m_{t-1} + (1 - momentum)
  * g * g a running mean square of the gradients (from m_0 = 0, like RMSProp), which makes
  the correction insensitive to the gradients' scale.
Stateful corrections (DC-ASGD-a's m_t) live in the closure `Policy.make_corrector` returns,
one per simulation, so a policy object stays a frozen, reusable config.
Momentum is the simulator's ``momentum`` argument; `theory.corrected_momentum` gives the
explicit momentum that accounts for the implicit momentum asynchrony adds.

Caveats: the weight functions are called once per update, in Python; keep them cheap. With n
workers, asynchronous staleness averages n - 1, so a "wait" delay bound below n - 1 turns much
of a run into synchronous rounds (correct, and slow: the chapter shows it).
"""

from __future__ import annotations

import abc
import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from mlinfra_lab.staleness.errors import StalenessConfigError

__all__ = [
    "SSP",
    "Async",
    "BoundedDelay",
    "BoundedStaleness",
    "DelayCompensated",
    "Policy",
    "StalenessAwareLR",
    "Sync",
    "delay_wait_group",
    "inverse_staleness",
    "power_weight",
    "ssp_wait_group",
    "zhang_weight",
]

Corrector = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
WaitRule = Callable[[int, Sequence[int], Sequence[int], int], list[int]]


def inverse_staleness(s: int) -> float:
    """The course's down-weighting: 1 / (1 + s)."""
    return 1.0 / (1.0 + s)


def zhang_weight(s: int) -> float:
    """Zhang et al. 2016's alpha_0 / tau rule, 1 / s: their tau is our s (s = 0 keeps lr)."""
    return 1.0 / max(s, 1)


def power_weight(steepness: float) -> Callable[[int], float]:
    """The family (1 + s) ** -steepness: 0 is plain Async, 1 the course's 1/(1+s)."""
    if not (math.isfinite(steepness) and steepness >= 0):
        raise StalenessConfigError(f"steepness must be finite and >= 0, got {steepness}")

    def weight(s: int) -> float:
        return (1.0 + s) ** -steepness

    weight.__name__ = f"(1+s)^-{steepness:g}"
    return weight


def delay_wait_group(
    version: int, pulled: Sequence[int], held: Sequence[int], max_staleness: int
) -> list[int]:
    """The bounded-delay "wait" rule: which held gradients the server applies now.

    ``version`` is the server's version, ``pulled[w]`` the version worker w's pending
    gradient was computed at, ``held`` the workers whose gradients have arrived and wait, in
    arrival order. If the oldest pending gradient is already ``max_staleness`` behind, one
    more update would make it too stale: the workers that pulled that oldest version (the
    "limit group") are applied together once all of them have arrived, and until then
    nothing is ([] means wait). Otherwise the held gradient with the oldest pulled version
    (the first to arrive on a tie) is applied alone.
    """
    oldest = min(pulled)
    if version - oldest >= max_staleness:
        group = [w for w in range(len(pulled)) if pulled[w] == oldest]
        return group if all(w in held for w in group) else []
    return [min(held, key=lambda w: pulled[w])] if held else []


@functools.wraps(delay_wait_group)
def ssp_wait_group(
    version: int, pulled: Sequence[int], held: Sequence[int], max_staleness: int
) -> list[int]:
    """Deprecated name of `delay_wait_group` (the rule counts updates; SSP counts clocks)."""
    warnings.warn(
        "ssp_wait_group is renamed delay_wait_group: it bounds the delay in updates, "
        "while SSP (st.SSP) bounds the clock gap between workers",
        DeprecationWarning,
        stacklevel=2,
    )
    return delay_wait_group(version, pulled, held, max_staleness)


class Policy(abc.ABC):
    """What the server does with a gradient of staleness s (see the module docstring)."""

    max_staleness: int | None = None  # updates; enforced by waiting when mode == "wait"
    clock_bound: int | None = None  # clocks (iterations); enforced when mode == "clock"
    mode: str = "none"  # "wait", "drop", "clock" or "none"

    @abc.abstractmethod
    def scale(self, staleness: int) -> float:
        """Factor on the learning rate for an update of this staleness; 0 drops it."""

    def correct(
        self, grad: torch.Tensor, theta_now: torch.Tensor, theta_pulled: torch.Tensor
    ) -> torch.Tensor:
        """The gradient to apply, given where it was computed and where the server is now."""
        return grad

    def make_corrector(self) -> Corrector | None:
        """A fresh ``correct`` for one run (None: gradients are applied as they are)."""
        return None if type(self).correct is Policy.correct else self.correct

    def wait_group(self, version: int, pulled: Sequence[int], held: Sequence[int]) -> list[int]:
        """In "wait" mode: the held workers whose gradients to apply now (`delay_wait_group`)."""
        return delay_wait_group(version, pulled, held, self.max_staleness or 0)

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
class SSP(Policy):
    """Stale synchronous parallel (Ho et al. 2013): no worker more than `bound` clocks ahead.

    A worker that completed c iterations starts its next one only once the slowest worker
    has completed at least c - bound; until then it waits (idle). ``SSP(0)`` is BSP. Every
    gradient is applied alone, at full weight, as it arrives.
    """

    bound: int = 3  # clocks (iterations) the fastest worker may run ahead of the slowest
    mode: str = field(default="clock", init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.bound, bool) or not isinstance(self.bound, int) or self.bound < 0:
            raise StalenessConfigError(
                f"the SSP bound counts clocks: an int >= 0 (0 is bulk-synchronous), "
                f"got {self.bound!r}"
            )
        object.__setattr__(self, "clock_bound", self.bound)

    def scale(self, staleness: int) -> float:
        return 1.0

    @property
    def label(self) -> str:
        return f"SSP({self.bound})"


@dataclass(frozen=True)
class BoundedDelay(Policy):
    """Bounded delay: no applied update is staler than `max_staleness` updates."""

    max_staleness: int = 8
    mode: str = "wait"  # "wait": fast workers idle; "drop": too-stale gradients are discarded
    wait_rule: WaitRule = field(default=delay_wait_group, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_staleness, bool) or not isinstance(self.max_staleness, int):
            raise StalenessConfigError(
                f"max_staleness must be an int >= 0, got {self.max_staleness!r}"
            )
        if self.max_staleness < 0:
            raise StalenessConfigError(
                f"max_staleness counts updates and must be >= 0, got {self.max_staleness}"
            )
        if self.mode not in ("wait", "drop"):
            raise StalenessConfigError(f"mode must be 'wait' or 'drop', got {self.mode!r}")

    def scale(self, staleness: int) -> float:
        return 0.0 if self.mode == "drop" and staleness > self.max_staleness else 1.0

    def wait_group(self, version: int, pulled: Sequence[int], held: Sequence[int]) -> list[int]:
        return list(self.wait_rule(version, pulled, held, self.max_staleness))

    @property
    def label(self) -> str:
        return f"BoundedDelay({self.max_staleness}, {self.mode!r})"


def BoundedStaleness(  # the former class name, kept callable
    max_staleness: int = 8, mode: str = "wait", wait_rule: WaitRule = delay_wait_group
) -> BoundedDelay:
    """Deprecated name of `BoundedDelay`: the bound counts updates (SSP, `SSP`, counts clocks)."""
    warnings.warn(
        "BoundedStaleness is renamed BoundedDelay: it bounds the delay in updates; "
        "stale synchronous parallel, which bounds the clock gap, is st.SSP(bound)",
        DeprecationWarning,
        stacklevel=2,
    )
    return BoundedDelay(max_staleness, mode, wait_rule)


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
    """DC-ASGD: g + lam * g * g * (theta_now - theta_pulled) (Zheng et al. 2017).

    ``adaptive=True`` is DC-ASGD-a: lam becomes lam / sqrt(m_t + eps), element-wise, with
    m_t the running mean square of the gradients (decay ``momentum``), kept per run by the
    closure `make_corrector` returns.
    """

    lam: float = 0.5  # variance-control parameter lambda (lambda_0 when adaptive)
    adaptive: bool = False  # DC-ASGD-a
    momentum: float = 0.95  # decay of the mean square m_t (adaptive only)
    eps: float = 1e-7  # keeps lam_t finite where a coordinate's gradients are all 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise StalenessConfigError(f"lam must be finite and >= 0, got {self.lam}")
        if not (math.isfinite(self.momentum) and 0 <= self.momentum < 1):
            raise StalenessConfigError(f"momentum must be in [0, 1), got {self.momentum}")
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise StalenessConfigError(f"eps must be finite and > 0, got {self.eps}")

    def scale(self, staleness: int) -> float:
        return 1.0

    def correct(
        self, grad: torch.Tensor, theta_now: torch.Tensor, theta_pulled: torch.Tensor
    ) -> torch.Tensor:
        """The plain (non-adaptive) correction; adaptive runs use `make_corrector`."""
        return grad + self.lam * grad * grad * (theta_now - theta_pulled)

    def make_corrector(self) -> Corrector:
        if not self.adaptive:
            return self.correct
        mean_square: torch.Tensor | None = None
        lam0, decay, eps = self.lam, self.momentum, self.eps

        def correct_adaptive(
            grad: torch.Tensor, theta_now: torch.Tensor, theta_pulled: torch.Tensor
        ) -> torch.Tensor:
            nonlocal mean_square
            g2 = grad * grad
            prev = torch.zeros_like(g2) if mean_square is None else mean_square
            mean_square = decay * prev + (1.0 - decay) * g2
            lam_t = lam0 / torch.sqrt(mean_square + eps)
            return grad + lam_t * g2 * (theta_now - theta_pulled)

        return correct_adaptive

    @property
    def label(self) -> str:
        return f"DC-ASGD-a({self.lam:g})" if self.adaptive else f"DC-ASGD({self.lam:g})"
