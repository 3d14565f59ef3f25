"""The legitimate spread of the tiny run's losses, and the tolerance band derived from it.

Contract: ``measure_spread(config, variants)`` trains ``train_tiny`` once as the baseline
(one intra-op thread, deterministic kernels, float32, this CPU's vector kernels) and once per
`Variant`, each a change that must *not* count as a regression, and returns a
`SpreadReport` of every variant's per-step deviation from the baseline. ``derive_band(report,
k)`` turns the largest deviation into the band ``atol = k * max |deviation|`` (``rtol = 0``)
that ``assert_close_to_reference`` checks.

Design decisions:
- The variants are the changes a CI runner legitimately brings: another intra-op thread
  count (``torch.set_num_threads``), deterministic kernels off, float64 instead of float32
  arithmetic (the same inputs, so the deviation is the float32 run's own rounding error,
  a scale for any reordering of its sums), and another vector width of torch's CPU kernels
  (``ATEN_CPU_CAPABILITY=default``, which stands in for an older CPU). A variant whose
  deviation is exactly zero stays in the report: that zero is a finding, with a reason.
- The capability variant needs a fresh process (torch reads the variable once, at import);
  the others run in this process and restore what they changed, so they cost milliseconds.
- One absolute width, no relative part: the deviations come from rounding carried through
  20 updates of the same parameters, not from the size of the step's loss, and one number
  is what a reviewer audits. ``k`` is a factor of headroom for machines not sampled here
  (a wider SIMD unit, more threads, another BLAS): the variants sample a few reorderings,
  a new machine draws another. It must stay far below what a real bug moves
  (``REGRESSIONS`` in ``train.py``); the chapter measures both sides.
- Deviations are compared step by step over the whole loss curve, as the reference check
  does, not only at the last step.

Caveat: a band measured on one machine is a floor, not a proof: record the spread on each
new kind of runner (a GPU host, another CPU) and widen the band only with its measurement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlinfra_lab.ci.train import TrainConfig, train_tiny
from mlinfra_lab.errors import MlinfraError

__all__ = [
    "BASELINE",
    "LEGITIMATE_VARIANTS",
    "Band",
    "SpreadReport",
    "Variant",
    "VariantError",
    "derive_band",
    "measure_spread",
    "run_variant",
]


class VariantError(MlinfraError, RuntimeError):
    """A variant's run failed (in a fresh process, or with a bad setting); says which."""


@dataclass(frozen=True)
class Variant:
    """One way to run the same seeded program; what changes and nothing else."""

    name: str
    threads: int = 1  # torch.set_num_threads for the run
    deterministic: bool = True  # run inside deterministic()
    dtype: str = "float32"  # "float64": the same steps in double precision
    env: dict[str, str] = field(default_factory=dict)  # set before torch's import (fresh process)


BASELINE = Variant("baseline")
LEGITIMATE_VARIANTS: tuple[Variant, ...] = (
    Variant("2 threads", threads=2),
    Variant("deterministic off", deterministic=False),
    Variant("float64 arithmetic", dtype="float64"),
    Variant("no SIMD kernels", env={"ATEN_CPU_CAPABILITY": "default"}),
)


@dataclass(frozen=True)
class SpreadReport:
    """Every variant's losses and their per-step deviation from the baseline's."""

    baseline: tuple[float, ...]
    losses: dict[str, tuple[float, ...]]  # variant name -> loss of step 1..steps

    def deviations(self, name: str) -> tuple[float, ...]:
        """|variant - baseline| at every step."""
        return tuple(abs(v - b) for v, b in zip(self.losses[name], self.baseline, strict=True))

    def max_deviation(self, name: str | None = None) -> float:
        """The largest |deviation| of one variant, or of all variants when `name` is None."""
        names = [name] if name is not None else list(self.losses)
        return max((max(self.deviations(n)) for n in names), default=0.0)

    def max_relative_deviation(self, name: str | None = None) -> float:
        """The largest |deviation| / |baseline| of one variant, or of all of them."""
        names = [name] if name is not None else list(self.losses)
        return max(
            (
                d / abs(b)
                for n in names
                for d, b in zip(self.deviations(n), self.baseline, strict=True)
            ),
            default=0.0,
        )

    def __str__(self) -> str:
        rows = [f"spread of {len(self.baseline)}-step losses against the baseline:"]
        for name in self.losses:
            rows.append(f"  {name:22s} max |deviation| {self.max_deviation(name):.3g}")
        return "\n".join(rows)


@dataclass(frozen=True)
class Band:
    """A tolerance band derived from a measured spread, with its derivation."""

    atol: float
    rtol: float
    k: float  # the headroom factor
    max_deviation: float  # the largest legitimate deviation it was derived from

    def __str__(self) -> str:
        return (
            f"band: atol {self.atol:.3g} = {self.k:g} x the largest legitimate deviation "
            f"{self.max_deviation:.3g}; rtol {self.rtol:g}"
        )


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def run_variant(config: TrainConfig, variant: Variant) -> tuple[float, ...]:
    """The per-step losses of `config` run as `variant` says (in this process; see `env`)."""
    if variant.threads < 1:
        raise VariantError(f"variant {variant.name!r}: threads must be >= 1, got {variant.threads}")
    run_config = dataclasses.replace(
        config, deterministic=variant.deterministic, dtype=variant.dtype
    )
    with _threads(variant.threads):
        return train_tiny(config=run_config).losses


def _fresh(config: TrainConfig, variant: Variant, timeout: float) -> tuple[float, ...]:
    """`run_variant` in a new Python process whose environment carries `variant.env`."""
    job = functools.partial(run_variant, config, dataclasses.replace(variant, env={}))
    with tempfile.TemporaryDirectory(prefix="mlinfra-spread-") as tmp:
        source, target = Path(tmp, "job.pkl"), Path(tmp, "out.pkl")
        source.write_bytes(pickle.dumps(job))
        cmd = [sys.executable, "-m", "mlinfra_lab.ci.worker", str(source), str(target)]
        try:
            proc = subprocess.run(
                cmd,
                env={**os.environ, **variant.env},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise VariantError(
                f"variant {variant.name!r} did not finish in {timeout:g} s in a fresh process; "
                "raise timeout= on a slow or busy machine"
            ) from None
        if not target.exists():
            raise VariantError(f"variant {variant.name!r} crashed: {proc.stdout}{proc.stderr}")
        outcome = pickle.loads(target.read_bytes())
    if not outcome["ok"]:
        raise VariantError(f"variant {variant.name!r} failed: {outcome['error']}")
    return tuple(outcome["value"])


def measure_spread(
    config: TrainConfig | None = None,
    variants: Sequence[Variant] = LEGITIMATE_VARIANTS,
    *,
    timeout: float = 300.0,
) -> SpreadReport:
    """Run the baseline and every variant; return their losses side by side.

    A variant with an ``env`` runs in a fresh process (seconds: torch's import); the others
    run here (milliseconds each) and restore the thread count they changed.
    """
    config = config if config is not None else TrainConfig()
    names = [v.name for v in variants]
    if len(set(names)) != len(names) or BASELINE.name in names:
        raise VariantError(f"variant names must be unique and not {BASELINE.name!r}: {names}")
    baseline = run_variant(config, BASELINE)
    losses = {
        v.name: _fresh(config, v, timeout) if v.env else run_variant(config, v) for v in variants
    }
    return SpreadReport(baseline, losses)


def derive_band(report: SpreadReport, k: float = 10.0) -> Band:
    """``atol = k * (largest legitimate deviation at any step)``, ``rtol = 0``.

    Refuses a report whose variants all agree bit for bit: a zero spread gives a zero band,
    which the next machine fails; measure a variant that reorders the sums first.
    """
    if k < 1:
        raise ValueError(f"k is a headroom factor and must be >= 1, got {k}")
    worst = report.max_deviation()
    if worst == 0.0:
        raise VariantError(
            "every variant matched the baseline bit for bit, so the spread gives no band; "
            "add a variant that changes the summation order (float64, another thread count "
            "or ATEN_CPU_CAPABILITY) or measure on a second kind of machine"
        )
    return Band(atol=k * worst, rtol=0.0, k=k, max_deviation=worst)
