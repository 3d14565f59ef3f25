"""The forward kernel's versions side by side, from benchmark runs that timed them together.

Contract: ``version_table(result, mode)`` reads one result of ``mlinfra-lab bench attention
--providers ours_v1,ours_v3,...`` (or the `gpu_study` file, same row format) and returns one
row per shape ``(head_dim, causal, seq)``: each version's TFLOP/s as ``v1``, ``v2``, ...,
the anchors' (``sdpa_flash``, ``sdpa_cudnn``), and ``vK_over_v1`` and ``vK_over_cudnn`` for
every version K present. ``committed_version_runs()`` loads the committed H200 runs
(``benchmarks/results/h200-fwd-versions-*.json``; the v4 runs with `OVERLAP_RUNS_PATTERN`);
``version_ranges(runs, version)`` condenses any version against v1 and cuDNN;
``plot_version_ratios(runs)`` draws each version over v1 against the sequence length, one
line per run and shape class.

Design decisions:
- A ratio is only ever taken inside one file: both numbers were measured in the same run,
  interleaved by the benchmark, so the GPU's clock and temperature drift cancels.
- Rows keep the medians the benchmark wrote (``tflops``: the median of ``--repeats``
  timings); a shape a provider could not run is left out of that provider's ratios.
- The version comparisons live in their own files (``fwd-versions``), not under
  ``h200-attention-*``: the chapter and the baseline check read the newest of those as *the*
  benchmark of the default kernel.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "committed_version_runs",
    "finish_ratio_plot",
    "shape_label",
    "plot_version_ratios",
    "version_ranges",
    "version_summary",
    "version_table",
]

_VERSION = re.compile(r"^ours_v(\d+)$")
RUNS_PATTERN = "h200-fwd-versions-*.json"
OVERLAP_RUNS_PATTERN = "h200-fwd-overlap-*-run*.json"  # v1 and v4 with the anchors


def version_table(result: dict[str, Any], mode: str = "fwd") -> list[dict[str, Any]]:
    """Per shape: TFLOP/s of every version and anchor in `result`, and the ratios (see the
    module docstring), sorted by head dim, causal, length."""
    cells: dict[tuple[int, bool, int], dict[str, float]] = {}
    for r in result["rows"]:
        if r["mode"] == mode and r["tflops"]:
            key = (r["head_dim"], r["causal"], r["seq"])
            cells.setdefault(key, {})[r["provider"]] = r["tflops"]
    out = []
    for (d, causal, n), t in sorted(cells.items()):
        row: dict[str, Any] = dict(head_dim=d, causal=causal, seq=n)
        row.update(sdpa_flash=t.get("sdpa_flash"), sdpa_cudnn=t.get("sdpa_cudnn"))
        versions = {int(m.group(1)): v for p, v in t.items() if (m := _VERSION.match(p))}
        for k, v in sorted(versions.items()):
            row[f"v{k}"] = v
            row[f"v{k}_over_v1"] = v / versions[1] if versions.get(1) else None
            row[f"v{k}_over_cudnn"] = v / row["sdpa_cudnn"] if row["sdpa_cudnn"] else None
        out.append(row)
    return out


def version_summary(runs: list[dict[str, Any]], version: int = 3) -> dict[str, Any]:
    """The numbers chapter 1 quotes for ``v{version}`` over all `runs` (forward): its range over
    v1 at D=64 (``d64_lo``/``d64_hi``) and at D=128 without the single lowest timing
    (``d128_lo``/``d128_hi``), that worst shape (``worst_shape``, ``worst``, and its best
    reading in another run, ``worst_other``), the best over v1 at D=128 and 8k tokens or more
    (``long128_hi``), over v2 at 1k tokens where a run timed v2 (``over_v2_1k_lo``/``_hi``),
    and over cuDNN at D=128 and 4k tokens or more (``cudnn_lo``/``cudnn_hi``)."""
    key = f"v{version}"
    tables = [version_table(run) for run in runs]
    by_shape: dict[tuple[int, bool, int], list[float]] = {}  # shape -> vK/v1 in each run
    for rows in tables:
        for r in rows:
            by_shape.setdefault((r["head_dim"], r["causal"], r["seq"]), []).append(
                r[f"{key}_over_v1"]
            )
    d64 = [x for (d, _, _), xs in by_shape.items() if d == 64 for x in xs]
    d128 = sorted(x for (d, _, _), xs in by_shape.items() if d == 128 for x in xs)
    worst = min(by_shape, key=lambda s: min(by_shape[s]))
    long128 = [x for (d, _, n), xs in by_shape.items() if d == 128 and n >= 8192 for x in xs]
    over_v2 = [
        r[key] / r["v2"] for rows in tables for r in rows if r.get("v2") and r["seq"] == 1024
    ]
    cudnn = [
        r[f"{key}_over_cudnn"]
        for rows in tables
        for r in rows
        if r["head_dim"] == 128 and r["seq"] >= 4096
    ]
    return dict(
        d64_lo=min(d64),
        d64_hi=max(d64),
        d128_lo=d128[1],
        d128_hi=d128[-1],
        worst_shape=shape_label(dict(zip(("head_dim", "causal", "seq"), worst, strict=True))),
        worst=min(by_shape[worst]),
        worst_other=max(by_shape[worst]),
        long128_hi=max(long128),
        over_v2_1k_lo=min(over_v2),
        over_v2_1k_hi=max(over_v2),
        cudnn_lo=min(cudnn),
        cudnn_hi=max(cudnn),
    )


def committed_version_runs(pattern: str = RUNS_PATTERN) -> list[dict[str, Any]]:
    """The committed result files matching `pattern` (oldest first; default: the v1/v2/v3
    runs, `OVERLAP_RUNS_PATTERN` the v1/v4 ones; `techniques` and `gluon_runs` read theirs
    with it too), each with its file name under ``"file"``; empty when the package runs
    without the repository's results."""
    from mlinfra_lab.attention.bench import committed_results, load_result

    return [{**load_result(p), "file": p.name} for p in committed_results(pattern)]


def version_ranges(runs: list[dict[str, Any]], version: int) -> dict[str, Any]:
    """``v{version} / v1`` forward over all `runs`: lowest and highest at D=64
    (``d64_lo``/``d64_hi``) and D=128 (``d128_lo``/``d128_hi``), the lowest's shape
    (``worst_shape``), the runs counted, and ``v{version} / cuDNN`` at D=128 and 4k tokens or
    more (``cudnn_lo``/``cudnn_hi``)."""
    key = f"v{version}"
    rows = [r for run in runs for r in version_table(run) if r.get(f"{key}_over_v1")]
    if not rows:
        raise ValueError(f"no run timed v1 and {key} together: run the benchmark with ours_{key}")

    def ratios(d: int) -> list[float]:
        return [r[f"{key}_over_v1"] for r in rows if r["head_dim"] == d]

    worst = min(rows, key=lambda r: r[f"{key}_over_v1"])
    cudnn = [
        r[f"{key}_over_cudnn"]
        for r in rows
        if r["head_dim"] == 128 and r["seq"] >= 4096 and r.get(f"{key}_over_cudnn")
    ]
    return dict(
        runs=len(runs),
        d64_lo=min(ratios(64)),
        d64_hi=max(ratios(64)),
        d128_lo=min(ratios(128)),
        d128_hi=max(ratios(128)),
        worst_shape=shape_label(worst),
        cudnn_lo=min(cudnn) if cudnn else None,
        cudnn_hi=max(cudnn) if cudnn else None,
    )


def plot_version_ratios(
    runs: list[dict[str, Any]], version: int = 3, over: int | None = 2, ax: Any = None
) -> Any:
    """``v{version} / v1`` forward TFLOP/s against N (solid), and ``v{over} / v1`` (dashed)
    where a run timed it, one colour per (head dim, causal); each run is one line."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.4))
    classes = [(64, False), (64, True), (128, False), (128, True)]
    for run_no, run in enumerate(runs):
        rows = version_table(run)
        for c, (d, causal) in enumerate(classes):
            for k, style in ((version, "o-"), (over, "x--")):
                key = f"v{k}_over_v1"
                pts = [
                    (r["seq"], r[key])
                    for r in rows
                    if k is not None and r["head_dim"] == d and r["causal"] == causal and r.get(key)
                ]
                if not pts:
                    continue
                label = f"v{k}/v1, D={d}{' causal' if causal else ''}" if run_no == 0 else None
                ax.plot(*zip(*pts, strict=True), style, color=f"C{c}", lw=1, ms=3, label=label)
    return finish_ratio_plot(ax, "forward TFLOP/s over v1, same run")


def shape_label(row: dict[str, Any]) -> str:
    """``"D=128, causal, N=4096"``: how chapter 1 names one shape of a sweep row."""
    causal = "causal" if row["causal"] else "non-causal"
    return f"D={row['head_dim']}, {causal}, N={row['seq']}"


def finish_ratio_plot(ax: Any, ylabel: str, **legend: Any) -> Any:
    """The axes every ratio-against-length plot of chapter 1 shares: a line at 1, N on a log2
    axis (the sweep's 16k tokens), `ylabel`, a small legend (`legend` overrides its style)."""
    ax.axhline(1.0, color="gray", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N (batch x N = 16k tokens)")
    ax.set_ylabel(ylabel)
    ax.legend(**({"fontsize": 6, "ncol": 2} | legend))
    return ax
