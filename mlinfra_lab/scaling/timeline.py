"""One profiled step as a timeline: the phases of a rank, and when each gradient bucket's
all-reduce ran, hidden under backward or exposed after it.

Contract: `step_timeline(run, rank, step)` reads a run's own record (the harness's comm hook
times every bucket: launch and completion, from the step's start) and returns a
`StepTimeline`: the rank's phases as consecutive `Span`s (data wait, forward, backward,
exposed communication, optimizer) and one `BucketSpan` per bucket with the part of its
all-reduce that the backward pass hid and the part left exposed after it.

Design decisions:
- The harness's record, not a profiler trace: it is in every result file (measured or
  emulated, CPU or GPU), with the same clock as the phases, so nothing has to be aligned.
- Backward compute ends when DDP hands over the last bucket (the harness's `ready` mark);
  a bucket's all-reduce is hidden while it overlaps backward compute and exposed after it.
  The exposed parts of different buckets can overlap in time, so their sum can exceed the
  exposed-communication phase, which is wall time.
- By default the step is the rank's median step by wall time, so the picture is a typical
  step, not a warm-up outlier.

Caveats: the first bucket is launched when its gradients are ready, not when backward
begins, so the gap before it is backward compute that had nothing to hide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = ["BucketSpan", "Span", "StepTimeline", "TimelineError", "step_timeline"]

_PHASES = ("data_wait", "forward", "backward", "exposed_comm", "optimizer")


class TimelineError(MlinfraError, ValueError):
    """A run record that holds no per-bucket times, or a rank or step it does not have."""


@dataclass(frozen=True)
class Span:
    """A named interval of one step, in seconds from the step's start."""

    name: str
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class BucketSpan:
    """One bucket's all-reduce: when it ran and how much of it backward compute hid."""

    index: int  # in launch order (DDP launches the last layers' gradients first)
    start: float
    end: float
    hidden_s: float  # the part that overlapped backward compute
    exposed_s: float  # the part after backward compute ended


@dataclass(frozen=True)
class StepTimeline:
    """A rank's phases and buckets in one step."""

    rank: int
    step: int
    phases: list[Span]
    buckets: list[BucketSpan]

    @property
    def backward_end(self) -> float:
        return next(p.end for p in self.phases if p.name == "backward")

    def hidden_share(self) -> float:
        """Share of all the buckets' all-reduce time that backward compute hid."""
        total = sum(b.end - b.start for b in self.buckets)
        return sum(b.hidden_s for b in self.buckets) / total if total > 0 else 1.0


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def step_timeline(run: Any, rank: int = 0, step: int | None = None) -> StepTimeline:
    """The timeline of `step` (default: the median step by wall time) of `rank` in `run`."""
    from mlinfra_lab.scaling.results import load_run

    run = load_run(run)
    ranks = run.ranks()
    if not 0 <= rank < len(ranks):
        raise TimelineError(f"rank {rank} is not in this run of {len(ranks)} rank(s)")
    steps = ranks[rank]["steps"]
    if not steps:
        raise TimelineError(f"rank {rank} recorded no timed steps")
    if step is None:
        by_wall = sorted(range(len(steps)), key=lambda i: steps[i]["step"])
        step = by_wall[len(by_wall) // 2]
    if not 0 <= step < len(steps):
        raise TimelineError(f"step {step} is not among rank {rank}'s {len(steps)} timed steps")
    record = steps[step]
    if "buckets_s" not in record:
        raise TimelineError(
            "this run records no per-bucket times: profile it again with this version of the "
            "harness (`profile(...)` or `mlinfra-lab scaling profile`)"
        )
    phases, t = [], 0.0
    for name in _PHASES:
        phases.append(Span(name, t, t + record[name]))
        t += record[name]
    backward = next(p for p in phases if p.name == "backward")
    waited = next(p for p in phases if p.name == "exposed_comm")
    buckets = [
        BucketSpan(
            i,
            start,
            end,
            _overlap(start, end, backward.start, backward.end),
            _overlap(start, end, backward.end, max(waited.end, end)),
        )
        for i, (start, end) in enumerate(sorted(record["buckets_s"]))
    ]
    return StepTimeline(rank, step, phases, buckets)
