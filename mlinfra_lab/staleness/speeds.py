"""Worker speed models: how long each worker's gradient takes, at each moment of a run.

Contract: a frozen `WorkerSpeeds` describes n workers' compute times (a base time each, an
optional log-normal jitter, optional intermittent slowdowns); ``sampler(seed).draw(w, now)``
returns the duration of worker w's next gradient, started at simulated time ``now``.

Design decisions:
- Staleness is *made* by speed differences: a gradient's staleness is the number of updates
  other workers apply while it is being computed. So the speed model is the knob that
  creates staleness: `homogeneous` gives every update the same staleness n - 1,
  `lognormal` a stationary spread (staleness as constant noise), `straggler` one or more
  persistently slow workers (a long tail), `intermittent` slowdowns that come and go, so
  staleness's tail rises and falls during a run, and `bursts` elastic workers that join
  and leave, so that every update's staleness rises and falls (injected staleness).
- Jitter is mean-preserving (exp(sigma z - sigma^2 / 2)), so sigma changes the spread and
  not the throughput. A duration is fixed when the computation starts (at pull time).
- Each worker owns its random stream (numpy SeedSequence.spawn), so adding a worker does
  not change the others' draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlinfra_lab.staleness.errors import StalenessConfigError

__all__ = ["Presence", "Slowdown", "WorkerSpeeds"]


@dataclass(frozen=True)
class Slowdown:
    """Workers `workers` run `factor` times slower during the first `duty` of every period."""

    workers: tuple[int, ...]
    factor: float  # compute-time multiplier while slowed, > 1
    period: float  # simulated seconds between the starts of two slow phases
    duty: float = 0.5  # fraction of each period spent slow
    phase: float = 0.0  # time of the first slow phase's start

    def active(self, now: float) -> bool:
        return ((now - self.phase) % self.period) < self.duty * self.period


@dataclass(frozen=True)
class Presence:
    """Workers `workers` take part only during the first `duty` of every period; outside it
    they start nothing (a computation already running finishes). Models elastic workers."""

    workers: tuple[int, ...]
    period: float
    duty: float = 0.5
    phase: float = 0.0

    def wait(self, now: float) -> float:
        """Seconds until these workers may start a computation (0 while present)."""
        into = (now - self.phase) % self.period
        return 0.0 if into < self.duty * self.period else self.period - into


@dataclass(frozen=True)
class WorkerSpeeds:
    """The compute-time model of n workers (times in simulated seconds)."""

    base_times: tuple[float, ...]  # mean compute time of each worker's gradient
    sigma: float = 0.0  # log-normal jitter of each duration (0: deterministic)
    slowdowns: tuple[Slowdown, ...] = ()
    presence: tuple[Presence, ...] = ()  # elastic workers that come and go
    name: str = "custom"

    def __post_init__(self) -> None:
        if len(self.base_times) == 0:
            raise StalenessConfigError(
                "WorkerSpeeds needs at least one worker; got an empty list of compute times"
            )
        if not all(math.isfinite(t) and t > 0 for t in self.base_times):
            raise StalenessConfigError(
                f"every worker's compute time must be finite and > 0; got {self.base_times}"
            )
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise StalenessConfigError(f"sigma must be finite and >= 0; got {self.sigma}")
        for s in self.slowdowns:
            if not (s.factor > 0 and s.period > 0 and 0 <= s.duty <= 1):
                raise StalenessConfigError(f"bad slowdown {s}: need factor>0, period>0, 0<=duty<=1")
        windows: list[Slowdown | Presence] = [*self.slowdowns, *self.presence]
        for window in windows:
            if any(not 0 <= w < self.n for w in window.workers):
                raise StalenessConfigError(f"{window} names a worker outside 0..{self.n - 1}")
        for p in self.presence:
            if not (p.period > 0 and 0 < p.duty <= 1):
                raise StalenessConfigError(f"bad presence {p}: need period > 0, 0 < duty <= 1")

    @property
    def n(self) -> int:
        return len(self.base_times)

    # --- the named models ----------------------------------------------------------------
    @classmethod
    def homogeneous(cls, n: int, time: float = 1.0) -> WorkerSpeeds:
        """n identical deterministic workers: after warm-up every update has staleness n-1."""
        return cls(_times(n, time), name=f"homogeneous({n})")

    @classmethod
    def lognormal(cls, n: int, sigma: float = 0.5, time: float = 1.0) -> WorkerSpeeds:
        """n workers with i.i.d. log-normal durations: staleness varies as stationary noise."""
        return cls(_times(n, time), sigma=sigma, name=f"lognormal({n}, sigma={sigma:g})")

    @classmethod
    def straggler(
        cls,
        n: int,
        slow_factor: float = 10.0,
        which: int | Sequence[int] = 0,
        sigma: float = 0.1,
        time: float = 1.0,
    ) -> WorkerSpeeds:
        """n workers of which `which` are persistently `slow_factor` times slower."""
        slow = {which} if isinstance(which, int) else set(which)
        times = tuple(time * (slow_factor if w in slow else 1.0) for w in range(n))
        return cls(times, sigma=sigma, name=f"straggler({n}, x{slow_factor:g}, {sorted(slow)})")

    @classmethod
    def intermittent(
        cls,
        n: int,
        slow_factor: float = 8.0,
        period: float = 50.0,
        duty: float = 0.3,
        which: Sequence[int] | None = None,
        sigma: float = 0.1,
        time: float = 1.0,
    ) -> WorkerSpeeds:
        """Slowdowns that come and go: `which` (default: half the workers) run `slow_factor`
        times slower for `duty` of every `period` seconds, so staleness arrives in bursts."""
        chosen = tuple(range(n // 2)) if which is None else tuple(which)
        slow = Slowdown(chosen, slow_factor, period, duty)
        return cls(
            _times(n, time),
            sigma=sigma,
            slowdowns=(slow,),
            name=f"intermittent({n}, x{slow_factor:g}, period={period:g}, duty={duty:g})",
        )

    @classmethod
    def bursts(
        cls,
        n: int,
        extra: int,
        period: float = 40.0,
        duty: float = 0.3,
        sigma: float = 0.2,
        time: float = 1.0,
    ) -> WorkerSpeeds:
        """Staleness injected in bursts: `n` workers always run and `extra` more join for the
        first `duty` of every `period`, raising every update's staleness from about n - 1 to
        about n + extra - 1 while they are there (elastic training, a co-located job leaving)."""
        joining = Presence(tuple(range(n, n + extra)), period, duty)
        return cls(
            _times(n + extra, time),
            sigma=sigma,
            presence=(joining,),
            name=f"bursts({n}+{extra}, period={period:g}, duty={duty:g})",
        )

    def sampler(self, seed: int) -> SpeedSampler:
        return SpeedSampler(self, seed)


def _times(n: int, time: float) -> tuple[float, ...]:
    return (float(time),) * n  # n < 1: no workers, which WorkerSpeeds rejects


class SpeedSampler:
    """Draws durations for one run; each worker has its own seeded stream."""

    def __init__(self, speeds: WorkerSpeeds, seed: int) -> None:
        self.speeds = speeds
        streams = np.random.SeedSequence([seed, 0x5EED]).spawn(speeds.n)
        self._rngs = [np.random.default_rng(s) for s in streams]
        self._half_var = 0.5 * speeds.sigma**2

    def start_delay(self, worker: int, now: float) -> float:
        """Seconds until `worker` may start its next computation (0: now)."""
        return max((p.wait(now) for p in self.speeds.presence if worker in p.workers), default=0.0)

    def draw(self, worker: int, now: float) -> float:
        """Duration of `worker`'s gradient computation started at simulated time `now`."""
        t = self.speeds.base_times[worker]
        for s in self.speeds.slowdowns:
            if worker in s.workers and s.active(now):
                t *= s.factor
        if self.speeds.sigma > 0:
            t *= math.exp(self.speeds.sigma * self._rngs[worker].standard_normal() - self._half_var)
        return t
