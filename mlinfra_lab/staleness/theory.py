"""The theory the simulations are checked against: delay stability, first-order bias, momentum.

Contract: `stability_bound(tau)` is the largest learning rate for which gradient descent on a
unit-curvature quadratic, with every gradient tau updates old, converges;
`delay_spectral_radius` and `delayed_gd` are its exact counterparts for any (lr, tau);
`gradient_staleness_error` measures the first-order bias on a real problem; and
`implicit_momentum` / `corrected_momentum` account for the momentum asynchrony adds.

Derivations (the chapter walks through them):
- Fixed delay. On f(x) = x^2 / 2 a gradient tau updates old gives x_{t+1} = x_t - lr x_{t-tau}.
  Its characteristic polynomial z^{tau+1} - z^tau + lr has all roots inside the unit circle
  iff lr < 2 sin(pi / (2 (2 tau + 1))): 2 for tau = 0 (plain gradient descent), 1 for tau = 1,
  and about pi / (2 tau) for large tau. Staleness shrinks the stable step like 1 / tau.
  With curvature h the bound applies to lr * h.
- First-order bias. A gradient pulled at theta_t and applied at theta_{t+s} errs by
  g(theta_t) - g(theta_{t+s}) ~ H (theta_t - theta_{t+s}) = H * lr * (sum of the s updates in
  between), so its norm grows like lr * s: both knobs, in product.
- Implicit momentum (Mitliagkas et al. 2016, "Asynchrony begets momentum"). Their model: M
  workers whose compute times are exponentially distributed (memoryless), which makes the
  staleness of an update geometric, P(s = k) = (1 - q) q^k with q = 1 - 1/M (mean M - 1). Their
  staleness counts the updates applied between a worker's read and its write, the course's s.
  Under that model the expected asynchronous update is heavy-ball momentum mu_imp = 1 - 1/M,
  which is E[s] / (1 + E[s]). The derivation needs the geometric law: equally fast workers give
  every update the same staleness n - 1, the fixed-delay recursion of `stability_bound`, not
  momentum. `implicit_momentum(E[s])` applies the formula at any mean staleness, a heuristic
  outside the exponential model. Explicit momentum mu_exp stacks on top; matching the total
  step amplification 1/(1 - mu) of a target mu gives mu_exp = (mu - mu_imp) / (1 - mu_imp),
  which is often <= 0: asynchronous runs want less (even no) explicit momentum.

Caveats: the bound is exact for a deterministic fixed delay; random staleness with the same
mean is usually a little more forgiving (the chapter shows both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from mlinfra_lab.staleness.errors import StalenessConfigError
from mlinfra_lab.staleness.problems import Problem, single_thread

__all__ = [
    "corrected_momentum",
    "delay_spectral_radius",
    "delayed_gd",
    "gradient_staleness_error",
    "implicit_momentum",
    "stability_bound",
]


def _check_tau(tau: int) -> None:
    if isinstance(tau, bool) or not isinstance(tau, (int, np.integer)) or tau < 0:
        raise StalenessConfigError(f"tau (a delay in updates) must be an int >= 0, got {tau!r}")


def stability_bound(tau: int) -> float:
    """Largest stable lr for x_{t+1} = x_t - lr * x_{t-tau}: 2 sin(pi / (2 (2 tau + 1)))."""
    _check_tau(tau)
    return 2.0 * math.sin(math.pi / (2 * (2 * tau + 1)))


def delay_spectral_radius(lr: float, tau: int, curvature: float = 1.0) -> float:
    """Largest |root| of z^{tau+1} - z^tau + lr * curvature: < 1 converges, > 1 diverges."""
    _check_tau(tau)
    coeffs = np.zeros(tau + 2)
    coeffs[0], coeffs[1] = 1.0, -1.0
    coeffs[-1] += lr * curvature  # tau = 0: z - 1 + lr h
    return float(np.abs(np.roots(coeffs)).max())


def delayed_gd(lr: float, tau: int, steps: int, x0: float = 1.0) -> np.ndarray:
    """The trajectory (steps + 1,) of x_{t+1} = x_t - lr * x_{t-tau} (x_t = x0 for t <= 0)."""
    _check_tau(tau)
    x = np.empty(steps + 1)
    x[0] = x0
    for t in range(steps):
        x[t + 1] = x[t] - lr * x[max(t - tau, 0)]
    return x


def gradient_staleness_error(
    problem: Problem, lr: float, staleness: Sequence[int], steps: int = 60
) -> np.ndarray:
    """Mean ||g(theta_t) - g(theta_{t+s})|| along full-batch gradient descent, for each s.

    Measures the first-order bias on a real problem: the curve is close to linear in s and
    scales with lr. Returns an array shaped like `staleness`.
    """
    smax = max(staleness)
    theta = problem.initial_params()
    grads = []
    full_idx = np.arange(problem.num_examples)[None]  # one "worker" holding every example
    with single_thread():
        for _ in range(steps + smax + 1):
            g, _ = problem.batched_grads(theta[None], full_idx)
            grads.append(g[0])
            theta = theta - lr * g[0]
    g_all = torch.stack(grads)  # (steps + smax + 1, P)
    return np.array(
        [float((g_all[:steps] - g_all[s : s + steps]).norm(dim=1).mean()) for s in staleness]
    )


def implicit_momentum(mean_staleness: float) -> float:
    """Momentum that asynchrony adds, E[s] / (1 + E[s]).

    Exact for geometric staleness, which M workers with exponentially distributed compute
    times produce (E[s] = M - 1, mu_imp = 1 - 1/M; Mitliagkas et al. 2016); a heuristic for
    other staleness distributions.
    """
    if not (math.isfinite(mean_staleness) and mean_staleness >= 0):
        raise StalenessConfigError(f"mean_staleness must be finite and >= 0, got {mean_staleness}")
    return mean_staleness / (1.0 + mean_staleness)


def corrected_momentum(target: float, mean_staleness: float, allow_negative: bool = False) -> float:
    """Explicit momentum giving a total of `target` once asynchrony's implicit share is in.

    (target - mu_imp) / (1 - mu_imp), clipped at 0 unless `allow_negative` (Mitliagkas et al.
    found negative explicit momentum sometimes best).
    """
    if not (0.0 <= target < 1.0):
        raise StalenessConfigError(f"target momentum must lie in [0, 1), got {target}")
    mu_imp = implicit_momentum(mean_staleness)
    mu = (target - mu_imp) / (1.0 - mu_imp)
    return mu if allow_negative else max(mu, 0.0)
