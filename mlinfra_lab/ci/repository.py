"""A small training repository as a CI gate sees it: one entry point, and changes to its code.

Contract: ``make_repository(spec, change)`` returns the repository's entry point
``train(threads=1, dtype=None) -> list[float]``: it trains a small MLP for ``spec.steps`` SGD
steps and returns the loss of every step. ``change`` names one edit of the training code:
a key of `LEGITIMATE_CHANGES` (the numbers move by rounding only; a gate must accept it) or of
`BUGS` (the training computes something else; a gate must reject it). Lab 3's gate exercise
runs its hidden tests on repositories built here.

Design decisions:
- Like most training scripts, ``train`` does not seed itself: it draws the data and the
  example order from NumPy's and Python's global generators and the weights from torch's.
  Seeding is the CI job's work (``seed_everything`` before each run).
- ``spec.flaky`` adds the classic flake: an input jitter whose generator is built with no
  seed (``np.random.default_rng()``), so two seeded runs disagree. Without it the jitter's
  generator takes its seed from NumPy's global generator, which the CI job seeded: the fix.
- ``threads`` sets torch's intra-op threads for the run and restores them after. ``dtype``
  ``None`` trains in the repository's own precision (float32, or float32 weights with
  bfloat16 autocast when ``spec.mixed_precision``); ``"float32"`` and ``"float64"`` run
  the same steps in that precision without autocast: the distance of the float64 run is the
  run's own rounding error, a scale for any reordering of its sums (``spread.py``).
- ``spec.loss_units`` multiplies the *reported* loss only (a loss summed over tokens instead
  of averaged, say): the training itself is unchanged, so a band in absolute units must come
  from a measurement of the repository at hand, not from a constant.
- In mixed precision, bfloat16's rounding (a relative 4e-3 per operation) is as large as what
  the smaller bugs do (a 3 % learning rate, a weight decay of 1e-4): no band can tell those
  apart there. Run a CI tier in float32 when it must catch small changes.

Caveat: the changes emulate edits with a flag inside one function, so that a test can apply
them to any spec; a real repository would show them as diffs.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BUGS", "LEGITIMATE_CHANGES", "RepoSpec", "Train", "make_repository"]

# Edits that change only how floats are rounded: a gate must accept every one.
LEGITIMATE_CHANGES: dict[str, str] = {
    "micro-batches": "each batch split in two micro-batches whose gradients accumulate",
    "loss-in-float64": "the squared error accumulated in float64 before the mean",
    "runner-threads": "a CI runner with one more intra-op thread",
    "batch-reversed": "the examples of each batch in reverse order (another summation order)",
}
# Edits that change what is computed: a gate must reject each one.
BUGS: dict[str, str] = {
    "lr+3%": "a learning rate 3 % higher than the reviewed one",
    "momentum-0.8": "a refactor that builds SGD with momentum 0.8 instead of 0.9",
    "weight-decay": "an optimizer default of weight_decay=1e-4 that slipped in",
    "drops-an-example": "an off-by-one in the loader: the last example of every batch dropped",
    "same-order": "the shuffle done once: every epoch visits the examples in the same order",
}

Train = Callable[..., list[float]]  # train(threads=1, dtype=None) -> loss of step 1..steps


@dataclass(frozen=True)
class RepoSpec:
    """What decides a repository's numbers (its sizes, its optimiser, its precision)."""

    features: int = 8  # input width
    hidden: int = 32  # MLP hidden width
    examples: int = 100  # size of the synthetic data set
    batch: int = 10  # examples per step
    steps: int = 30  # SGD steps per run
    lr: float = 0.02  # SGD learning rate (momentum 0.9)
    loss_units: float = 1.0  # factor of the reported loss (the training does not see it)
    mixed_precision: bool = False  # bfloat16 autocast around forward and loss
    flaky: bool = False  # the jitter's generator unseeded (the flake to find)
    jitter: float = 0.05  # std of the Gaussian input jitter

    def __post_init__(self) -> None:
        if self.batch < 2 or self.examples < self.batch or self.steps < 1:
            raise ValueError("need batch >= 2, examples >= batch and steps >= 1")


def make_repository(spec: RepoSpec | None = None, change: str | None = None) -> Train:
    """The entry point ``train(threads=1, dtype=None)`` of `spec`'s repository, with `change`."""
    spec = spec if spec is not None else RepoSpec()
    if change is not None and change not in LEGITIMATE_CHANGES and change not in BUGS:
        known = ", ".join([*LEGITIMATE_CHANGES, *BUGS])
        raise ValueError(f"unknown change {change!r}; known: {known}")

    def train(threads: int = 1, dtype: str | None = None) -> list[float]:
        import torch

        if dtype not in (None, "float32", "float64"):
            raise ValueError(f"dtype must be None, 'float32' or 'float64', got {dtype!r}")
        saved = torch.get_num_threads()
        torch.set_num_threads(threads + 1 if change == "runner-threads" else threads)
        try:
            return _train(spec, change, dtype)
        finally:
            torch.set_num_threads(saved)

    return train


def _train(spec: RepoSpec, change: str | None, dtype: str | None) -> list[float]:
    import numpy as np
    import torch

    dt = torch.float64 if dtype == "float64" else torch.float32
    amp = spec.mixed_precision and dtype is None
    x = torch.from_numpy(np.random.randn(spec.examples, spec.features)).to(dt)  # (N, F)
    teacher = torch.from_numpy(np.random.randn(spec.features, 1)).to(dt)  # (F, 1)
    y = torch.tanh(x @ teacher)  # (N, 1)
    jitter_seed = None if spec.flaky else int(np.random.randint(2**31))
    jitter = np.random.default_rng(jitter_seed)  # the flake when unseeded
    model = torch.nn.Sequential(
        torch.nn.Linear(spec.features, spec.hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(spec.hidden, 1),
    ).to(dt)
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=spec.lr * (1.03 if change == "lr+3%" else 1.0),
        momentum=0.8 if change == "momentum-0.8" else 0.9,
        weight_decay=1e-4 if change == "weight-decay" else 0.0,
    )
    epoch: list[int] = []  # this epoch's example order
    order: list[int] = []  # what is left of it
    losses: list[float] = []
    for _ in range(spec.steps):
        if len(order) < spec.batch:  # a new epoch (a partial last batch is dropped)
            if change != "same-order" or not epoch:
                epoch = list(range(spec.examples))
                random.shuffle(epoch)
            order = list(epoch)
        idx, order = order[: spec.batch], order[spec.batch :]
        if change == "drops-an-example":
            idx = idx[:-1]
        noise = torch.from_numpy(jitter.normal(0.0, spec.jitter, size=(len(idx), spec.features)))
        xb, yb = x[idx] + noise.to(dt), y[idx]  # (B, F), (B, 1)
        if change == "batch-reversed":  # the same examples, each with its own jitter
            xb, yb = xb.flip(0), yb.flip(0)
        parts = [slice(0, len(idx) // 2), slice(len(idx) // 2, len(idx))]
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        cast = torch.autocast("cpu", dtype=torch.bfloat16) if amp else contextlib.nullcontext()
        with cast:
            for part in parts if change == "micro-batches" else [slice(0, len(idx))]:
                pred = model(xb[part])
                if change == "loss-in-float64":
                    err = pred.double() - yb[part].double()
                else:
                    err = pred.float() - yb[part].float()
                loss = (err**2).mean() * (len(pred) / len(idx))  # a share of the batch mean
                loss.backward()
                total += float(loss.item())
        optimizer.step()
        losses.append(spec.loss_units * total)
    return losses
