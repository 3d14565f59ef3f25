"""What each CI tier costs: time the checks of chapter 3 on this machine and save them as JSON.

Contract: ``run_bench(config)`` times the tiny training run in-process with and without
``deterministic()`` (`determinism_cost`: interleaved at one and at all threads, and in the
sequential blocks of the first benchmark, so the two protocols meet on one machine), one
fresh-process run (what ``detect_flaky`` pays per run), the lock check and the artifact
validation, and on a machine with a CUDA device what ``deterministic()`` costs there
(`gpu_determinism`), and returns a JSON-ready dict with the device, versions, date and the config;
``mlinfra-lab bench ci`` writes it to ``benchmarks/results/``.

Design decisions:
- Medians of a few repeats after one warm-up run, reported in milliseconds: the first
  call pays torch's lazy imports (about 2 s, see the chapter), which is a fresh-process
  cost, measured separately, not a per-run one.
- The numbers are for budgeting a CI pipeline (how many fresh-process reruns a flake hunt
  can afford), not for asserting anything: tests never assert times.
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["BenchConfig", "run_bench"]


@dataclass(frozen=True)
class BenchConfig:
    """What ``mlinfra-lab bench ci`` measures; saved with the results."""

    repeats: int = 5  # timed repeats per in-process measurement (median reported)
    fresh_runs: int = 2  # fresh processes for the per-process cost (sequential)
    steps: int = 20  # train_tiny steps
    determinism_rounds: int = 15  # interleaved rounds of the determinism measurement
    sequential_trials: int = 5  # repeats of the first benchmark's sequential protocol
    threads: tuple[int, ...] = ()  # intra-op thread counts to compare; () = 1 and all cores
    lock: str = "requirements.lock"  # lock file for the tier-2 timing (skipped if absent)


def _median_ms(func: Callable[[], Any], repeats: int) -> float:
    func()  # warm-up: lazy imports, allocator
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run_bench(config: BenchConfig, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time the CI tiers; return ``{"benchmark", "date", "device", "config", "results"}``."""
    from mlinfra_lab.ci.artifacts import validate_artifacts
    from mlinfra_lab.ci.determinism_cost import measure_determinism_cost
    from mlinfra_lab.ci.lockfile import check_lockfile
    from mlinfra_lab.ci.train import train_tiny
    from mlinfra_lab.runtime import describe

    note = progress or (lambda _: None)
    results: dict[str, Any] = {}
    note("train_tiny in-process, with and without deterministic()")
    threads = config.threads or tuple(sorted({1, os.cpu_count() or 1}))
    results["determinism"] = measure_determinism_cost(
        config.steps, config.determinism_rounds, threads, config.repeats, config.sequential_trials
    )

    note("fresh processes")
    code = f"from mlinfra_lab.ci import train_tiny; train_tiny(steps={config.steps})"
    start = time.perf_counter()
    for _ in range(config.fresh_runs):  # one at a time: the cost of one process, not of a pool
        subprocess.run([sys.executable, "-c", code], check=True)
    results["fresh_process_run_s"] = (time.perf_counter() - start) / config.fresh_runs

    note("artifacts and lock")
    with tempfile.TemporaryDirectory() as tmp:
        train_tiny(steps=config.steps, out_dir=tmp)
        results["validate_artifacts_ms"] = _median_ms(
            functools.partial(validate_artifacts, tmp), config.repeats
        )
    if Path(config.lock).is_file():
        results["check_lockfile_ms"] = _median_ms(
            functools.partial(check_lockfile, config.lock), config.repeats
        )
    import torch

    if torch.cuda.is_available():  # the GPU's cost of deterministic(), and its repeatability
        from mlinfra_lab.ci.gpu_determinism import measure_gpu_determinism_cost

        note("deterministic() on the CUDA device")
        results["gpu_determinism"] = measure_gpu_determinism_cost()
    if hasattr(os, "getloadavg"):  # other jobs on a shared machine inflate every number
        results["load_average_1min"] = os.getloadavg()[0]
    return {
        "benchmark": "ci",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": describe().as_dict(),
        "config": asdict(config),
        "results": results,
    }
