"""The appendix's readers of committed H200 runs: the kernel versions, two FlashAttention
ideas and version 5 (Gluon), each side by side with version 1 and the anchors.

Contract, by experiment (each reader loads its committed files, oldest first, with ``file``
added, and returns rows per shape ``(head_dim, causal, seq)`` or the ranges the case-study
appendix of chapter 1 quotes):
- Forward versions (``mlinfra-lab bench attention --providers ours_v1,ours_v3,...`` at
  687b216):
  ``version_table(result, mode)`` each version's TFLOP/s (``v1``, ``v2``, ...), the anchors'
  and ``vK_over_v1``/``vK_over_cudnn``; ``committed_version_runs(pattern)`` the runs
  (`VERSION_RUNS_PATTERN`; the v4 runs with `OVERLAP_RUNS_PATTERN`); ``version_summary`` and
  ``version_ranges`` condense them; ``plot_version_ratios`` draws each version over v1.
- FA2's 5-matmul backward and warp specialisation: ``backward_table(result)`` the split
  (``split``: two kernels, 7 matmuls) and 5-matmul (``atomic``) backward's TFLOP/s and their
  ratio; ``backward_summary(runs)``, ``atomic_traffic(result)`` (the atomics' bytes at one
  shape), ``plot_backward_ratios``; ``warp_specialize_probe()`` the probe's committed record
  and ``probe_summary(record)``.
- Version 5: ``committed_config_runs()`` and ``config_table(run)`` the Gluon configuration
  search, ``schedule_gain`` the overlap over the plain schedule at one tile;
  ``committed_default_runs()``, ``default_table(run)``, ``default_ranges(runs)`` and
  ``plot_default_ratios`` the default kernel's sweeps against version 1 and the anchors;
  ``host_rows(record)`` the host-overhead record with ``host_over_gpu`` and ``bound``
  ("host" from `HOST_BOUND` of the GPU's time per call: the GPU then waits for Python).

Design decisions:
- A ratio is only ever taken inside one file: both numbers were measured in the same run,
  interleaved by the benchmark, so the GPU's clock and temperature drift cancels; a quoted
  range then spans the runs, so it includes the run-to-run spread.
- Rows keep the medians the benchmark wrote (``tflops``: the median of ``--repeats``
  timings); a shape a provider could not run is left out of that provider's ratios.
- Each experiment's runs live in their own files (``fwd-versions``, ``bwd-atomic``,
  ``gluon-configs``, ``fwd-v5-default``), never read as *the* benchmark of the default
  kernel: chapter 1 chooses that by its rows' kernel version (`study`).
- The runs of versions 2-4 and of the 5-matmul ("atomic") backward were made with the code
  of git commit 687b216; those variants were removed from the kernel since (`flash`'s
  docstring, "Removed variants"), so their committed files are the only record of them;
  nothing in this module runs a kernel.
- A record is read as it was written (which launches compiled, whether the compiler split
  the loop, its message); nothing is re-derived here.
- One module for the appendix (it is read by one page and its tests), not part of the
  kernel's API: `mlinfra_lab.attention` does not export it.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "BACKWARD_RUNS_PATTERN",
    "CONFIG_RUNS_PATTERN",
    "DEFAULT_RUNS_PATTERN",
    "HOST_BOUND",
    "OVERLAP_RUNS_PATTERN",
    "PROBE_PATTERN",
    "VERSION_RUNS_PATTERN",
    "atomic_traffic",
    "backward_summary",
    "backward_table",
    "committed_backward_runs",
    "committed_config_runs",
    "committed_default_runs",
    "committed_version_runs",
    "config_table",
    "default_ranges",
    "default_table",
    "finish_ratio_plot",
    "host_rows",
    "plot_backward_ratios",
    "plot_default_ratios",
    "plot_version_ratios",
    "probe_summary",
    "schedule_gain",
    "shape_label",
    "version_ranges",
    "version_summary",
    "version_table",
    "warp_specialize_probe",
]

# ---- Forward versions side by side ----

_VERSION = re.compile(r"^ours_v(\d+)$")
VERSION_RUNS_PATTERN = "h200-fwd-versions-*.json"
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


def committed_version_runs(pattern: str = VERSION_RUNS_PATTERN) -> list[dict[str, Any]]:
    """The committed result files matching `pattern` (oldest first; default: the v1/v2/v3
    runs, `OVERLAP_RUNS_PATTERN` the v1/v4 ones; the backward, Gluon and default-run readers
    below read theirs with it too), each with its file name under ``"file"``; empty when the package runs
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
        raise ValueError(
            f"no run timed v1 and {key} together (rows of ours_v1 and ours_{key}): pass the "
            "runs that did, such as committed_version_runs(OVERLAP_RUNS_PATTERN) for v4"
        )

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


# ---- FA2's 5-matmul backward, and warp specialisation ----

BACKWARD_RUNS_PATTERN = "h200-bwd-atomic-*.json"
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
        raise ValueError(
            "no run timed both backwards (rows of ours_v1 and ours_atomic): pass the committed "
            "runs, committed_backward_runs()"
        )

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
    return committed_version_runs(BACKWARD_RUNS_PATTERN)


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


# ---- Version 5 (Gluon): the configuration search, the default kernel's runs, host overhead ----

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
        best = max(configs, key=lambda c: configs[c]) if configs else None
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
