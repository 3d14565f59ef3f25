"""Version 5 (the Gluon forward) in its committed H200 runs: the configuration search, and the
default kernel's sweep against version 1 and the anchors.

Contract:
- ``committed_config_runs()``: the runs of ``benchmarks/scripts/gluon_fwd_experiment.py``
  (``h200-gluon-configs-*-run*.json``; each a dict with ``checks`` and ``rows``) and
  ``config_table(run)``, one row per shape ``(head_dim, causal, seq)`` with every timed
  configuration's TFLOP/s (``configs``), version 1's and the anchors', and the best
  configuration; ``schedule_gain(runs, tile)`` the overlap schedule over the plain one for
  the same tile, wherever one run timed both.
- ``committed_default_runs()``: ``mlinfra-lab bench attention`` runs of the default kernel
  (provider ``ours``: v5 where its table says so, v1 elsewhere) with ``ours_v1`` and the
  anchors (``h200-fwd-v5-default-*-run*.json``); ``default_table(run)`` per shape the
  ratios over v1, cuDNN and SDPA's FlashAttention-2 and which kernel ran (``ran``);
  ``default_ranges(runs)`` the ranges chapter 1 quotes; ``plot_default_ratios(runs)`` the
  forward over cuDNN against N, the default kernel and version 1 in the same runs.
- ``host_rows(record)``: the rows of ``benchmarks/scripts/host_overhead.py``'s record with
  ``host_over_gpu`` and ``bound`` ("host" where the host needs at least `HOST_BOUND` of the
  GPU's time per call back to back: the GPU then waits for Python).

Design decisions:
- A ratio is only taken inside one file (both timed in the same process, interleaved), as in
  `versions`; ranges then span the runs, so a quoted range includes the run-to-run spread.
- The default runs live apart from ``h200-attention-*`` (the chapter's full benchmark, with
  FlexAttention and every SDPA backend): these time four providers only.
"""

from __future__ import annotations

from typing import Any

from mlinfra_lab.attention.versions import committed_version_runs, finish_ratio_plot, shape_label

__all__ = [
    "CONFIG_RUNS_PATTERN",
    "DEFAULT_RUNS_PATTERN",
    "committed_config_runs",
    "committed_default_runs",
    "config_table",
    "default_ranges",
    "default_table",
    "host_rows",
    "plot_default_ratios",
    "schedule_gain",
]

CONFIG_RUNS_PATTERN = "h200-gluon-configs-*-run*.json"
DEFAULT_RUNS_PATTERN = "h200-fwd-v5-default-*-run*.json"
ANCHORS = ("v1", "sdpa_flash", "sdpa_cudnn")
HOST_BOUND = 0.9  # host time / GPU time per call from which the GPU waits for Python


def committed_config_runs() -> list[dict[str, Any]]:
    """The committed configuration searches (oldest first); empty without the repository."""
    return committed_version_runs(CONFIG_RUNS_PATTERN)


def committed_default_runs() -> list[dict[str, Any]]:
    """The committed sweeps of the default kernel (oldest first); empty without the repository."""
    return committed_version_runs(DEFAULT_RUNS_PATTERN)


def config_table(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Per shape of one configuration search: the anchors' TFLOP/s, ``configs`` (name ->
    TFLOP/s of every configuration that passed its check) and ``best``/``best_tflops``."""
    out = []
    for r in run["rows"]:
        t = {k: v for k, v in r["tflops"].items() if isinstance(v, float)}
        configs = {k: v for k, v in t.items() if k not in ANCHORS}
        best = max(configs, key=configs.get) if configs else None
        row = {key: r[key] for key in ("head_dim", "causal", "seq")}
        row.update({a: t.get(a) for a in ANCHORS})
        row.update(configs=configs, best=best, best_tflops=configs.get(best))
        out.append(row)
    return sorted(out, key=lambda r: (r["head_dim"], r["causal"], r["seq"]))


def schedule_gain(
    runs: list[dict[str, Any]], tile: str = "m128n64w4s2", head_dim: int = 128
) -> list[float]:
    """``overlap-{tile}`` over ``plain-{tile}`` at `head_dim`, every shape of every run that
    timed both (the overlap's worth with everything else held equal)."""
    gains = []
    for run in runs:
        for r in config_table(run):
            c = r["configs"]
            if r["head_dim"] == head_dim and f"overlap-{tile}" in c and f"plain-{tile}" in c:
                gains.append(c[f"overlap-{tile}"] / c[f"plain-{tile}"])
    return gains


def default_table(result: dict[str, Any], mode: str = "fwd") -> list[dict[str, Any]]:
    """Per shape of one default-kernel sweep: TFLOP/s of ``ours`` (the default), ``v1`` and
    the anchors, ``ours`` over each, and ``ran``, the kernel and tile the default used."""
    cells: dict[tuple[int, bool, int], dict[str, Any]] = {}
    for r in result["rows"]:
        if r["mode"] == mode and r["tflops"]:
            cell = cells.setdefault((r["head_dim"], r["causal"], r["seq"]), {})
            cell[r["provider"]] = r["tflops"]
            if r["provider"] == "ours":
                cell["ran"] = r.get("tiles") or ""
    out = []
    for (d, causal, n), t in sorted(cells.items()):
        ours = t["ours"]
        row: dict[str, Any] = dict(head_dim=d, causal=causal, seq=n, ours=ours, ran=t["ran"])
        row.update(v1=t["ours_v1"], sdpa_flash=t["sdpa_flash"], sdpa_cudnn=t["sdpa_cudnn"])
        for key in ("v1", "sdpa_flash", "sdpa_cudnn"):
            row[f"over_{key}"] = ours / row[key]
        row["v1_over_sdpa_cudnn"] = row["v1"] / row["sdpa_cudnn"]
        out.append(row)
    return out


def default_ranges(runs: list[dict[str, Any]], bar: float = 1.25) -> dict[str, Any]:
    """The numbers chapter 1 quotes over all `runs`: the default over v1 where v5 ran
    (``v1_lo``/``v1_hi``); over cuDNN at 4k tokens or more, per head dim (``cudnn64_lo`` ...
    ``cudnn128_hi``) and version 1's at D=128 (``v1_cudnn128_lo``/``_hi``); over SDPA's
    FlashAttention-2 everywhere (``flash_lo``/``flash_hi``, ``flash_worst_shape``) and the
    shape-runs below `bar` (``below_bar``: how many, ``below_bar_shapes``: which,
    ``below_bar_per_run``: how many in each run, oldest first)."""
    rows = [r for run in runs for r in default_table(run)]
    if not rows:
        raise ValueError("no default-kernel sweep found: run the benchmark with ours,ours_v1")
    v5 = [r["over_v1"] for r in rows if r["ran"].startswith("v5")]
    long = [r for r in rows if r["seq"] >= 4096]

    def cudnn(d: int, key: str = "over_sdpa_cudnn") -> list[float]:
        return [r[key] for r in long if r["head_dim"] == d]

    worst = min(rows, key=lambda r: r["over_sdpa_flash"])
    below = [r for r in rows if r["over_sdpa_flash"] < bar]
    return dict(
        runs=len(runs),
        v1_lo=min(v5),
        v1_hi=max(v5),
        cudnn64_lo=min(cudnn(64)),
        cudnn64_hi=max(cudnn(64)),
        cudnn128_lo=min(cudnn(128)),
        cudnn128_hi=max(cudnn(128)),
        v1_cudnn128_lo=min(cudnn(128, "v1_over_sdpa_cudnn")),
        v1_cudnn128_hi=max(cudnn(128, "v1_over_sdpa_cudnn")),
        flash_lo=worst["over_sdpa_flash"],
        flash_hi=max(r["over_sdpa_flash"] for r in rows),
        flash_worst_shape=shape_label(worst),
        below_bar=len(below),
        below_bar_shapes=sorted({shape_label(r) for r in below}),
        below_bar_per_run=[
            sum(r["over_sdpa_flash"] < bar for r in default_table(run)) for run in runs
        ],
    )


def plot_default_ratios(runs: list[dict[str, Any]], ax: Any = None) -> Any:
    """Forward TFLOP/s over cuDNN's against N: the default kernel (solid) and version 1
    (dashed) in the same runs, one colour per (head dim, causal), one line per run."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.4))
    classes = [(64, False), (64, True), (128, False), (128, True)]
    for run_no, run in enumerate(runs):
        rows = default_table(run)
        for c, (d, causal) in enumerate(classes):
            mine = [r for r in rows if r["head_dim"] == d and r["causal"] == causal]
            for key, style, who in (
                ("over_sdpa_cudnn", "o-", "default"),
                ("v1_over_sdpa_cudnn", "x--", "v1"),
            ):
                label = f"{who}, D={d}{' causal' if causal else ''}" if run_no == 0 else None
                pts = [(r["seq"], r[key]) for r in mine]
                ax.plot(*zip(*pts, strict=True), style, color=f"C{c}", lw=1, ms=3, label=label)
    return finish_ratio_plot(ax, "forward TFLOP/s over cuDNN, same run")


def host_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The host-overhead record's rows, each with ``host_over_gpu`` and ``bound``."""
    out = []
    for r in record["rows"]:
        ratio = r["host_us"] / r["gpu_us"]
        out.append(dict(r, host_over_gpu=ratio, bound="host" if ratio >= HOST_BOUND else "GPU"))
    return out
