"""Why did the larger run scale badly? Compare two profiled runs and rank the causes.

Contract: `diagnose(small_run, large_run)` returns a `Diagnosis` whose `primary_cause` is one
of `CAUSES` (communication, data_loading, straggler, small_batch, transport, none), with the
evidence it rests on and every hypothesis ranked by how much of the lost efficiency it
explains; `Diagnosis.report()` is the readable form `mlinfra-lab scaling diagnose` prints.

Design decisions (the course text's five steps, made arithmetic):
- Scaling efficiency is throughput per rank at the large scale over that at the small
  scale. Per rank, throughput is batch / step time, so the loss is the growth of *seconds
  per sample*, and each phase's growth in seconds per sample is the share it explains:
  data wait (step 1b), compute at a shrunken per-rank batch (step 2), exposed
  communication split into transport (step 3: the in-job bus bandwidth collapsed, or NCCL's
  log shows a TCP/SHM fallback) and ordinary communication (step 1), and a straggler's
  extra compute (step 4), which the other ranks see as waiting inside the all-reduce, so it
  is taken out of their exposed communication before that is scored. When the per-rank
  batch shrank, a phase's per-step growth costs more per sample; the part due to the
  smaller batch alone (the growth times 1/b_L - 1/b_S) is scored as small_batch, so a
  shrunken batch is not mistaken for communication (they were a near tie under load).
- The typical rank is the median rank; the straggler score of a rank is its compute time
  over the median rank's; a rank above `STRAGGLER_SCORE` whose extra compute is at least
  `STRAGGLER_MIN_SHARE` of the step is a straggler (a 30% jitter on a 5 ms compute is not).
- `none` when efficiency is at least `GOOD_EFFICIENCY`, or when no hypothesis explains at
  least `MIN_EXPLAINED` of the loss (then the report says what is unexplained).

Caveats: two runs at different scales are compared; a cause present at both scales to the
same degree (a straggler in both) explains no loss between them and is reported as
evidence only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from mlinfra_lab.scaling.nccl_log import NcclTransport, parse_nccl_log
from mlinfra_lab.scaling.results import RunResult, load_run

__all__ = ["CAUSES", "Diagnosis", "Hypothesis", "diagnose", "scaling_efficiency"]

CAUSES = ("communication", "data_loading", "straggler", "small_batch", "transport", "none")
GOOD_EFFICIENCY = 0.85
MIN_EXPLAINED = 0.25
STRAGGLER_SCORE = 1.3
STRAGGLER_MIN_SHARE = 0.1  # ... and its extra compute is at least this share of a step
TRANSPORT_DROP = 0.5  # in-job busbw below half the small run's: the transport degraded

_ADVICE = {
    "communication": "overlap and bucket the all-reduce, compress gradients, or raise the "
    "per-GPU work so compute hides communication",
    "data_loading": "add loader workers, shard/cache the dataset per node, prefetch",
    "straggler": "find the slow rank's host (thermals, clocks, a noisy neighbour) and "
    "replace or exclude it",
    "small_batch": "raise the global batch with the world size (with a learning-rate "
    "schedule that allows it) so each GPU keeps an efficient batch",
    "transport": "fix the interconnect configuration (RDMA/IB, NCCL_IB_*, NCCL_SOCKET_IFNAME,"
    " P2P) so NCCL does not fall back to TCP or host memory",
    "none": "scaling is healthy or the loss is not attributable; keep tracking efficiency",
}


@dataclass(frozen=True)
class Hypothesis:
    """One candidate cause and the share of lost seconds-per-sample it explains."""

    cause: str
    explained: float  # fraction of the per-sample time lost between the runs (0..1+)
    detail: str


@dataclass(frozen=True)
class Diagnosis:
    """The verdict, its evidence and the other hypotheses, best first."""

    primary_cause: str
    efficiency: float
    evidence: dict[str, Any]
    hypotheses: list[Hypothesis] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1)

    def report(self) -> str:
        e = self.evidence
        lines = [
            f"Scaling from {e['world_size'][0]} to {e['world_size'][1]} ranks: "
            f"{e['speedup']:.2f}x throughput for {e['world_size'][1] / e['world_size'][0]:g}x "
            f"ranks = {self.efficiency:.0%} scaling efficiency",
            f"Primary cause: {self.primary_cause.upper()}  ->  {_ADVICE[self.primary_cause]}",
            "",
            "Evidence (small -> large):",
            f"  communication share of step   {_pct(e['comm_share'][0])} -> "
            f"{_pct(e['comm_share'][1])}",
            f"  data-wait share of step       {_pct(e['data_share'][0])} -> "
            f"{_pct(e['data_share'][1])}",
            f"  per-rank batch                {e['rank_batch'][0]} -> {e['rank_batch'][1]}",
            f"  compute per sample (ms)       {_ms(e['compute_per_sample'][0])} -> "
            f"{_ms(e['compute_per_sample'][1])}",
            f"  in-job busbw (MB/s)           {_mbs(e['busbw'][0])} -> {_mbs(e['busbw'][1])}",
            f"  loader headroom (x)           {_x(e['loader_headroom'][0])} -> "
            f"{_x(e['loader_headroom'][1])}",
            "  straggler scores (large run)  "
            + " ".join(f"r{i}:{s:.2f}" for i, s in enumerate(e["straggler_scores"])),
        ]
        if e.get("transport"):
            lines.append(f"  NCCL transport                {e['transport']}")
        lines += ["", "Hypotheses, by share of the lost time per sample they explain:"]
        lines += [f"  {h.cause:<14} {h.explained:6.0%}  {h.detail}" for h in self.hypotheses]
        return "\n".join(lines)


def _pct(v: float) -> str:
    return f"{v:.0%}"


def _ms(v: float) -> str:
    return f"{v * 1e3:.2f}"


def _mbs(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 1e6:.1f}"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def _facts(run: RunResult) -> dict[str, Any]:
    b = run.breakdown()
    return {
        "b": b,
        "n": run.rank_batch,
        "step": run.step_time(),
        "compute": b["forward"] + b["backward"] + b["optimizer"],
        "data": b["data_wait"],
        "comm": b["exposed_comm"],
        "scores": run.straggler_scores(),
        "rank_compute": run.compute_per_rank(),
    }


def _skew(run: RunResult) -> float:
    """Slowest rank's median data wait minus the typical (lower-median) rank's (s)."""
    waits = sorted(r["data_wait"] for r in run.rank_medians())
    return waits[-1] - waits[(len(waits) - 1) // 2]


def scaling_efficiency(small_run: Any, large_run: Any) -> float:
    """Throughput gained over the ratio of world sizes: 1.0 is linear scaling (paths, dicts or
    `RunResult`s; throughput, not step time, since the per-rank batch may differ)."""
    small, large = load_run(small_run), load_run(large_run)
    return (large.throughput() / small.throughput()) / (large.world_size / small.world_size)


def diagnose(
    small_run: Any,
    large_run: Any,
    nccl_log: str | NcclTransport | None = None,
) -> Diagnosis:
    """Compare a small-scale and a large-scale run (paths, dicts or `RunResult`s).

    `nccl_log` is the text (or parsed form) of the large run's ``NCCL_DEBUG=INFO`` log.
    """
    small, large = load_run(small_run), load_run(large_run)
    if large.world_size < small.world_size:
        small, large = large, small
    s, lg = _facts(small), _facts(large)
    speedup = large.throughput() / small.throughput()
    efficiency = scaling_efficiency(small, large)
    # Seconds per sample: step_L/b_L - step_S/b_S = (step_L - step_S)/b_L
    #   + step_S (1/b_L - 1/b_S). The second term is the small run's per-step cost spread
    # over a smaller per-rank batch (small_batch); the first splits by phase.
    # Floor at 1% of the small run's time per sample: a run that scaled perfectly lost
    # nothing, and shares of nothing are meaningless.
    lost = max(lg["step"] / lg["n"] - s["step"] / s["n"], 0.01 * s["step"] / s["n"])
    spread = 1 / lg["n"] - 1 / s["n"]

    # Straggler (step 4): the slowest rank's extra compute over the median rank.
    def excess(f: dict[str, Any]) -> float:
        mid = sorted(f["rank_compute"])[(len(f["rank_compute"]) - 1) // 2]  # lower median
        return max(f["rank_compute"]) - mid

    worst = max(range(large.world_size), key=lambda r: lg["scores"][r])
    straggling = (
        lg["scores"][worst] >= STRAGGLER_SCORE and excess(lg) >= STRAGGLER_MIN_SHARE * lg["step"]
    )
    d_straggler = max(0.0, excess(lg) - excess(s)) / lg["n"] if straggling else 0.0
    # Data skew: ranks that got their batch early wait for the late ones inside the
    # all-reduce; that wait belongs to the loader, not to communication.
    skew = max(0.0, _skew(large) - _skew(small)) / lg["n"]
    # Communication (steps 1, 3): exposed comm growth, less the waits for stragglers and data.
    # When the per-rank batch shrank, the same per-step growth costs more per sample; that
    # amplification, growth x (1/b_L - 1/b_S), is the small batch's doing (step 2): scored at
    # the small run's batch, communication is what would remain had the batch stayed.
    shrank = large.rank_batch < small.rank_batch  # step 2
    amplified = max(0.0, lg["comm"] - s["comm"]) * spread if shrank else 0.0
    d_comm = max(0.0, (lg["comm"] - s["comm"]) / lg["n"] - amplified - d_straggler - skew)
    transport = (
        nccl_log
        if isinstance(nccl_log, NcclTransport)
        else (parse_nccl_log(nccl_log) if nccl_log else None)
    )
    bw_small, bw_large = small.busbw(), large.busbw()
    bw_drop = bool(bw_small and bw_large and bw_large < TRANSPORT_DROP * bw_small)
    slow_transport = bw_drop or bool(transport and transport.slow)
    d_data = max(0.0, (lg["data"] - s["data"]) / lg["n"]) + skew  # step 1b
    d_batch = (
        max(
            0.0,
            s["step"] * spread + (lg["compute"] - s["compute"]) / lg["n"] + amplified - d_straggler,
        )
        if shrank
        else 0.0
    )
    s["per_sample"], lg["per_sample"] = s["compute"] / s["n"], lg["compute"] / lg["n"]

    hyps = [
        Hypothesis(
            "communication",
            0.0 if slow_transport else d_comm / lost,
            f"exposed all-reduce per sample grew by {_ms(d_comm)} ms; share "
            f"{_pct(small.comm_share())} -> {_pct(large.comm_share())}",
        ),
        Hypothesis(
            "transport",
            d_comm / lost if slow_transport else 0.0,
            f"in-job busbw {_mbs(bw_small)} -> {_mbs(bw_large)} MB/s"
            + (f"; NCCL: {transport.verdict}" if transport else ""),
        ),
        Hypothesis(
            "data_loading",
            d_data / lost,
            f"data wait per sample grew by {_ms(d_data)} ms; loader headroom "
            f"{_x(large.loader_headroom())}x at the large scale",
        ),
        Hypothesis(
            "straggler",
            d_straggler / lost,
            f"rank {worst} computes {lg['scores'][worst]:.2f}x the median rank",
        ),
        Hypothesis(
            "small_batch",
            d_batch / lost,
            f"per-rank batch {small.rank_batch} -> {large.rank_batch}; compute per "
            f"sample {_ms(s['per_sample'])} -> {_ms(lg['per_sample'])} ms",
        ),
    ]
    hyps.sort(key=lambda h: h.explained, reverse=True)
    best = hyps[0]
    if efficiency >= GOOD_EFFICIENCY or best.explained < MIN_EXPLAINED:
        unexplained = max(0.0, 1 - sum(h.explained for h in hyps))
        hyps.append(
            Hypothesis(
                "none",
                unexplained,
                "loss not explained by the phases above (e.g. compute slowed "
                "at the same batch: shared cores, clocks)",
            )
        )
        primary = "none"
    else:
        primary = best.cause
    evidence = {
        "world_size": [small.world_size, large.world_size],
        "speedup": speedup,
        "scaling_efficiency": efficiency,
        "step_time_s": [s["step"], lg["step"]],
        "comm_share": [small.comm_share(), large.comm_share()],
        "data_share": [s["data"] / s["b"]["step"], lg["data"] / lg["b"]["step"]],
        "rank_batch": [small.rank_batch, large.rank_batch],
        "compute_per_sample": [s["per_sample"], lg["per_sample"]],
        "busbw": [bw_small, bw_large],
        "loader_headroom": [small.loader_headroom(), large.loader_headroom()],
        "straggler_scores": lg["scores"],
        "straggler_rank": worst if straggling else None,
        "transport": transport.verdict if transport else None,
    }
    return Diagnosis(primary, efficiency, evidence, hyps)
