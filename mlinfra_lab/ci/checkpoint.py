"""Checkpoint round trip: save, load into fresh objects, and prove nothing was lost.

Contract: ``checkpoint_roundtrip(model, optimizer)`` saves both state dicts with
``torch.save``, loads them into a freshly built model (its weights scrambled first) and a
fresh optimizer of the same class, and raises `CheckpointMismatch` unless the outputs on
the same inputs and every optimizer state tensor and hyper-parameter are identical.

Design decisions:
- Here, and only here, exact equality is the right check: a checkpoint must be lossless,
  the same computation runs on the same machine in the same process, so one differing bit
  is a real bug (a buffer not saved, a dtype cast, state keyed to the wrong parameter).
- The fresh model is a deep copy whose parameters and floating-point buffers are overwritten
  with NaN before loading, so state that the checkpoint does not carry (a parameter that
  was skipped, a buffer registered with ``persistent=False`` that training changed) shows
  up as NaN outputs instead of passing by luck. A model whose non-persistent buffers are
  rebuilt at construction on purpose should pass ``make_model`` (a factory) instead.
- Comparing outputs in ``eval()`` mode keeps dropout out of the comparison; the original
  model's train/eval mode is restored afterwards.
- Inputs default to a seeded random batch sized from the first 2-D weight (``in_features``
  of the first linear layer); pass ``inputs`` for anything else.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = ["CheckpointMismatch", "CheckpointReport", "checkpoint_roundtrip"]


class CheckpointMismatch(MlinfraError, AssertionError):
    """The reloaded model or optimizer differs from the saved one; says where."""


@dataclass(frozen=True)
class CheckpointReport:
    """What the round trip checked."""

    checkpoint_bytes: int  # size of the serialized checkpoint
    parameters: int  # parameter tensors compared
    optimizer_tensors: int  # optimizer state tensors compared (momentum buffers, ...)
    max_output_diff: float  # always 0.0 when the check passed


def _default_inputs(model: Any) -> Any:
    import torch

    for p in model.parameters():
        if p.dim() == 2:
            gen = torch.Generator().manual_seed(0)
            return torch.randn(4, p.shape[1], generator=gen, dtype=p.dtype)  # (4, in_features)
    raise ValueError("cannot guess the model's input shape: pass inputs=...")


def _compare_state(saved: Any, loaded: Any, where: str) -> int:
    """Compare two optimizer state structures exactly; return how many tensors matched."""
    import torch

    if isinstance(saved, torch.Tensor):
        if not isinstance(loaded, torch.Tensor) or saved.dtype != loaded.dtype:
            raise CheckpointMismatch(f"optimizer {where}: tensor became {type(loaded).__name__}")
        if not torch.equal(saved, loaded):
            raise CheckpointMismatch(f"optimizer {where}: tensor values differ after reload")
        return 1
    if isinstance(saved, dict):
        if set(saved) != set(loaded):
            raise CheckpointMismatch(f"optimizer {where}: keys {sorted(saved)} != {sorted(loaded)}")
        return sum(_compare_state(saved[k], loaded[k], f"{where}[{k!r}]") for k in saved)
    if isinstance(saved, list | tuple):
        if len(saved) != len(loaded):
            raise CheckpointMismatch(f"optimizer {where}: length {len(saved)} != {len(loaded)}")
        return sum(
            _compare_state(s, t, f"{where}[{i}]")
            for i, (s, t) in enumerate(zip(saved, loaded, strict=True))
        )
    if saved != loaded:
        raise CheckpointMismatch(f"optimizer {where}: {saved!r} != {loaded!r}")
    return 0


def checkpoint_roundtrip(
    model: Any,
    optimizer: Any,
    inputs: Any | None = None,
    make_model: Callable[[], Any] | None = None,
) -> CheckpointReport:
    """Save `model` and `optimizer`, reload into fresh objects, prove they are identical.

    The fresh model comes from `make_model()` when given, else from a scrambled deep copy.
    """
    import torch

    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    size = buffer.tell()
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)

    if make_model is not None:
        fresh_model = make_model()
    else:
        fresh_model = copy.deepcopy(model)
        with torch.no_grad():
            for t in [*fresh_model.parameters(), *fresh_model.buffers()]:
                if t.is_floating_point():
                    t.fill_(float("nan"))  # anything not reloaded shows up
    fresh_model.load_state_dict(state["model"])
    fresh_optimizer = type(optimizer)(fresh_model.parameters(), **optimizer.defaults)
    fresh_optimizer.load_state_dict(state["optimizer"])

    x = _default_inputs(model) if inputs is None else inputs
    was_training = model.training
    model.eval()
    fresh_model.eval()
    try:
        with torch.no_grad():
            before, after = model(x), fresh_model(x)
    finally:
        model.train(was_training)
    diff = float((before - after).abs().max()) if before.numel() else 0.0
    if not torch.equal(before, after):
        raise CheckpointMismatch(
            f"reloaded model's outputs differ from the saved model's (max |diff| {diff:.3g}): "
            "a parameter or buffer was not saved or not loaded"
        )
    n_tensors = _compare_state(optimizer.state_dict(), fresh_optimizer.state_dict(), "state_dict")
    n_params = sum(1 for _ in model.parameters())
    return CheckpointReport(size, n_params, n_tensors, diff)
