"""Staleness in asynchronous training: a parameter-server simulator, mitigations, analysis.

Read in this order (chapter 5 of the course follows it):
- `problems`: real PyTorch models and data (`quadratic_problem`, `logreg_problem`,
  `mlp_problem`) with batched real gradients;
- `speeds`: worker speed models (`WorkerSpeeds`): where staleness comes from;
- `policies`: what the server does with a stale gradient (`Sync`, `Async`, `SSP` (a bound
  on the clock gap between workers), `BoundedDelay` (a bound on staleness in updates),
  `StalenessAwareLR`, `DelayCompensated`);
- `clocks`: `ClockGate`, the stale synchronous parallel rule on the workers' clocks;
- `simulator`: `simulate(...) -> SimResult`, the discrete-event parameter server;
- `theory`: `stability_bound(tau)`, the first-order bias, implicit momentum;
- `analysis`: histograms, `staleness_loss_correlation`, updates- vs time-to-target;
- `sweeps`: `seed_sweep`, `compare_policies`, `lr_sweep`, `matched_lr`: every comparison over
  seeds (median and range) and against tuned and step-matched `Async` baselines;
  `loss_at_budget`: one run's loss after a budget of simulated seconds (equal cluster time);
- `hogwild`: `run_hogwild`, real processes on shared memory, to check the simulator.
"""

from mlinfra_lab.staleness.analysis import (
    CorrelationResult,
    staleness_histogram,
    staleness_loss_correlation,
    time_to_target,
    updates_to_target,
)
from mlinfra_lab.staleness.clocks import ClockGate, update_staleness_bound
from mlinfra_lab.staleness.errors import SimulationStalledError, StalenessConfigError
from mlinfra_lab.staleness.hogwild import HogwildResult, HogwildWorkerError, run_hogwild
from mlinfra_lab.staleness.policies import (
    SSP,
    Async,
    BoundedDelay,
    BoundedStaleness,
    DelayCompensated,
    Policy,
    StalenessAwareLR,
    Sync,
    delay_wait_group,
    inverse_staleness,
    power_weight,
    ssp_wait_group,
    zhang_weight,
)
from mlinfra_lab.staleness.problems import Problem, logreg_problem, mlp_problem, quadratic_problem
from mlinfra_lab.staleness.simulator import SimConfig, SimResult, simulate
from mlinfra_lab.staleness.speeds import Presence, Slowdown, WorkerSpeeds
from mlinfra_lab.staleness.sweeps import (
    LRSweep,
    SeedSweep,
    Spread,
    compare_policies,
    loss_at_budget,
    lr_sweep,
    matched_lr,
    seed_sweep,
)
from mlinfra_lab.staleness.theory import (
    corrected_momentum,
    delay_spectral_radius,
    delayed_gd,
    gradient_staleness_error,
    implicit_momentum,
    stability_bound,
)

__all__ = [
    "SSP",
    "Async",
    "BoundedDelay",
    "BoundedStaleness",
    "ClockGate",
    "CorrelationResult",
    "DelayCompensated",
    "HogwildResult",
    "HogwildWorkerError",
    "LRSweep",
    "Policy",
    "Presence",
    "Problem",
    "SeedSweep",
    "SimConfig",
    "SimResult",
    "SimulationStalledError",
    "Slowdown",
    "Spread",
    "StalenessAwareLR",
    "StalenessConfigError",
    "Sync",
    "WorkerSpeeds",
    "compare_policies",
    "corrected_momentum",
    "delay_wait_group",
    "delay_spectral_radius",
    "delayed_gd",
    "gradient_staleness_error",
    "implicit_momentum",
    "inverse_staleness",
    "logreg_problem",
    "loss_at_budget",
    "lr_sweep",
    "matched_lr",
    "mlp_problem",
    "power_weight",
    "quadratic_problem",
    "run_hogwild",
    "seed_sweep",
    "simulate",
    "ssp_wait_group",
    "stability_bound",
    "staleness_histogram",
    "staleness_loss_correlation",
    "time_to_target",
    "update_staleness_bound",
    "updates_to_target",
    "zhang_weight",
]
