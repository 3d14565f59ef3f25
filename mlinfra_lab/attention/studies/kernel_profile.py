"""Where the default kernel's time goes next to cuDNN's: a reader of committed Nsight Compute
profiles (``benchmarks/results/*-ncu-kernels-*.json``, written by
``python -m mlinfra_lab.attention.studies.counters --kernels``).

Contract: `committed_kernel_profile()` returns the newest committed profile (None when there
is none); `gap_rows(profile)` condenses it to one row per (provider, pass): the kernels'
total time and DRAM bytes, and for the pass's matmul kernels the share of cycles the tensor
pipes were active, instructions issued per scheduler cycle, registers, block and grid size
and the largest stall reasons; `gap_summary(profile)` gives the few ratios chapter 1's prose
quotes. `committed_rescale_run()` and `rescale_gain(run)` read the experiment that moved one
piece of the idle time (the early rescale, ``benchmarks/results/*-gluon-fwd-r4-*.json``):
per causal flag, the geometric mean and range of its per-pass speed-up over the late rescale,
and both forms' geometric-mean ratio to cuDNN timed in the same passes.

Design decisions:
- Only the counters that explain a gap are kept: the tensor pipes' active cycles
  (``sm__pipe_tensor_cycles_active``, SM average, % of peak) say how busy the matmul units
  were; time x that share is the *tensor-active time*, which a kernel that does more matmul
  work (our split backward's 7 matmuls to FlashAttention-2's 5) must spend more of.
- A pass's small helper kernels (the backward's ``delta = rowsum(dO * O)``, cuDNN's dQ
  conversion) count in its time and bytes but not in its tensor-pipe figures: they issue no
  matmul, and averaging them in would hide the big kernels' utilisation.
- Time-weighted averages over a pass's matmul kernels, so a pass of two kernels (our dK/dV
  and dQ) compares with cuDNN's one.
- A reader, not a profiler: nothing here needs a GPU, so the chapter's tables build on a
  laptop from the committed file, whose device, versions and date the rows carry.
"""

from __future__ import annotations

import json
import math
from typing import Any

from mlinfra_lab import results

__all__ = [
    "PROFILE_PATTERN",
    "RESCALE_PATTERN",
    "anchor_spread",
    "committed_kernel_profile",
    "committed_rescale_run",
    "gap_rows",
    "gap_summary",
    "rescale_gain",
]

PROFILE_PATTERN = "*-ncu-kernels-*.json"
RESCALE_PATTERN = "*-gluon-fwd-r4-*.json"
LATE, EARLY = "overlap-m128n64w4s2", "overlap-er-m128n64w4s2"
TENSOR_ACTIVE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
# matmuls per (query tile, key tile) pair: FlashAttention-2's backward does 5 (S, dP, dV, dK,
# dQ); our split backward recomputes S and dP in its dQ kernel, so 7
MATMULS = {
    ("ours", "fwd"): 2,
    ("ours", "bwd"): 7,
    ("sdpa_cudnn", "fwd"): 2,
    ("sdpa_cudnn", "bwd"): 5,
}


def committed_kernel_profile() -> dict[str, Any] | None:
    """The newest committed kernel profile (by its recorded date), with its file name under
    ``"file"``; None when none is committed."""
    found = [
        {**json.loads(path.read_text()), "file": path.name}
        for path in results.committed(PROFILE_PATTERN)
    ]
    found = [p for p in found if p.get("benchmark") == "attention-kernel-counters"]
    return max(found, key=lambda p: p["date"]) if found else None


def _active(kernel: dict[str, Any]) -> float:
    """The share of cycles (%) the kernel's tensor pipes were active; 0 for no matmul."""
    return kernel["tensor_pipes_pct"].get(TENSOR_ACTIVE, 0.0)


def _weighted(kernels: list[dict[str, Any]], value: Any) -> float | None:
    """The time-weighted mean of ``value(kernel)`` over `kernels` (None without a time)."""
    pairs = [(k["time_us"], value(k)) for k in kernels if k.get("time_us")]
    pairs = [(t, v) for t, v in pairs if v is not None]
    total = sum(t for t, _ in pairs)
    return sum(t * v for t, v in pairs) / total if total else None


def gap_rows(profile: dict[str, Any], causal: bool = False) -> list[dict[str, Any]]:
    """One row per (provider, pass) of `profile`'s runs with this ``causal``: ``time_us``,
    ``dram_mib``, ``kernels`` (how many ran), and over the pass's matmul kernels
    ``tensor_active_pct`` and ``issued_per_cycle`` (time-weighted), ``tensor_active_us``
    (time x active share), ``matmuls`` per tile pair, ``registers``, ``block_size``,
    ``grid_size`` and ``stalls`` (the longest kernel's three largest stall reasons, cycles per
    issued instruction; "selected", the cycle a warp spends issuing, is not a stall and is left
    out). Runs that recorded an error are skipped."""
    rows = []
    for run in profile["runs"]:
        if run.get("causal") != causal or "kernels" not in run:
            continue
        for mode in ("fwd", "bwd"):
            kernels = [k for k in run["kernels"] if k["mode"] == mode]
            matmul = [k for k in kernels if _active(k)]
            if not matmul:
                continue
            longest = max(matmul, key=lambda k: k["time_us"])
            rows.append(
                {
                    "provider": run["provider"],
                    "mode": mode,
                    "seq": run["seq"],
                    "head_dim": run["head_dim"],
                    "time_us": sum(k.get("time_us", 0.0) for k in kernels),
                    "dram_mib": sum(
                        k.get("dram_read_bytes", 0.0) + k.get("dram_write_bytes", 0.0)
                        for k in kernels
                    )
                    / 2**20,
                    "kernels": len(kernels),
                    "tensor_active_pct": _weighted(matmul, _active),
                    "tensor_active_us": sum(k["time_us"] * _active(k) / 100 for k in matmul),
                    "issued_per_cycle": _weighted(
                        matmul, lambda k: k.get("issued_per_scheduler_cycle")
                    ),
                    "matmuls": MATMULS.get((run["provider"], mode)),
                    "registers": longest.get("registers_per_thread"),
                    "block_size": longest.get("block_size"),
                    "grid_size": longest.get("grid_size"),
                    "stalls": dict(
                        [
                            kv
                            for kv in longest.get("stalls_per_issue", {}).items()
                            if kv[0] != "selected"
                        ][:3]
                    ),
                }
            )
    return rows


def gap_summary(profile: dict[str, Any], causal: bool = False) -> dict[str, float]:
    """Ours over cuDNN per pass: ``{mode}_time_ratio`` (ours' time / cuDNN's),
    ``{mode}_tensor_ours`` / ``{mode}_tensor_cudnn`` (active %), ``{mode}_active_ratio``
    (tensor-active time, ours / cuDNN) and ``{mode}_matmul_ratio`` (matmuls per tile pair).
    Raises `KeyError` naming the missing row when the profile lacks a provider or pass."""
    by = {(r["provider"], r["mode"]): r for r in gap_rows(profile, causal)}
    out: dict[str, float] = {}
    for mode in ("fwd", "bwd"):
        for provider in ("ours", "sdpa_cudnn"):
            if (provider, mode) not in by:
                raise KeyError(f"{profile.get('file', 'the profile')} has no {provider} {mode} row")
        ours, cudnn = by[("ours", mode)], by[("sdpa_cudnn", mode)]
        out[f"{mode}_time_ratio"] = ours["time_us"] / cudnn["time_us"]
        out[f"{mode}_tensor_ours"] = ours["tensor_active_pct"]
        out[f"{mode}_tensor_cudnn"] = cudnn["tensor_active_pct"]
        out[f"{mode}_active_ratio"] = ours["tensor_active_us"] / cudnn["tensor_active_us"]
        out[f"{mode}_matmul_ratio"] = ours["matmuls"] / cudnn["matmuls"]
    return out


def committed_rescale_run() -> dict[str, Any] | None:
    """The newest committed round-4 run of the forward experiment (early vs late rescale),
    with its file name under ``"file"``; None when none is committed."""
    found = [
        {**json.loads(path.read_text()), "file": path.name}
        for path in results.committed(RESCALE_PATTERN)
    ]
    return max(found, key=lambda r: r["date"]) if found else None


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def rescale_gain(
    run: dict[str, Any], head_dim: int = 128, min_seq: int = 4096, max_seq: int = 1 << 30
) -> dict[bool, dict[str, float]]:
    """Per causal flag, over the shapes of `head_dim` with `min_seq` to `max_seq` tokens and
    every pass: ``gain`` (geometric mean of early/late TFLOP/s), ``lo``/``hi`` (its per-pass
    range), ``early_cudnn``/``late_cudnn`` (geometric means of each form over cuDNN in the same
    pass) and ``passes`` (how many ratios); a flag with no such shape is left out. Raises
    ValueError when the run has no such shape at all."""
    out: dict[bool, dict[str, float]] = {}
    for causal in (False, True):
        gains, early, late = [], [], []
        for row in run["rows"]:
            if row["head_dim"] != head_dim or row["causal"] != causal:
                continue
            if not min_seq <= row["seq"] <= max_seq:
                continue
            for p in row["tflops_passes"]:
                gains.append(p[EARLY] / p[LATE])
                early.append(p[EARLY] / p["sdpa_cudnn"])
                late.append(p[LATE] / p["sdpa_cudnn"])
        if not gains:
            continue
        out[causal] = {
            "gain": _geomean(gains),
            "lo": min(gains),
            "hi": max(gains),
            "early_cudnn": _geomean(early),
            "late_cudnn": _geomean(late),
            "passes": len(gains),
        }
    if not out:
        raise ValueError(
            f"{run.get('file', 'the run')} has no D={head_dim} rows of {min_seq}-{max_seq} tokens"
        )
    return out


def anchor_spread(run: dict[str, Any], head_dim: int = 128, anchor: str = "sdpa_cudnn") -> float:
    """The largest spread of `anchor`'s rate between the passes of one shape of `head_dim`
    (fastest pass over slowest, minus 1): how far one pass can move on this card."""
    return max(
        max(p[anchor] for p in row["tflops_passes"]) / min(p[anchor] for p in row["tflops_passes"])
        - 1
        for row in run["rows"]
        if row["head_dim"] == head_dim
    )
