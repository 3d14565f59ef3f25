"""Synthetic profiled runs: what `profile` would record for stated faults, without running it.

Contract: `synthesize_run(world_size, faults, seed)` returns a `RunResult` shaped like a file
of `mlinfra_lab.scaling.data` (same schema, phases, buckets and loader probe), computed from
the CPU path's emulation instead of measured; `mystery_set(seed)` draws the lab's mystery
runs (`Mystery`: name, run with its faults hidden, the faults and the causes they are);
`causes_of(faults)` maps fault specs to the `diagnose.CAUSES` they are.

Design decisions:
- The arithmetic is the harness's (see `config`, `harness`): each layer sleeps
  ``device_overhead_ms + device_us_per_sample * batch`` forward and twice that backward, plus
  a few ms of real matmul measured on the 2-core machine; a straggler computes `ms` longer
  during forward; each bucket is all-reduced when every rank has it ready, the buckets share
  one link at the capped rate (``2(p-1)/p`` bytes per byte reduced, see `model`); a rank's
  exposed communication is the wait from its last bucket ready to the last all-reduce's end,
  and its ``comm_total`` the union of its buckets' in-flight intervals. ``slow_data`` is the
  shared serialised source: the ranks are served one after another, `ms` each, in a random
  order every step. Calibrated so that the healthy and faulty 4-rank runs land within ~10%
  of the committed measured ones.
- Every random source is one seeded NumPy generator (per-phase 2% noise, the serving order
  of a shared source): the same arguments give the same run.
- A mystery set is drawn from one seed: a healthy run, three runs with one fault each (three
  different kinds), and one run with two faults at once, at 4 or 8 ranks, with the straggler
  on any rank and every magnitude drawn. The pair never includes ``no_overlap``:
  "communication" is the exposed all-reduce that nothing else explains, so it is named alone.
- A mystery's run goes out through `hide_faults`: nothing in it (config, source, seed) names
  the answer, so code under test can only find the faults in the timings.

Caveat: a model, not a measurement: no scheduler noise beyond the drawn 2%, no warm-up, and
the loader probe is the shared source's arithmetic. Chapter 2 uses the measured files; this
makes fresh cases for the lab's hidden tests and mysteries.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, replace

import numpy as np

from mlinfra_lab.scaling.config import RunConfig, parse_fault
from mlinfra_lab.scaling.results import SCHEMA, RunResult, validate

__all__ = ["FAULT_CAUSE", "Mystery", "causes_of", "hide_faults", "mystery_set", "synthesize_run"]

FAULT_CAUSE = {
    "straggler": "straggler",
    "slow_data": "data_loading",
    "small_batch": "small_batch",
    "no_overlap": "communication",
    "slow_transport": "transport",
}
MATMUL_MS = 3.0  # real Linear forward on the 2-core machine, on top of the emulated sleep
HEALTHY_READ_MS = 1.0  # one batch from the healthy loader (shared by the ranks of a host)
ALPHA_S = 2e-5  # per message step of the emulated link's all-reduce
NOISE = 0.02  # lognormal sigma of every timed phase
PAIRABLE = ("straggler", "slow_data", "small_batch", "slow_transport")


def causes_of(faults: tuple[str, ...] | list[str]) -> frozenset[str]:
    """The causes `faults` (spec strings) are, ``{"none"}`` for none."""
    return frozenset(FAULT_CAUSE[parse_fault(f).kind] for f in faults) or frozenset({"none"})


def _layer_ms(config: RunConfig, batch: int) -> float:
    return config.device_overhead_ms + config.device_us_per_sample * batch / 1e3


def synthesize_run(
    world_size: int,
    faults: tuple[str, ...] | list[str] = (),
    seed: int = 0,
    config: RunConfig | None = None,
) -> RunResult:
    """A run at `world_size` ranks with `faults` (``"straggler:rank=1,ms=80"``, ...)."""
    if world_size < 1 or int(world_size) != world_size:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    base = config or RunConfig(steps=6, warmup=2)
    config = base.with_faults(*faults)
    rng = np.random.default_rng(seed)
    p, batch = int(world_size), config.rank_batch(int(world_size))
    layer_bytes = (config.hidden * config.hidden + config.hidden) * 4  # fp32 weight + bias
    grad_bytes = config.layers * layer_bytes
    n_buckets = 1 if config.fault("no_overlap") else config.layers  # one layer per bucket
    rate = config.link_bytes_per_s() or 25e6
    wire = (
        (grad_bytes / n_buckets) * 2 * (p - 1) / p / rate + 2 * (p - 1) * ALPHA_S if p > 1 else 0.0
    )
    slow, straggler = config.fault("slow_data"), config.fault("straggler")
    read_s = (slow.get("ms") if slow else HEALTHY_READ_MS) / 1e3
    fwd_ms = config.layers * _layer_ms(config, batch) + MATMUL_MS
    speed = rng.normal(1.0, 0.005, size=p).tolist()  # each rank's own, steady speed

    def noisy(value: float) -> float:
        return value * float(rng.lognormal(0.0, NOISE))

    ranks: list[dict] = [
        {
            "rank": r,
            "batch": batch,
            "steps": [],
            "buckets": n_buckets,
            "loader_samples_per_s": batch / (p * read_s),
        }
        for r in range(p)
    ]
    for step in range(config.steps):
        order = rng.permutation(p).tolist()  # who the shared source serves first
        data = [noisy(read_s * (order[r] + 0.5)) if slow else noisy(3e-4) for r in range(p)]
        fwd = [noisy(fwd_ms / 1e3) * speed[r] for r in range(p)]
        if straggler and int(straggler.get("rank")) < p:
            fwd[int(straggler.get("rank"))] += straggler.get("ms") / 1e3
        bwd = [noisy(2 * fwd_ms / 1e3) * speed[r] for r in range(p)]
        # bucket j is ready on rank r at this time; reduced when every rank has it
        ready = [
            [data[r] + fwd[r] + bwd[r] * (j + 1) / n_buckets for j in range(n_buckets)]
            for r in range(p)
        ]
        ends, link_free = [], 0.0
        for j in range(n_buckets):
            link_free = max(link_free, max(ready[r][j] for r in range(p))) + noisy(wire)
            ends.append(link_free)
        for r in range(p):
            done = data[r] + fwd[r] + bwd[r]
            exposed = max(ends[-1] - done, 0.0)
            opt = noisy(1e-3)
            spans = [[ready[r][j], max(ends[j], ready[r][j])] for j in range(n_buckets)]
            busy, last = 0.0, 0.0
            for a, b in spans:  # union of the in-flight intervals (sorted by start)
                busy += max(0.0, b - max(a, last))
                last = max(last, b)
            ranks[r]["steps"].append(
                {
                    "data_wait": data[r],
                    "forward": fwd[r],
                    "backward": bwd[r],
                    "exposed_comm": exposed,
                    "optimizer": opt,
                    "step": data[r] + fwd[r] + bwd[r] + exposed + opt,
                    "comm_total": busy if p > 1 else 0.0,
                    "buckets_s": spans if p > 1 else [],
                    "comm_bytes": float(grad_bytes),
                    "loss": float(0.4 * 0.97**step),
                }
            )
    return validate(
        {
            "schema": SCHEMA,
            "config": config.to_dict(),
            "world_size": p,
            "backend": "gloo",
            "rank_batch": batch,
            "grad_bytes": grad_bytes,
            "environment": {"device": "cpu", "synthetic": True, "seed": int(seed)},
            "ranks": ranks,
        },
        f"<synthetic {p} ranks {list(faults)}>",
    )


@dataclass(frozen=True)
class Mystery:
    """One drawn mystery: its name, its run (faults hidden), and the answer."""

    name: str
    run: RunResult
    faults: tuple[str, ...]

    @property
    def causes(self) -> frozenset[str]:
        return causes_of(self.faults)


def _draw_fault(kind: str, world_size: int, rng: np.random.Generator) -> str:
    if kind == "straggler":
        return (
            f"straggler:rank={int(rng.integers(world_size))},ms={float(rng.uniform(60, 200)):.0f}"
        )
    if kind == "slow_data":
        return f"slow_data:ms={float(rng.uniform(30, 60)):.0f}"
    if kind == "small_batch":
        return f"small_batch:global={world_size * int(rng.choice([2, 4, 8]))}"
    if kind == "slow_transport":
        return f"slow_transport:mbps={float(rng.uniform(25, 80)):.0f}"
    return kind  # no_overlap


def hide_faults(run: RunResult) -> RunResult:
    """`run` with every trace of its faults removed, as the lab hands it to code under test:
    the config's fault list, the source (a synthetic run's names its faults, a measured one's
    file name does) and the synthesis seed (with it, the faults could be searched for)."""
    data = dict(run.data)
    data["config"] = dict(data["config"], faults=[], note="faults hidden for the lab")
    data["environment"] = {k: v for k, v in data.get("environment", {}).items() if k != "seed"}
    return replace(run, data=data, source="<faults hidden>")


def mystery_set(seed: int) -> list[Mystery]:
    """Five mysteries ``a``..``e`` drawn from `seed`: one healthy, three with one fault each,
    one with two faults at once, in a drawn order, at 4 or 8 ranks each."""
    rng = np.random.default_rng(seed)
    single = [str(k) for k in rng.choice(sorted(FAULT_CAUSE), size=3, replace=False)]
    pair = tuple(str(k) for k in rng.choice(PAIRABLE, size=2, replace=False))
    kinds: list[tuple[str, ...]] = [(), *((k,) for k in single), pair]
    out = []
    for name, i in zip(string.ascii_lowercase, rng.permutation(len(kinds)), strict=False):
        p = int(rng.choice([4, 8]))
        faults = tuple(_draw_fault(k, p, rng) for k in kinds[i])
        run = synthesize_run(p, faults, seed=int(rng.integers(2**31)))
        out.append(Mystery(name, hide_faults(run), faults))
    return out
