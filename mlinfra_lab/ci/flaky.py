"""Hunt flakes: rerun a check in fresh processes with the same seed, then bisect the RNG sources.

Contract: ``detect_flaky(target, runs=5)`` runs a pytest node id or a callable ``runs`` times,
each in a fresh Python process with the same seed, and reports whether the outcomes
(pass/fail) and the returned values agree; ``find_unseeded_source(run)`` bisects over the
random sources of a disagreeing run and names the one that is not derived from the base seed.

Design decisions:
- Fresh processes, not a loop in this one: a source seeded from OS entropy, from the
  process id or from a salted ``hash()`` looks perfectly stable inside one process that
  re-seeds itself, and only shows when a new interpreter starts, which is what CI does.
- Reruns here are a *diagnosis*, never a way to turn a build green: the report says
  "flaky" and the next step is to fix the test or quarantine it with an issue.
- Bisection pins a subset of sources (re-seeds them with a constant) and leaves the rest
  free: if the free half still makes runs disagree, the culprit is in it. Four sources take
  two rounds; a final run with only the culprit pinned confirms that pinning it (that is,
  deriving its seed from the base seed) makes the run stable.
- ``fresh_processes=False`` repeats runs in this process instead; a notebook needs it for a
  pipeline defined in the notebook itself (such a function cannot be sent to a new
  process). It finds entropy-seeded sources, not the ones that only differ across processes.

Caveat: the bisection assumes one culprit (or that any one culprit is worth fixing first);
with several it names one of them. Rerun after fixing it.
"""

from __future__ import annotations

import functools
import math
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mlinfra_lab.ci.train import TRAIN_SOURCES, TrainConfig, train_tiny_final_loss

__all__ = [
    "BisectReport",
    "FlakyReport",
    "RunOutcome",
    "Trial",
    "detect_flaky",
    "find_unseeded_source",
]


@dataclass(frozen=True)
class RunOutcome:
    """One run: did it pass, what did it return, and the last line of its error."""

    ok: bool
    value: Any
    error: str = ""


@dataclass(frozen=True)
class FlakyReport:
    """The runs of one target and whether they agree (values within ``atol``)."""

    target: str
    runs: tuple[RunOutcome, ...]
    atol: float = 0.0

    @property
    def outcomes_agree(self) -> bool:
        return len({run.ok for run in self.runs}) <= 1

    @property
    def spread(self) -> float:
        """Largest difference between the runs' numeric values (0.0 when they agree)."""
        found = [_numbers(run.value) for run in self.runs if run.ok]
        arrays = [a for a in found if a is not None]
        if len(arrays) < 2 or len({len(a) for a in arrays}) > 1:
            return 0.0
        return max(max(col) - min(col) for col in zip(*arrays, strict=True)) if arrays[0] else 0.0

    @property
    def values_agree(self) -> bool:
        values = [run.value for run in self.runs if run.ok]
        if len(values) < 2:
            return True
        if all(_numbers(v) is not None for v in values):
            return self.spread <= self.atol
        return all(v == values[0] for v in values)

    @property
    def flaky(self) -> bool:
        return not (self.outcomes_agree and self.values_agree)

    def __str__(self) -> str:
        passed = sum(run.ok for run in self.runs)
        verdict = "FLAKY" if self.flaky else "stable"
        lines = [f"{self.target}: {verdict} ({passed}/{len(self.runs)} runs passed)"]
        if not self.values_agree:
            lines.append(f"  values disagree: spread {self.spread:.3g} > atol {self.atol:g}")
        for i, run in enumerate(self.runs, 1):
            shown = _short(run.value) if run.ok else f"FAILED {run.error}"
            lines.append(f"  run {i}: {shown}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Trial:
    """One bisection step: which sources were pinned, and whether the runs still varied."""

    pinned: tuple[str, ...]
    free: tuple[str, ...]
    varies: bool
    report: FlakyReport


@dataclass(frozen=True)
class BisectReport:
    """The culprit source (None when the runs were stable) and every trial that led to it."""

    culprit: str | None
    confirmed: bool  # pinning only the culprit made the runs agree
    trials: tuple[Trial, ...]

    def __str__(self) -> str:
        lines = []
        for t in self.trials:
            state = "vary" if t.varies else "agree"
            lines.append(f"  free {list(t.free)!s:<40} -> runs {state}")
        if self.culprit is None:
            head = "runs agree with nothing pinned: no unseeded source to find"
        else:
            proof = "confirmed" if self.confirmed else "NOT confirmed"
            head = f"unseeded source: {self.culprit!r} ({proof}: pinning it alone makes runs agree)"
        return "\n".join([head, *lines])


def _numbers(value: Any) -> list[float] | None:
    """A flat list of floats for a number or a sequence of numbers, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, list | tuple) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        return [float(v) for v in value]
    return None


def _short(value: Any) -> str:
    nums = _numbers(value)
    if nums is not None and len(nums) == 1 and math.isfinite(nums[0]):
        return f"{nums[0]!r}"
    text = repr(value)
    return text if len(text) < 70 else text[:67] + "..."


def _pytest_command(node_id: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node_id]


def _collect(proc: subprocess.Popen, out: Path, is_pytest: bool, timeout: float) -> RunOutcome:
    """Wait for one fresh process and turn what it left into a `RunOutcome`."""
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return RunOutcome(False, None, f"timed out after {timeout:g} s")
    last = text.strip().splitlines()[-1] if text.strip() else ""
    if is_pytest:
        return RunOutcome(proc.returncode == 0, None, last)
    if out.exists():
        return RunOutcome(**pickle.loads(out.read_bytes()))
    return RunOutcome(False, None, f"worker crashed: {last}")


def _run_fresh(
    target: str | Callable[[], Any],
    runs: int,
    cwd: Path,
    timeout: float,
    done: Callable[[], None],
) -> list[RunOutcome]:
    """Start all runs as fresh processes (a few at a time), collect their outcomes."""
    parallel = max(1, min(runs, os.cpu_count() or 1))
    outcomes: list[RunOutcome] = []
    with tempfile.TemporaryDirectory(prefix="mlinfra-flaky-") as tmp:
        job = Path(tmp) / "job.pkl"
        if not isinstance(target, str):
            job.write_bytes(pickle.dumps(target))
        pending = list(range(runs))
        while pending:
            batch, pending = pending[:parallel], pending[parallel:]
            procs = []
            for i in batch:
                out = Path(tmp) / f"out{i}.pkl"
                cmd = (
                    _pytest_command(target)
                    if isinstance(target, str)
                    else [sys.executable, "-m", "mlinfra_lab.ci.worker", str(job), str(out)]
                )
                proc = subprocess.Popen(
                    cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
                procs.append((proc, out))
            for proc, out in procs:
                outcomes.append(_collect(proc, out, isinstance(target, str), timeout))
                done()
    return outcomes


def detect_flaky(
    target: str | Callable[[], Any],
    runs: int = 5,
    *,
    atol: float = 0.0,
    fresh_processes: bool = True,
    cwd: str | Path | None = None,
    timeout: float = 300.0,
    name: str | None = None,
    progress: bool = False,
) -> FlakyReport:
    """Run `target` `runs` times with the same seed; report whether the runs agree.

    `target` is a pytest node id (``"tests/test_x.py::test_y"``, run with ``python -m
    pytest`` in `cwd`) or a zero-argument callable returning a value to compare (a
    number or a sequence of numbers are compared within `atol`, anything else with
    ``==``). A callable must be picklable unless ``fresh_processes=False``. `name` labels
    the report (default: the node id or the function's name); `progress` draws a bar.
    """
    if runs < 2:
        raise ValueError(f"need at least 2 runs to compare, got runs={runs}")
    if name is None and isinstance(target, functools.partial):
        name = f"{target.func.__name__}(...)"
    if name is None:
        name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
    if not fresh_processes and isinstance(target, str):
        raise ValueError("a pytest node id always runs in fresh processes")
    from mlinfra_lab.progress import progress_bar

    with progress_bar(total=runs, desc=f"detect_flaky {name}", unit="run", enabled=progress) as bar:
        if fresh_processes or isinstance(target, str):  # a node id: refused above otherwise
            outcomes = _run_fresh(target, runs, Path(cwd or os.getcwd()), timeout, bar.update)
        else:
            outcomes = []
            for _ in range(runs):
                try:
                    outcomes.append(RunOutcome(True, target()))
                except Exception as err:  # noqa: BLE001 (a failing run is an outcome to count)
                    outcomes.append(RunOutcome(False, None, f"{type(err).__name__}: {err}"))
                bar.update()
    return FlakyReport(str(name), tuple(outcomes), atol)


def _pinned_final_loss(config: TrainConfig, pinned: tuple[str, ...]) -> float:
    return train_tiny_final_loss(replace(config, pinned=tuple(pinned)))


def find_unseeded_source(
    run: TrainConfig | Callable[[tuple[str, ...]], Any] | None = None,
    sources: Sequence[str] | None = None,
    *,
    runs: int = 2,
    atol: float = 0.0,
    fresh_processes: bool = True,
    confirm: bool = True,
    progress: bool = False,
) -> BisectReport:
    """Bisect over `sources` and name the one whose seed is not derived from the base seed.

    `run` is a `TrainConfig` (default: ``train_tiny`` with the bug, ``augment_seed=None``;
    sources default to ``TRAIN_SOURCES``) or any callable ``run(pinned) -> value`` that
    re-seeds every source named in `pinned` with a constant before drawing from it.
    `progress` draws a bar over the trials (each is `runs` runs of `run`).
    """
    if run is None:
        run = TrainConfig(augment_seed=None)
    if isinstance(run, TrainConfig):
        run, sources = functools.partial(_pinned_final_loss, run), sources or TRAIN_SOURCES
    if not sources:
        raise ValueError("name the random sources to bisect over (sources=...)")
    sources = tuple(sources)
    trials: list[Trial] = []

    def varies(free: tuple[str, ...]) -> bool:
        pinned = tuple(s for s in sources if s not in free)
        report = detect_flaky(
            functools.partial(run, pinned), runs, atol=atol, fresh_processes=fresh_processes
        )
        trials.append(Trial(pinned, free, report.flaky, report))
        bar.update()
        return report.flaky

    from mlinfra_lab.progress import progress_bar

    most = 1 + math.ceil(math.log2(len(sources))) + int(confirm)  # baseline, halvings, confirm
    bar = progress_bar(total=most, desc="find_unseeded_source", unit="trial", enabled=progress)

    with bar:
        if not varies(sources):
            return BisectReport(None, False, tuple(trials))
        candidates = sources
        while len(candidates) > 1:
            half = candidates[: len(candidates) // 2]
            candidates = half if varies(half) else candidates[len(candidates) // 2 :]
        culprit = candidates[0]
        confirmed = False
        if confirm:
            others = tuple(s for s in sources if s != culprit)
            confirmed = not varies(others)
    return BisectReport(culprit, confirmed, tuple(trials))
