"""The tiny training run that CI trains on every commit: seeded, fast, and saving its artifacts.

Contract: ``train_tiny(steps=20, examples=100, seed=0, augment_seed="derived", out_dir=None)``
trains a small MLP for ``steps`` SGD steps on a 100-example synthetic regression set with a
data-augmentation step that owns its own random generator, logs the loss of every step, and
(given ``out_dir``) writes ``checkpoint.pt``, ``metrics.json`` and ``manifest.json``.

Design decisions:
- It is the course text's worked example, on purpose small (a fraction of a second per run
  on a CPU) so that CI can run it on every commit and several times in fresh processes. A
  fresh process costs more, about 5 s on 2 cores: importing torch, and torch's lazy import
  of ``torch._dynamo`` at the first optimizer step (``mlinfra-lab bench ci`` measures it).
- It draws from four random sources, each a realistic place for a seed to go missing:
  ``python`` (``random.shuffle`` of the example order), ``numpy`` (the synthetic data set),
  ``torch`` (weight init and dropout) and ``augment`` (input jitter from the augmentation's
  own ``numpy.random.Generator``). The first three are seeded by ``seed_everything``.
- ``augment_seed`` reproduces the bug and its fix: ``None`` builds the augmentation's
  generator with no seed, so NumPy seeds it from OS entropy and every process jitters
  differently (the flake); ``"derived"`` seeds it from ``derive_seed(seed, "augment")``
  (the fix); an int seeds it with that int.
- ``TrainConfig.pinned`` is a diagnostic hook: each named source is re-seeded with the
  constant ``PIN_SEED`` after the normal seeding. ``find_unseeded_source`` bisects with it.
- ``deterministic=True`` (the default) runs inside ``deterministic()``; CI pays the small
  speed cost so kernel non-determinism does not add noise on top of the seeds.
- ``dtype="float64"`` runs the same inputs in double precision: the float32 run's distance
  from it is its rounding error (``spread.py`` measures it). ``regression`` injects one of
  ``REGRESSIONS``, each a plausible bug (a summed loss, a dropped momentum, a stray weight
  decay...), so a chapter and a test can show that the band catches it. Both default to the
  normal run, and ``metrics.json`` records them with the rest of the config.

Caveat: identical losses are promised for the same program, seed, machine and library
versions only; across machines compare with a tolerance band (``references.py``).
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mlinfra_lab.ci.seeding import (
    RNG_SOURCES,
    derive_seed,
    deterministic,
    reseed,
    seed_everything,
)

__all__ = [
    "PIN_SEED",
    "REGRESSIONS",
    "TRAIN_SOURCES",
    "Augment",
    "TrainConfig",
    "TrainResult",
    "build_tiny_model",
    "make_dataset",
    "regression_loss",
    "train_tiny",
    "train_tiny_final_loss",
]

# Every random source train_tiny draws from; find_unseeded_source bisects over these.
TRAIN_SOURCES: tuple[str, ...] = (*RNG_SOURCES, "augment")
# The constant a pinned source is re-seeded with (any fixed value would do).
PIN_SEED = 12345
# Bugs TrainConfig.regression can inject, each one a plausible slip in a training loop.
REGRESSIONS: dict[str, str] = {
    "loss-sum": "the loss summed over the batch instead of averaged",
    "no-momentum": "a refactor that builds SGD without its momentum of 0.9",
    "weight-decay": "an optimizer default of weight_decay=1e-4 that slipped in",
    "dropout-off": "the model left in eval mode by an evaluation hook: dropout never fires",
    "grad-accumulates": "zero_grad called once before the loop: gradients pile up",
}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides a tiny run's numbers; saved in ``metrics.json``."""

    steps: int = 20  # SGD steps; 20 is enough to see the loss fall, fast enough for CI
    examples: int = 100  # size of the synthetic data set
    seed: int = 0  # the one base seed every source derives from
    augment_seed: str | int | None = "derived"  # "derived" = the fix, None = the bug
    features: int = 8  # input width
    hidden: int = 32  # MLP hidden width
    batch_size: int = 10  # examples per step (10 steps per epoch at 100 examples)
    lr: float = 0.05  # SGD learning rate (momentum 0.9)
    jitter: float = 0.1  # std of the augmentation's Gaussian input jitter
    dropout: float = 0.1  # dropout rate: a torch-RNG consumer inside the model
    deterministic: bool = True  # run inside deterministic() (CI setting)
    pinned: tuple[str, ...] = ()  # diagnostic: sources re-seeded with PIN_SEED
    dtype: str = "float32"  # "float64": the same inputs, wider accumulation (spread.py)
    regression: str | None = None  # teaching hook: inject one bug of REGRESSIONS

    def __post_init__(self) -> None:
        if self.augment_seed is not None and not isinstance(self.augment_seed, int):
            if self.augment_seed != "derived":
                raise ValueError(
                    f"augment_seed must be 'derived', None or an int, got {self.augment_seed!r}"
                )
        unknown = set(self.pinned) - set(TRAIN_SOURCES)
        if unknown:
            raise ValueError(
                f"cannot pin unknown sources {sorted(unknown)}; known: {', '.join(TRAIN_SOURCES)}"
            )
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if self.regression is not None and self.regression not in REGRESSIONS:
            raise ValueError(
                f"unknown regression {self.regression!r}; known: {', '.join(REGRESSIONS)}"
            )
        if self.steps < 1 or self.examples < self.batch_size:
            raise ValueError("need steps >= 1 and examples >= batch_size")


@dataclass(frozen=True)
class TrainResult:
    """What one run produced: per-step losses, the seeds used, and the trained objects."""

    config: TrainConfig
    losses: tuple[float, ...]  # loss of step 1..steps
    seeds: dict[str, int | None]  # seed per source; augment None = OS entropy
    out_dir: Path | None
    model: Any = field(repr=False, compare=False)  # torch.nn.Module
    optimizer: Any = field(repr=False, compare=False)  # torch.optim.Optimizer

    @property
    def final_loss(self) -> float:
        return self.losses[-1]


class Augment:
    """Gaussian input jitter drawn from the augmentation's own generator.

    ``seed=None`` is the classic bug: ``numpy.random.default_rng(None)`` seeds itself
    from OS entropy, so seeding the global generators does not reach it.
    """

    def __init__(self, seed: int | None, jitter: float) -> None:
        import numpy as np

        self.rng = np.random.default_rng(seed)
        self.jitter = jitter

    def __call__(self, x: Any) -> Any:  # (B, F) float32 array -> same shape
        noise = self.rng.normal(0.0, self.jitter, size=x.shape)
        return (x + noise).astype(x.dtype)


def make_dataset(examples: int, features: int) -> tuple[Any, Any]:
    """A synthetic regression set from NumPy's *global* generator: x (N, F), y (N, 1)."""
    import numpy as np

    x = np.random.randn(examples, features).astype(np.float32)  # (N, F)
    w = np.random.randn(features, 1).astype(np.float32)  # (F, 1)
    y = np.tanh(x @ w) + 0.05 * np.random.randn(examples, 1).astype(np.float32)  # (N, 1)
    return x, y.astype(np.float32)


def build_tiny_model(config: TrainConfig) -> Any:
    """The MLP train_tiny trains: (B, features) -> (B, 1), with dropout (torch's generator)."""
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(config.features, config.hidden),
        torch.nn.Tanh(),
        torch.nn.Dropout(config.dropout),
        torch.nn.Linear(config.hidden, 1),
    )


def regression_loss(pred: Any, target: Any) -> Any:
    """The loss train_tiny minimises: the *mean* squared error over the batch (a sum would
    scale every gradient, and so the learning rate, by the batch size)."""
    import torch

    return torch.nn.functional.mse_loss(pred, target, reduction="mean")


def _augment_seed(config: TrainConfig) -> int | None:
    if isinstance(config.augment_seed, str):  # "derived", the one string TrainConfig takes
        return derive_seed(config.seed, "augment")
    return config.augment_seed  # an int, or None (the bug)


def _train(config: TrainConfig, on_step: Callable[[int, float], None] | None) -> TrainResult:
    import torch

    seeds: dict[str, int | None] = dict(seed_everything(config.seed))
    seeds["augment"] = _augment_seed(config)
    for name in config.pinned:  # diagnostic override, see find_unseeded_source
        seeds[name] = PIN_SEED
        if name in RNG_SOURCES:
            reseed(name, PIN_SEED)

    x, y = make_dataset(config.examples, config.features)  # numpy source
    dtype = getattr(torch, config.dtype)
    model = build_tiny_model(config).to(dtype)  # torch source: init, then dropout masks
    bug = config.regression
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=config.lr,
        momentum=0.0 if bug == "no-momentum" else 0.9,
        weight_decay=1e-4 if bug == "weight-decay" else 0.0,
    )
    augment = Augment(seeds["augment"], config.jitter)  # augment source

    order: list[int] = []
    losses: list[float] = []
    model.train(bug != "dropout-off")
    if bug == "grad-accumulates":
        optimizer.zero_grad(set_to_none=True)
    for step in range(1, config.steps + 1):
        if len(order) < config.batch_size:  # new epoch: python source
            order = list(range(config.examples))
            random.shuffle(order)
        idx, order = order[: config.batch_size], order[config.batch_size :]
        xb = torch.from_numpy(augment(x[idx])).to(dtype)  # (B, F)
        yb = torch.from_numpy(y[idx]).to(dtype)  # (B, 1)
        loss = regression_loss(model(xb), yb)
        if bug == "loss-sum":
            loss = loss * config.batch_size  # what reduction="sum" gives for (B, 1)
        if bug != "grad-accumulates":
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
        if on_step is not None:
            on_step(step, losses[-1])
    return TrainResult(config, tuple(losses), seeds, None, model, optimizer)


def _environment() -> dict[str, str]:
    import platform

    import numpy as np
    import torch

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
    }


def _write_artifacts(result: TrainResult, out_dir: Path) -> None:
    import hashlib

    import torch

    out_dir.mkdir(parents=True, exist_ok=True)
    config = asdict(result.config)
    torch.save(
        {
            "model": result.model.state_dict(),
            "optimizer": result.optimizer.state_dict(),
            "step": result.config.steps,
            "config": config,
        },
        out_dir / "checkpoint.pt",
    )
    metrics = {
        "run": "train_tiny",
        "config": config,
        "seeds": result.seeds,
        "steps": result.config.steps,
        "losses": list(result.losses),
        "final_loss": result.final_loss,
        "environment": _environment(),
    }
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    files = []
    for name in ("checkpoint.pt", "metrics.json"):
        data = (out_dir / name).read_bytes()
        files.append({"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"run": "train_tiny", "files": files}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def train_tiny(
    steps: int = 20,
    examples: int = 100,
    seed: int = 0,
    augment_seed: str | int | None = "derived",
    out_dir: str | Path | None = None,
    *,
    config: TrainConfig | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train the tiny model; return its losses, seeds and objects, and save artifacts.

    Pass either the four keyword values or a whole ``config`` (which wins). ``on_step``
    is called with ``(step, loss)`` after every step (the CLI draws a progress bar with it).
    """
    if config is None:
        config = TrainConfig(steps=steps, examples=examples, seed=seed, augment_seed=augment_seed)
    with deterministic() if config.deterministic else contextlib.nullcontext():
        result = _train(config, on_step)
    if out_dir is None:
        return result
    result = replace(result, out_dir=Path(out_dir))
    _write_artifacts(result, Path(out_dir))
    return result


def train_tiny_final_loss(config: TrainConfig) -> float:
    """The step-``config.steps`` loss of one run: the value flake hunting compares."""
    return train_tiny(config=config).final_loss
