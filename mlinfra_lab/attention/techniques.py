"""Two of the FlashAttention ideas chapter 1 tried on the H200: FA2's 5-matmul backward, and warp
specialisation (the third, version 4, is a forward version: `versions` reads its runs).

Contract: ``backward_table(result)`` reads one result of ``mlinfra-lab bench attention
--providers ours_v1,ours_atomic,sdpa_flash,sdpa_cudnn`` and returns one row per shape
``(head_dim, causal, seq)`` with the backward TFLOP/s of the split backward (``split``: the
default, two kernels, 7 matmuls), of the 5-matmul one (``atomic``), of the anchors, and
``atomic_over_split`` and ``split_over_cudnn``. ``backward_summary(runs)`` gives the numbers
chapter 1 quotes over all committed runs (``committed_backward_runs()``), and
``plot_backward_ratios(runs)`` draws ``atomic / split`` against N, and
``atomic_traffic(result)`` counts the 5-matmul backward's atomic bytes at one shape. ``warp_specialize_probe()``
loads the committed record of `benchmarks/scripts/warp_specialize_probe.py` and
``probe_summary(record)`` condenses it.

Design decisions:
- A ratio is only ever taken inside one file, both numbers timed in the same run (as
  `versions` does for the forward kernels).
- The runs live in their own files (``h200-bwd-atomic-*``), never under
  ``h200-attention-*``, which the chapter and the baseline check read as the default
  kernel's benchmark.
- The probe's record is read as it was written: which launches compiled, whether the
  compiler really split the loop, the compiler's message; nothing is re-derived here.
"""

from __future__ import annotations

import re
from typing import Any

from mlinfra_lab.attention.versions import committed_version_runs, finish_ratio_plot, shape_label

__all__ = [
    "atomic_traffic",
    "backward_summary",
    "backward_table",
    "committed_backward_runs",
    "plot_backward_ratios",
    "probe_summary",
    "warp_specialize_probe",
]

RUNS_PATTERN = "h200-bwd-atomic-*.json"
PROBE_PATTERN = "h200-warp-specialize-*.json"
_NAMES = {"ours_v1": "split", "ours_atomic": "atomic", "sdpa_flash": "flash", "sdpa_cudnn": "cudnn"}


def backward_table(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per shape: backward TFLOP/s of both backwards and the anchors, and the two ratios
    (None where a number is missing), sorted by head dim, causal, length."""
    cells: dict[tuple[int, bool, int], dict[str, float]] = {}
    for r in result["rows"]:
        if r["mode"] == "bwd" and r["tflops"] and r["provider"] in _NAMES:
            key = (r["head_dim"], r["causal"], r["seq"])
            cells.setdefault(key, {})[_NAMES[r["provider"]]] = r["tflops"]
    out = []
    for (d, causal, n), t in sorted(cells.items()):
        split, atomic, cudnn = t.get("split"), t.get("atomic"), t.get("cudnn")
        out.append(
            dict(
                head_dim=d,
                causal=causal,
                seq=n,
                split=split,
                atomic=atomic,
                flash=t.get("flash"),
                cudnn=cudnn,
                atomic_over_split=atomic / split if atomic and split else None,
                split_over_cudnn=split / cudnn if split and cudnn else None,
            )
        )
    return out


def backward_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Over every run: ``atomic / split`` lowest and highest (``lo``/``hi``), per head dim
    (``d64_lo`` ... ``d128_hi``), the shapes of both ends (``worst_shape``, ``best_shape``),
    the runs and shapes counted, and ``split / cuDNN`` at D=128 and 4k tokens or more
    (``split_cudnn_lo``/``_hi``, what the issue's 0.85 target is measured on)."""
    rows = [r for run in runs for r in backward_table(run) if r["atomic_over_split"]]
    if not rows:
        raise ValueError("no run timed both backwards: run the benchmark with ours_atomic")

    def ratios(d: int) -> list[float]:
        return [r["atomic_over_split"] for r in rows if r["head_dim"] == d]

    worst = min(rows, key=lambda r: r["atomic_over_split"])
    best = max(rows, key=lambda r: r["atomic_over_split"])
    cudnn = [
        r["split_over_cudnn"]
        for r in rows
        if r["head_dim"] == 128 and r["seq"] >= 4096 and r["split_over_cudnn"]
    ]
    return dict(
        runs=len(runs),
        shapes=len({(r["head_dim"], r["causal"], r["seq"]) for r in rows}),
        lo=worst["atomic_over_split"],
        hi=best["atomic_over_split"],
        worst_shape=shape_label(worst),
        best_shape=shape_label(best),
        d64_lo=min(ratios(64)),
        d64_hi=max(ratios(64)),
        d128_lo=min(ratios(128)),
        d128_hi=max(ratios(128)),
        split_cudnn_lo=min(cudnn),
        split_cudnn_hi=max(cudnn),
    )


def atomic_traffic(result: dict[str, Any], head_dim: int = 128, seq: int = 4096) -> dict[str, Any]:
    """What the 5-matmul backward adds per head at one non-causal shape of `result`: the key
    tile it ran (``block_n``, read from the run's ``tiles``), its float32 atomic adds into dQ
    (``atomic_mib``: every key tile adds into every dQ row, ``N / BLOCK_N`` times), and the
    split backward's dQ written once in 16 bits (``dq_mib``)."""
    row = next(
        r
        for r in result["rows"]
        if r["provider"] == "ours_atomic"
        and r["mode"] == "bwd"
        and (r["head_dim"], r["seq"], r["causal"]) == (head_dim, seq, False)
    )
    match = re.search(r"BLOCK_N: (\d+)", row["tiles"] or "")
    if match is None:
        raise ValueError(f"the run does not say which key tile ran: tiles={row['tiles']!r}")
    block_n = int(match.group(1))
    return dict(
        block_n=block_n,
        atomic_mib=(seq // block_n) * seq * head_dim * 4 / 2**20,
        dq_mib=seq * head_dim * 2 / 2**20,
    )


def committed_backward_runs() -> list[dict[str, Any]]:
    """The committed runs of both backwards (oldest first), each with its file name under
    ``"file"``; empty when the package runs without the repository's results."""
    return committed_version_runs(RUNS_PATTERN)


def plot_backward_ratios(runs: list[dict[str, Any]], ax: Any = None) -> Any:
    """``atomic / split`` backward TFLOP/s against N, one colour per (head dim, causal), one
    line per run."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.4))
    classes = [(64, False), (64, True), (128, False), (128, True)]
    for run_no, run in enumerate(runs):
        rows = backward_table(run)
        for c, (d, causal) in enumerate(classes):
            pts = [
                (r["seq"], r["atomic_over_split"])
                for r in rows
                if r["head_dim"] == d and r["causal"] == causal and r["atomic_over_split"]
            ]
            if pts:
                label = f"D={d}{' causal' if causal else ''}" if run_no == 0 else None
                ax.plot(*zip(*pts, strict=True), "o-", color=f"C{c}", lw=1, ms=3, label=label)
    return finish_ratio_plot(ax, "backward TFLOP/s, 5-matmul / split", fontsize=7, ncol=1)


def warp_specialize_probe() -> dict[str, Any] | None:
    """The newest committed record of the warp-specialisation probe, or None."""
    from mlinfra_lab.attention.bench import committed_results, load_result

    paths = committed_results(PROBE_PATTERN)
    return {**load_result(paths[-1]), "file": paths[-1].name} if paths else None


def probe_summary(record: dict[str, Any]) -> dict[str, Any]:
    """Counts of the probe's cases per warp count: compiled, split into partitions; the
    speed of the flag over no flag where it compiled (``speedup_lo``/``_hi``); and the
    compiler's first message of a failed case (``compiler``)."""
    cases = record["cases"]
    out: dict[str, Any] = {"cases": len(cases)}
    for warps in sorted({c["num_warps"] for c in cases}):
        mine = [c for c in cases if c["num_warps"] == warps]
        out[f"w{warps}_cases"] = len(mine)
        out[f"w{warps}_compiled"] = sum(c["compiled"] for c in mine)
        out[f"w{warps}_partitioned"] = sum(bool(c.get("partitioned")) for c in mine)
    speedups = [c["ws_speedup"] for c in cases if c["compiled"]]
    out["speedup_lo"] = min(speedups) if speedups else None
    out["speedup_hi"] = max(speedups) if speedups else None
    failed = [c for c in cases if not c["compiled"]]
    out["compiler"] = failed[0]["compiler"].splitlines()[0] if failed else None
    return out
