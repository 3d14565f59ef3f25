"""Seed sweeps and tuned baselines: comparisons of policies that control for seed and step size.

Contract: `seed_sweep(problem, speeds, policy, lr, seeds, updates, target)` runs one policy at
one learning rate once per seed and returns a `SeedSweep`, whose `Spread`s give the median and
the range over seeds of the updates and simulated seconds to the target loss and of the final
loss; `compare_policies` does that for several policies at one learning rate; `lr_sweep` does
it for one policy over a grid of learning rates and returns an `LRSweep` whose ``best`` is the
tuned baseline; `matched_lr(lr, mean_staleness)` is the constant learning rate
lr / (1 + mean staleness), the step that 1/(1+s) applies to an update of average staleness;
`loss_at_budget` is one run's training loss after a budget of simulated seconds, the number a
comparison at equal cluster time ranks policies by.

Design decisions:
- A mitigation that scales the step down (1/(1+s), lr/s) changes two things at once: how much
  a stale gradient counts *relative to a fresh one*, and the *average* step. A comparison with
  `Async` at the same nominal learning rate credits the rule with both. Two baselines separate
  them: `Async` at `matched_lr` (the same average step, no reweighting) and `Async` at the best
  learning rate of a sweep (`LRSweep.best`, what a practitioner who tunes the rate gets).
  Whatever the rule buys beyond those is what down-weighting itself buys.
- Every number is a distribution over seeds, reported as its median and range (min to max): a
  seed fixes the worker speeds and every minibatch, so one seed is one draw of the
  experiment, and a ranking that flips between seeds is not a ranking.
- "Never reached the target" is ``inf``, not a sentinel count: medians and ranges stay honest
  (a median of ``inf`` means most seeds never got there) and `Spread.text` prints "never".
- The tuned rate is the one with the fewest median updates to the target; ties, and grids
  where no rate reaches it, are broken by the lower median final loss. A best rate at either
  end of the grid is flagged (`LRSweep.best_at_edge`): the grid should then be widened.
- Runs are seeded and deterministic (the simulator's own guarantee), so a sweep repeated with
  the same arguments returns the same numbers.

- At equal time, not equal updates: `Sync` applies fewer, fresher updates per second than
  `Async` (it waits for the slowest worker), so only a time budget compares what a cluster
  pays for. `loss_at_budget` returns ``inf`` for a diverged run, like "never" above.

Caveats: the median of five seeds is a robust summary, not a significance test; the range is
the honest spread at this sample size (quartiles of five numbers mean little).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mlinfra_lab.staleness.analysis import time_to_target, updates_to_target
from mlinfra_lab.staleness.errors import StalenessConfigError
from mlinfra_lab.staleness.policies import Policy
from mlinfra_lab.staleness.problems import Problem
from mlinfra_lab.staleness.simulator import SimResult, simulate
from mlinfra_lab.staleness.speeds import WorkerSpeeds

__all__ = [
    "LRSweep",
    "SeedSweep",
    "Spread",
    "compare_policies",
    "loss_at_budget",
    "lr_sweep",
    "matched_lr",
    "seed_sweep",
]


@dataclass(frozen=True)
class Spread:
    """Median and range (min to max) of one quantity over seeds; ``inf`` means "never"."""

    median: float
    low: float
    high: float
    n: int  # number of seeds

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> Spread:
        a = np.asarray(values, dtype=float)
        if a.size == 0 or np.isnan(a).any():
            raise StalenessConfigError(
                f"a spread needs at least one value and no NaN (use inf for 'never'), got {values}"
            )
        return cls(float(np.median(a)), float(a.min()), float(a.max()), int(a.size))

    def text(self, fmt: str = ".0f") -> str:
        """'135 (100 to 155)'; 'never' for infinite values."""

        def f(x: float) -> str:
            return "never" if math.isinf(x) else format(x, fmt)

        return f"{f(self.median)} ({f(self.low)} to {f(self.high)})"


@dataclass(frozen=True, eq=False)
class SeedSweep:
    """One policy at one learning rate, run once per seed."""

    label: str
    lr: float
    target: float  # the training loss that counts as "reached"
    results: tuple[SimResult, ...]  # one per seed, in seed order

    @property
    def seeds(self) -> list[int]:
        return [r.config.seed for r in self.results]

    @property
    def updates_to_target(self) -> np.ndarray:
        """(S,) updates until the loss first reached the target; inf where it never did."""
        out = [updates_to_target(r, self.target) for r in self.results]
        return np.array([math.inf if k is None else k for k in out], dtype=float)

    @property
    def seconds_to_target(self) -> np.ndarray:
        """(S,) simulated seconds until the loss first reached the target; inf: never."""
        out = [time_to_target(r, self.target) for r in self.results]
        return np.array([math.inf if t is None else t for t in out], dtype=float)

    @property
    def final_loss(self) -> np.ndarray:
        """(S,) training loss at the end of each run (inf for a diverged run)."""
        return np.array([math.inf if r.diverged else r.final_loss for r in self.results])

    @property
    def mean_staleness(self) -> np.ndarray:
        """(S,) mean staleness of the applied updates of each run."""
        return np.array([r.staleness.mean() if r.updates else 0.0 for r in self.results])

    @property
    def mean_weight(self) -> np.ndarray:
        """(S,) mean factor the policy applied to lr (1 for Async): the average step is lr x it."""
        return np.array([r.weight.mean() if r.updates else 0.0 for r in self.results])

    def spread(self, quantity: str = "updates") -> Spread:
        """Median and range of "updates", "seconds", "final_loss", "staleness" or "weight"."""
        values = {
            "updates": lambda: self.updates_to_target,
            "seconds": lambda: self.seconds_to_target,
            "final_loss": lambda: self.final_loss,
            "staleness": lambda: self.mean_staleness,
            "weight": lambda: self.mean_weight,
        }
        if quantity not in values:
            raise StalenessConfigError(
                f"quantity must be one of {sorted(values)}, got {quantity!r}"
            )
        return Spread.of(values[quantity]())

    def loss_band(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(loss_at, median, low, high) of the loss curves over seeds, on their common grid.

        Every run of a sweep measures the loss at the same update counts; a run that stopped
        early (diverged) counts as inf from then on, so the band shows it.
        """
        longest = max(self.results, key=lambda r: r.loss_at.shape[0])
        grid = longest.loss_at
        curves = np.full((len(self.results), grid.shape[0]), math.inf)  # (S, E)
        for k, r in enumerate(self.results):
            curves[k, : r.loss.shape[0]] = r.loss
        curves = np.where(np.isfinite(curves), curves, math.inf)
        return grid, np.median(curves, axis=0), curves.min(axis=0), curves.max(axis=0)


@dataclass(frozen=True, eq=False)
class LRSweep:
    """One policy over a grid of learning rates, each run over the same seeds."""

    label: str
    sweeps: tuple[SeedSweep, ...]  # one per learning rate, in grid order

    @property
    def lrs(self) -> list[float]:
        return [s.lr for s in self.sweeps]

    @property
    def best(self) -> SeedSweep:
        """The tuned baseline: fewest median updates to the target, then lowest final loss."""
        return min(
            self.sweeps,
            key=lambda s: (s.spread("updates").median, s.spread("final_loss").median),
        )

    @property
    def best_at_edge(self) -> bool:
        """True when the best rate is the smallest or largest of the grid: widen the grid."""
        return len(self.sweeps) > 1 and self.best.lr in (min(self.lrs), max(self.lrs))


def matched_lr(lr: float, mean_staleness: float) -> float:
    """lr / (1 + mean staleness): the constant rate that 1/(1+s) applies at the mean s."""
    if not (math.isfinite(lr) and lr > 0):
        raise StalenessConfigError(f"lr must be a finite number > 0, got {lr!r}")
    if not (math.isfinite(mean_staleness) and mean_staleness >= 0):
        raise StalenessConfigError(
            f"mean_staleness counts updates and must be finite and >= 0, got {mean_staleness!r}"
        )
    return lr / (1.0 + mean_staleness)


def loss_at_budget(
    problem: Problem,
    speeds: WorkerSpeeds,
    policy: Policy,
    lr: float,
    seed: int,
    seconds: float,
    *,
    momentum: float = 0.0,
) -> float:
    """Training loss after `seconds` simulated seconds of one run (``inf``: it diverged).

    The run applies every update that lands within the budget (``simulate(..., until=)``);
    its length in updates follows from the policy and the speeds, not from the caller.
    """
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise StalenessConfigError(f"seconds is a time budget: finite and > 0, got {seconds!r}")
    # Enough updates for every worker to finish ~4x its share of the budget at its mean
    # speed: a cap the budget, not this count, should reach first.
    cap = max(1, math.ceil(4 * seconds * sum(1.0 / t for t in speeds.base_times)))
    result = simulate(
        problem, speeds, policy, cap, lr, seed, momentum, eval_every=cap, until=seconds
    )
    return math.inf if result.diverged else result.final_loss


def _check_seeds(seeds: Sequence[int]) -> list[int]:
    seeds = list(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise StalenessConfigError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise StalenessConfigError(f"seeds must be distinct (a repeat is not a new draw): {seeds}")
    return seeds


def _check_target(target: float) -> None:
    if not (isinstance(target, (int, float)) and math.isfinite(target) and target > 0):
        raise StalenessConfigError(
            f"target is a training loss: a finite number > 0, got {target!r}"
        )


def _bar(total: int, desc: str, progress: bool):
    from mlinfra_lab.progress import progress_bar

    return progress_bar(total=total, desc=desc, leave=False, enabled=progress)


def _run(
    problem: Problem,
    speeds: WorkerSpeeds,
    runs: Sequence[tuple[str, Policy, float]],
    seeds: Sequence[int],
    updates: int,
    target: float,
    momentum: float,
    eval_every: int | None,
    desc: str,
    progress: bool,
) -> list[SeedSweep]:
    """Run every (label, policy, lr) over every seed, under one progress bar."""
    seeds = _check_seeds(seeds)
    _check_target(target)
    out = []
    with _bar(len(runs) * len(seeds), desc, progress) as bar:
        for label, policy, lr in runs:
            results = []
            for seed in seeds:
                results.append(
                    simulate(
                        problem, speeds, policy, updates, lr, seed, momentum, eval_every=eval_every
                    )
                )
                bar.update(1)
            out.append(SeedSweep(label, float(lr), float(target), tuple(results)))
    return out


def seed_sweep(
    problem: Problem,
    speeds: WorkerSpeeds,
    policy: Policy,
    lr: float,
    seeds: Sequence[int],
    updates: int,
    target: float,
    *,
    label: str | None = None,
    momentum: float = 0.0,
    eval_every: int | None = None,
    progress: bool = True,
) -> SeedSweep:
    """Run `policy` at `lr` once per seed (same problem, speeds and length); see the module."""
    runs = [(label or policy.label, policy, lr)]
    return _run(
        problem, speeds, runs, seeds, updates, target, momentum, eval_every, "seeds", progress
    )[0]


def compare_policies(
    problem: Problem,
    speeds: WorkerSpeeds,
    policies: Mapping[str, Policy | tuple[Policy, float]],
    lr: float,
    seeds: Sequence[int],
    updates: int,
    target: float,
    *,
    momentum: float = 0.0,
    eval_every: int | None = None,
    progress: bool = True,
) -> dict[str, SeedSweep]:
    """A `SeedSweep` per named policy; a ``(policy, lr)`` value overrides the shared `lr`."""
    if not policies:
        raise StalenessConfigError("policies is empty: pass {name: policy or (policy, lr)}")
    runs = []
    for name, value in policies.items():
        policy, rate = value if isinstance(value, tuple) else (value, lr)
        if not isinstance(policy, Policy):
            raise StalenessConfigError(
                f"policies[{name!r}] must be a Policy or (Policy, lr), got {value!r}"
            )
        runs.append((name, policy, rate))
    sweeps = _run(
        problem, speeds, runs, seeds, updates, target, momentum, eval_every, "policies", progress
    )
    return {s.label: s for s in sweeps}


def lr_sweep(
    problem: Problem,
    speeds: WorkerSpeeds,
    policy: Policy,
    lrs: Sequence[float],
    seeds: Sequence[int],
    updates: int,
    target: float,
    *,
    label: str | None = None,
    momentum: float = 0.0,
    eval_every: int | None = None,
    progress: bool = True,
) -> LRSweep:
    """`policy` at every learning rate of `lrs`, each over `seeds`; ``.best`` is the tuned one."""
    lrs = list(lrs)
    if not lrs or len(set(lrs)) != len(lrs):
        raise StalenessConfigError(f"lrs must be a non-empty grid of distinct rates, got {lrs!r}")
    name = label or policy.label
    runs = [(f"{name} (lr {lr:g})", policy, lr) for lr in lrs]
    sweeps = _run(
        problem, speeds, runs, seeds, updates, target, momentum, eval_every, "lr sweep", progress
    )
    return LRSweep(name, tuple(sweeps))
