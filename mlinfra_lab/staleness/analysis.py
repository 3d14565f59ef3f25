"""Analysis of simulated runs: staleness distributions, cause-and-effect, efficiency.

Contract: `staleness_histogram` summarises a run's measured staleness;
`staleness_loss_correlation(result, window)` tests, with a permutation test, whether windows
of high measured staleness are windows where the loss decreases more slowly (or rises);
`updates_to_target` and `time_to_target` separate statistical efficiency (how many updates a
policy needs) from hardware efficiency (how much simulated time they take).

Design decisions:
- The empirical method of the course: log each applied update's staleness beside the loss and
  ask whether high-staleness periods coincide with bad loss periods. The run is cut into
  windows of `window` updates; per window x = its mean staleness (``stat="max"``: the
  largest), y = change of log(training
  loss) across the window (> 0: the loss rose), or with ``effect="variance"`` the spread of
  the loss's steps inside it. The statistic is Spearman's rank correlation
  of x and y; its one-sided p-value comes from shuffling y against x (a permutation test: no
  distribution assumed). A significant positive correlation is evidence that staleness is a
  cause, not an assumption; no correlation with staleness that is present but constant noise
  shows the method does not cry wolf.
- Mean or maximum: in an asynchronous parameter server every applied update makes each of
  the other n - 1 pending gradients one update staler, so over a long run the mean staleness
  is n - 1 whatever the speeds (a conservation law). Staleness bursts in the *mean* come from
  more concurrent workers (`WorkerSpeeds.bursts`); a straggler shows up in the *tail*, few
  very stale updates, which ``stat="max"`` or ``"p90"`` picks up.
- The first `burn_in` of the run is skipped: there the loss falls fast whatever the staleness,
  and staleness itself is still ramping up from 0, which would fake a correlation.

Caveats: the permutation test treats windows as exchangeable; strongly autocorrelated
windows (very short windows, slow drifts) make p-values optimistic. Use windows of at least a
few eval intervals, and treat the result as evidence, not proof.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlinfra_lab.staleness.errors import StalenessConfigError
from mlinfra_lab.staleness.simulator import SimResult

__all__ = [
    "CorrelationResult",
    "staleness_histogram",
    "staleness_loss_correlation",
    "time_to_target",
    "updates_to_target",
]


@dataclass(frozen=True, eq=False)
class CorrelationResult:
    """Outcome of `staleness_loss_correlation`."""

    stat: str  # how a window's staleness is summarised: "mean", "max" or "p90"
    effect: str  # "change" or "variance" of the log loss in each window
    rho: float  # Spearman correlation of window staleness and window log-loss change
    p_value: float  # one-sided permutation p-value of rho > 0
    window_staleness: np.ndarray  # (W,) mean staleness of each window
    window_loss_change: np.ndarray  # (W,) the effect per window (change or spread of log loss)
    window: int
    permutations: int

    def significant(self, alpha: float = 0.01) -> bool:
        return self.p_value < alpha


def staleness_histogram(result: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """(values, counts) of the applied updates' staleness, every value from 0 to the max."""
    counts = np.bincount(result.staleness) if result.updates else np.zeros(1, dtype=np.int64)
    return np.arange(counts.shape[0]), counts


_STATS = {
    "mean": lambda w: w.mean(axis=1),
    "max": lambda w: w.max(axis=1),
    "p90": lambda w: np.percentile(w, 90, axis=1),
}


def _ranks(a: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (window staleness is often tied; order must not break ties)."""
    ranks = np.empty(a.shape[0])
    ranks[np.argsort(a, kind="stable")] = np.arange(a.shape[0])
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=ranks) / counts)[inverse]


def _window_effect(result: SimResult, edges: np.ndarray, effect: str) -> np.ndarray:
    log_loss = np.log(np.maximum(result.loss, 1e-30))
    if effect == "change":  # log-loss change across each window (> 0: the loss rose)
        return np.diff(np.interp(edges, result.loss_at, log_loss))
    out = []  # "variance": spread of the step-to-step log-loss changes inside each window
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        inside = (result.loss_at >= a) & (result.loss_at <= b)
        out.append(np.diff(log_loss[inside]).std())
    return np.asarray(out)


def staleness_loss_correlation(
    result: SimResult,
    window: int,
    permutations: int = 2000,
    burn_in: float = 0.1,
    seed: int = 0,
    stat: str = "mean",
    effect: str = "change",
) -> CorrelationResult:
    """Do windows of high staleness coincide with windows of rising (or noisier) loss?

    stat: how a window's staleness is summarised ("mean", "max", "p90"); effect: "change"
    (log-loss change across the window) or "variance" (spread of the log-loss steps inside it,
    which needs a window of at least 3 eval intervals). See the module docstring.
    """
    if effect not in ("change", "variance"):
        raise StalenessConfigError(f"effect must be 'change' or 'variance', got {effect!r}")
    need = result.config.eval_every * (3 if effect == "variance" else 1)
    if window < 1 or window < need:
        raise StalenessConfigError(
            f"window must be >= {need} for effect={effect!r} with the run's eval_every "
            f"({result.config.eval_every}); got {window}"
        )
    if not 0 <= burn_in < 1:
        raise StalenessConfigError(f"burn_in is a fraction in [0, 1), got {burn_in}")
    if stat not in _STATS:
        raise StalenessConfigError(f"stat must be one of {sorted(_STATS)}, got {stat!r}")
    start = int(burn_in * result.updates)
    edges = np.arange(start, result.updates + 1, window)
    if edges.shape[0] < 6:
        raise StalenessConfigError(
            f"only {edges.shape[0] - 1} windows of {window} updates after the burn-in; "
            "use a smaller window or a longer run (at least 5 windows)"
        )
    y = _window_effect(result, edges, effect)  # (W,)
    per_window = result.staleness[edges[0] : edges[-1]].reshape(-1, window).astype(float)
    x = _STATS[stat](per_window)  # (W,)
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = np.sqrt((rx**2).sum() * (ry**2).sum())
    rho = float((rx * ry).sum() / denom) if denom > 0 else 0.0
    rng = np.random.default_rng(seed)
    perms = np.stack([rng.permutation(ry) for _ in range(permutations)])  # (P, W)
    null = (perms @ rx) / denom if denom > 0 else np.zeros(permutations)
    p = float((1 + np.sum(null >= rho - 1e-12)) / (1 + permutations))
    return CorrelationResult(stat, effect, rho, p, x, y, window, permutations)


def updates_to_target(result: SimResult, target: float) -> int | None:
    """Updates applied when the training loss first reached `target` (None: never)."""
    hit = np.nonzero(result.loss <= target)[0]
    return int(result.loss_at[hit[0]]) if hit.shape[0] else None


def time_to_target(result: SimResult, target: float) -> float | None:
    """Simulated seconds until the training loss first reached `target` (None: never)."""
    k = updates_to_target(result, target)
    if k is None:
        return None
    return 0.0 if k == 0 else float(result.time[k - 1])
