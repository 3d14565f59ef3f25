"""What `deterministic()` costs the tiny training run, measured so that two protocols can be compared.

Contract: ``measure_determinism_cost(steps, rounds, threads)`` times ``train_tiny`` with the
default kernels, under ``deterministic()``, and under ``deterministic()`` with
``torch.utils.deterministic.fill_uninitialized_memory`` off, at each intra-op thread count
in `threads`, *interleaved* (every round runs each variant once, the order rotating from
round to round, so all see the same machine load); and once more in *sequential blocks*
(all deterministic runs, then all default runs, at torch's default thread count: the
protocol of the 2026-12-02 benchmark), repeated `sequential_trials` times so the spread of
that protocol's ratio shows. It returns a JSON-ready dict of medians, quartiles and ratios,
whether the two settings gave bit-identical losses, and the load average before and after.

Design decisions:
- Why two protocols: a ratio of two medians taken minutes apart on a shared machine
  measures the load as much as the kernels; interleaving makes the load common to both.
  Measuring both in one run shows how much of a disagreement is the protocol.
- Why thread counts: on a machine with as many busy processes as cores, an operation split
  over two intra-op threads waits for whichever thread the scheduler delays; the tail of the
  run times grows, whatever the kernels do. One thread is the kernels' cost.
- What the flag can change on a CPU (PyTorch's ``use_deterministic_algorithms`` docs): a few
  CPU operations switch implementation (``index_put_``/``put_`` with ``accumulate=True``,
  the backward of indexing with a list of tensors), and every ``torch.empty``-style
  allocation is filled with NaN while ``fill_uninitialized_memory`` is on (the default).
  The third variant separates that fill from the rest.
- Quartiles beside medians: a reader can see whether two medians differ by more than
  their spread. Nothing here asserts a time (tests never do).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["VARIANTS", "measure_determinism_cost"]

VARIANTS = ("default", "deterministic", "deterministic, no fill")


@contextlib.contextmanager
def _fill_uninitialized(enabled: bool) -> Iterator[None]:
    from mlinfra_lab import runtime

    # torch.utils.deterministic imports torch's compiler, which imports triton: on a machine
    # without a GPU the interpreter must be switched on first (`runtime.ensure_triton_mode`)
    if "triton" not in sys.modules:  # already imported: nothing left to switch
        runtime.ensure_triton_mode()
    import torch.utils.deterministic as det

    # torch makes this module attribute a property by swapping the module's class at run
    # time, which its type stubs do not show: the ignores below are for the checker only.
    saved = det.fill_uninitialized_memory  # type: ignore[attr-defined]
    det.fill_uninitialized_memory = enabled  # type: ignore[attr-defined]
    try:
        yield
    finally:
        det.fill_uninitialized_memory = saved  # type: ignore[attr-defined]


def _runner(variant: str, steps: int) -> Callable[[], None]:
    from mlinfra_lab.ci.train import TrainConfig, train_tiny

    config = TrainConfig(steps=steps, deterministic=variant != "default")

    def run() -> None:
        with _fill_uninitialized(variant != "deterministic, no fill"):
            train_tiny(config=config)

    return run


def _stats(ms: Sequence[float]) -> dict[str, float]:
    q1, median, q3 = statistics.quantiles(ms, n=4, method="inclusive")
    return {"median_ms": median, "q1_ms": q1, "q3_ms": q3, "min_ms": min(ms), "max_ms": max(ms)}


def _timed(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e3


def _interleaved(steps: int, rounds: int) -> dict[str, Any]:
    runs = {v: _runner(v, steps) for v in VARIANTS}
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(rounds + 1):  # round 0 warms every variant up and is dropped
        for k in range(len(VARIANTS)):
            variant = VARIANTS[(r + k) % len(VARIANTS)]
            ms = _timed(runs[variant])
            if r:
                times[variant].append(ms)
    out: dict[str, Any] = {v: _stats(t) for v, t in times.items()}
    base = out["default"]["median_ms"]
    out["ratio_deterministic"] = out["deterministic"]["median_ms"] / base
    out["ratio_deterministic_no_fill"] = out["deterministic, no fill"]["median_ms"] / base
    return out


def _sequential(steps: int, repeats: int, trials: int) -> dict[str, Any]:
    runs = [_trial(steps, repeats) for _ in range(trials)]
    ratios = [t["ratio_deterministic"] for t in runs]
    return {"trials": runs, "ratios": ratios, "ratio_deterministic": statistics.median(ratios)}


def _trial(steps: int, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for variant in ("deterministic", "default"):  # the order of the 2026-12-02 bench
        run = _runner(variant, steps)
        run()  # warm-up
        out[variant] = _stats([_timed(run) for _ in range(repeats)])
    out["ratio_deterministic"] = out["deterministic"]["median_ms"] / out["default"]["median_ms"]
    return out


def measure_determinism_cost(
    steps: int = 20,
    rounds: int = 15,
    threads: Sequence[int] = (1, 2),
    repeats: int = 5,
    sequential_trials: int = 5,
) -> dict[str, Any]:
    """Both protocols on one machine in one run (see the module docstring)."""
    import torch

    if steps < 1 or rounds < 3 or repeats < 3 or not threads or min(threads) < 1:
        raise ValueError(
            "need steps >= 1, rounds >= 3, repeats >= 3 and thread counts >= 1 "
            f"(got steps={steps}, rounds={rounds}, repeats={repeats}, threads={list(threads)})"
        )
    if sequential_trials < 0:
        raise ValueError(f"sequential_trials must be >= 0 (0 skips it), got {sequential_trials}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    default_threads = torch.get_num_threads()
    result: dict[str, Any] = {
        "protocol": (
            "interleaved: every round runs each variant once, the order rotating; round 0 "
            "dropped; sequential: warm-up then `repeats` runs of deterministic, then of default, "
            "`sequential_trials` times"
        ),
        "steps": steps,
        "rounds": rounds,
        "repeats": repeats,
        "default_threads": default_threads,
        "load_average_1min_before": load,
        "interleaved": {},
    }
    try:
        for t in threads:
            torch.set_num_threads(t)
            result["interleaved"][f"threads={t}"] = _interleaved(steps, rounds)
    finally:
        torch.set_num_threads(default_threads)
    result["sequential"] = (
        {f"threads={default_threads}": _sequential(steps, repeats, sequential_trials)}
        if sequential_trials
        else {}
    )
    from mlinfra_lab.ci.train import TrainConfig, train_tiny

    losses = [
        train_tiny(config=TrainConfig(steps=steps, deterministic=d)).losses for d in (False, True)
    ]
    result["same_losses"] = losses[0] == losses[1]  # did the flag change any result bit?
    result["load_average_1min_after"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return result
