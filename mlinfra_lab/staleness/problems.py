"""Training problems for the staleness simulator: a real PyTorch model, its data, batched gradients.

Contract: a `Problem` turns flat parameter vectors and minibatch indices into real losses and
real gradients of a real ``torch.nn.Module``; `quadratic_problem`, `logreg_problem` and
`mlp_problem` build the three problems the chapter uses.

Design decisions:
- Parameters travel as one flat float32 vector of length P. The parameter server keeps one,
  every worker a snapshot of the version it pulled; the module itself is only a template
  that `torch.func.functional_call` evaluates at whatever parameters we hand it.
- Gradients are computed in batches: `batched_grads(params (K, P), idx (K, B))` evaluates K
  workers' gradients, each at its own pulled parameters and on its own minibatch, in one
  `torch.func.vmap(grad_and_value(...))` call. The result is exactly what K separate
  backward passes would give; it only removes K-1 rounds of Python overhead, which is what
  lets the simulator run 64 workers x 20,000 updates in seconds on a laptop CPU.
- Every module's ``forward(x, y)`` returns the mean loss over the batch, so the three
  problems share one code path. The quadratic's "data" are random shifts xi of its minimum
  (loss 0.5 * sum_i h_i (x_i - xi_i)^2): with ``noise=0`` the gradient is exact and the
  fixed-delay stability theory (`theory.stability_bound`) applies to it verbatim.
- `logreg_problem` and `mlp_problem` use scikit-learn's digits (1,797 8x8 images, shipped
  inside scikit-learn: no download), standardised, 10 classes.

Caveats: problems are small on purpose (the chapter runs on a 2-core CPU); the simulator's
point is the *dynamics* of stale updates, which these problems show clearly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "Problem",
    "single_thread",
    "logreg_problem",
    "mlp_problem",
    "quadratic_problem",
]


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch single-threaded inside the block (restored after).

    These tensors are tiny: intra-op threads cost more than they save, badly so on a shared
    2-core machine where a spinning thread waits for a core.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _Quadratic(nn.Module):
    """0.5 * mean_b sum_i h_i (x_i - xi_bi)^2: a stochastic quadratic with curvatures h."""

    h: torch.Tensor  # the curvatures, a buffer (moves with the module, is not trained)

    def __init__(self, curvatures: torch.Tensor) -> None:
        super().__init__()
        self.x = nn.Parameter(torch.ones_like(curvatures))
        self.register_buffer("h", curvatures)

    def forward(self, xi: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # xi: (B, dim)
        return 0.5 * ((self.x - xi) ** 2 * self.h).sum(-1).mean()


class _Classifier(nn.Module):
    """A classifier whose forward returns the mean cross-entropy of the batch."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # x: (B, 64)
        return F.cross_entropy(self.net(x), y)


@dataclass(frozen=True)
class Problem:
    """A model template, its training data and the minibatch size each worker draws."""

    name: str
    module: nn.Module = field(repr=False)  # template; evaluated functionally at any params
    inputs: torch.Tensor = field(repr=False)  # (N, ...) training inputs
    targets: torch.Tensor = field(repr=False)  # (N,) labels (unused by the quadratic)
    batch_size: int  # examples per worker gradient
    init_seed: int = 0  # seed the template's initial parameters were drawn with
    start: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.start is None:  # snapshot now: later edits of the template change nothing
            flat = torch.cat([p.detach().reshape(-1) for p in self.module.parameters()])
            object.__setattr__(self, "start", flat.clone())

    @property
    def num_examples(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """The module's parameter dict viewed out of one flat vector (P,)."""
        out, offset = {}, 0
        for name, p in self.module.named_parameters():
            out[name] = flat[offset : offset + p.numel()].view(p.shape)
            offset += p.numel()
        return out

    def initial_params(self) -> torch.Tensor:
        """The starting point (P,): the template's (seeded) initialisation when built, copied."""
        assert self.start is not None  # set by __post_init__
        return self.start.clone()

    def _loss(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        buffers = dict(self.module.named_buffers())
        return torch.func.functional_call(self.module, {**self.unflatten(flat), **buffers}, (x, y))

    def batched_grads(
        self, params: torch.Tensor, idx: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Real minibatch gradients of K workers at once.

        params: (K, P) each worker's pulled parameters; idx: (K, B) its minibatch indices.
        Returns (grads (K, P), losses (K,)); row k is the gradient of the mean minibatch loss
        at params[k], exactly as a separate backward pass would compute it.
        """
        index = torch.as_tensor(idx, dtype=torch.long)
        x, y = self.inputs[index], self.targets[index]  # (K, B, ...), (K, B)
        fn = torch.func.vmap(torch.func.grad_and_value(self._loss))
        grads, losses = fn(params, x, y)
        return grads.detach(), losses.detach()

    @torch.no_grad()
    def full_loss(self, flat: torch.Tensor) -> float:
        """Mean loss over the whole training set at parameters ``flat`` (P,)."""
        return float(self._loss(flat, self.inputs, self.targets))


def quadratic_problem(
    dim: int = 10, condition: float = 10.0, noise: float = 0.0, batch_size: int = 1, seed: int = 0
) -> Problem:
    """A quadratic with curvatures log-spaced in [1/condition, 1] (largest curvature 1).

    With ``noise=0`` gradients are exact (x - 0 weighted by h), so gradient descent with a
    fixed delay tau is stable exactly for lr < `stability_bound(tau)`. ``noise>0`` draws
    the minimum's position per example from N(0, noise^2): a stochastic quadratic.
    """
    if dim < 1 or not condition >= 1.0 or noise < 0 or batch_size < 1:
        raise ValueError(
            "quadratic_problem needs dim >= 1, condition >= 1, noise >= 0 and batch_size >= 1; "
            f"got dim={dim}, condition={condition}, noise={noise}, batch_size={batch_size}"
        )
    h = torch.logspace(-np.log10(condition), 0.0, dim) if dim > 1 else torch.ones(1)
    g = torch.Generator().manual_seed(seed)
    shifts = noise * torch.randn(1024, dim, generator=g)  # (N, dim) the "dataset"
    return Problem(
        name=f"quadratic(dim={dim}, condition={condition:g}, noise={noise:g})",
        module=_Quadratic(h.float()),
        inputs=shifts,
        targets=torch.zeros(1024, dtype=torch.long),
        batch_size=batch_size,
    )


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32)  # (1797, 64) pixel intensities 0..16
    x = (x - x.mean(0)) / (x.std(0) + 1.0)  # standardised; +1 keeps constant pixels at 0
    return x, torch.tensor(data.target, dtype=torch.long)


def logreg_problem(batch_size: int = 32, seed: int = 0) -> Problem:
    """Multinomial logistic regression (650 parameters) on scikit-learn's digits."""
    x, y = _digits()
    torch.manual_seed(seed)
    return Problem("logreg(digits)", _Classifier(nn.Linear(64, 10)), x, y, batch_size, seed)


def mlp_problem(hidden: int = 32, batch_size: int = 32, seed: int = 0) -> Problem:
    """A one-hidden-layer tanh MLP (64-hidden-10) on scikit-learn's digits: non-convex."""
    x, y = _digits()
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(64, hidden), nn.Tanh(), nn.Linear(hidden, 10))
    return Problem(f"mlp(digits, hidden={hidden})", _Classifier(net), x, y, batch_size, seed)
