"""The result file of one profiled run: schema, loading with clear errors, and the summaries.

Contract: `load_run(path)` returns a `RunResult` or raises `ResultFileError` naming the file
and what is wrong with it; `RunResult` answers the questions the debugging plan asks (step
time, throughput, per-phase medians, communication share, per-rank compute, in-job bus
bandwidth, loader headroom).

Design decisions:
- One JSON per run: the config, world size, backend, device and versions, and per rank a
  list of steps, each with the five phases of the course text (data wait, forward, backward,
  exposed communication, optimizer), the step's wall time, and the comm hook's bucket
  timings. Everything else is derived here, so a file from a cluster and a file from a
  laptop are read by the same code.
- Medians over steps, then over ranks: a shared, noisy machine moves means, not medians.
- A synchronous step lasts as long as its slowest rank, so the run's step time is the
  median over steps of the per-step maximum over ranks.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = ["PHASES", "SCHEMA", "ResultFileError", "RunResult", "load_run", "save_run"]

SCHEMA = "mlinfra-scaling-run/1"
PHASES = ("data_wait", "forward", "backward", "exposed_comm", "optimizer")
_STEP_KEYS = PHASES + ("step", "comm_total", "comm_bytes")


class ResultFileError(MlinfraError, ValueError):
    """A run result file is missing, not JSON, or not a scaling run."""


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


@dataclass(frozen=True)
class RunResult:
    """A validated run result (the parsed JSON in `data`)."""

    data: dict[str, Any]
    source: str = "<memory>"

    # -- identity ---------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return int(self.data["world_size"])

    @property
    def config(self) -> dict[str, Any]:
        return self.data["config"]

    @property
    def faults(self) -> list[str]:
        return list(self.config.get("faults", []))

    @property
    def rank_batch(self) -> int:
        return int(self.data["rank_batch"])

    @property
    def global_batch(self) -> int:
        return self.rank_batch * self.world_size

    def ranks(self) -> list[dict[str, Any]]:
        return self.data["ranks"]

    # -- per-phase timings ------------------------------------------------------------------
    def rank_medians(self) -> list[dict[str, float]]:
        """Per rank, the median over steps of each phase, the step and total comm time (s)."""
        return [
            {key: _median([s[key] for s in r["steps"]]) for key in _STEP_KEYS} for r in self.ranks()
        ]

    def breakdown(self) -> dict[str, float]:
        """The typical rank's step: median over ranks of each per-rank median (seconds)."""
        per_rank = self.rank_medians()
        return {key: _median([r[key] for r in per_rank]) for key in _STEP_KEYS}

    def step_time(self) -> float:
        """Median over steps of the slowest rank's step wall time (s)."""
        n_steps = min(len(r["steps"]) for r in self.ranks())
        return _median([max(r["steps"][i]["step"] for r in self.ranks()) for i in range(n_steps)])

    def throughput(self) -> float:
        """Samples per second of the whole job."""
        return self.global_batch / self.step_time()

    def comm_share(self) -> float:
        """Exposed communication as a share of the typical rank's step time."""
        b = self.breakdown()
        return b["exposed_comm"] / b["step"] if b["step"] > 0 else 0.0

    def compute_per_rank(self) -> list[float]:
        """Each rank's forward + backward (compute) time, lower quartile over steps (s).

        A straggler is slow at every step; a rank that a busy neighbour slowed in a few
        steps is not. The lower quartile keeps the first and ignores the second.
        """
        out = []
        for r in self.ranks():
            values = sorted(s["forward"] + s["backward"] for s in r["steps"])
            out.append(values[(len(values) - 1) // 4])
        return out

    def straggler_scores(self) -> list[float]:
        """Each rank's compute time over the typical rank's: 1.0 is typical, 2.0 twice as slow.

        The typical rank is the lower median, so that with two ranks a straggler is compared
        with the other rank, not with the mean of itself and the other.
        """
        compute = self.compute_per_rank()
        mid = sorted(compute)[(len(compute) - 1) // 2]
        return [c / mid if mid > 0 else 1.0 for c in compute]

    def busbw(self) -> float | None:
        """In-job all-reduce bus bandwidth in bytes/s (nccl-tests' busbw); None at world 1.

        A bucket's all-reduce ends on every rank at once but starts when each rank launches
        it, so early ranks also time their wait for late ones. The rank that launched last
        waited least: per step, the minimum over ranks of the communication time (the union
        of the buckets' in-flight intervals) is the transfer itself.
        """
        n = self.world_size
        if n < 2:
            return None
        n_steps = min(len(r["steps"]) for r in self.ranks())
        seconds = _median(
            [min(r["steps"][i]["comm_total"] for r in self.ranks()) for i in range(n_steps)]
        )
        if seconds <= 0:
            return None
        return self.breakdown()["comm_bytes"] / seconds * 2 * (n - 1) / n

    def loader_samples_per_s(self) -> float | None:
        """Median over ranks of what the data loader alone sustained (samples/s per rank)."""
        found = [r.get("loader_samples_per_s") for r in self.ranks()]
        values = [v for v in found if v]
        return _median(values) if values else None

    def loader_headroom(self) -> float | None:
        """Loader-alone rate over the rate training consumed (<1.5: the loader caps the job)."""
        alone = self.loader_samples_per_s()
        if alone is None:
            return None
        return alone / (self.rank_batch / self.step_time())

    def to_json(self) -> str:
        return json.dumps(self.data, indent=1)


def _fail(source: str, what: str) -> ResultFileError:
    return ResultFileError(
        f"{source}: {what}. Expected a run file written by `mlinfra-lab scaling profile` "
        f"(schema {SCHEMA!r}); re-run the profile to regenerate it."
    )


def validate(data: Any, source: str = "<memory>") -> RunResult:
    """Check the structure of a parsed result and wrap it; raise `ResultFileError` if bad."""
    if not isinstance(data, dict):
        raise _fail(source, f"top level is {type(data).__name__}, not an object")
    if data.get("schema") != SCHEMA:
        raise _fail(source, f"schema is {data.get('schema')!r}")
    for key in ("config", "world_size", "rank_batch", "ranks"):
        if key not in data:
            raise _fail(source, f"missing key {key!r}")
    ranks = data["ranks"]
    if not isinstance(ranks, list) or len(ranks) != data["world_size"]:
        raise _fail(source, f"'ranks' must list {data['world_size']} ranks")
    for r in ranks:
        steps = r.get("steps") if isinstance(r, dict) else None
        if not steps:
            raise _fail(
                source, f"rank {r.get('rank') if isinstance(r, dict) else '?'} has no steps"
            )
        for s in steps:
            bad = [k for k in _STEP_KEYS if not isinstance(s.get(k), (int, float))]
            if bad:
                raise _fail(source, f"rank {r.get('rank')} step lacks numeric {', '.join(bad)}")
    return RunResult(data, source)


def load_run(path: str | Path | RunResult | dict) -> RunResult:
    """Read and validate a run result file (a `RunResult` or dict passes through validation)."""
    if isinstance(path, RunResult):
        return path
    if isinstance(path, dict):
        return validate(path)
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ResultFileError(f"{source}: cannot read ({err.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise _fail(source, f"not valid JSON (line {err.lineno}: {err.msg})") from None
    return validate(data, source)


def save_run(result: RunResult | dict, path: str | Path) -> Path:
    """Write a run result as JSON, creating parent folders."""
    data = result.data if isinstance(result, RunResult) else result
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return path
