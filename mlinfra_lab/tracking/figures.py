"""Chapter 4's figures, drawn from the numbers `experiments`, `tiers` and `bench` return.

Contract: each ``plot_*`` function takes a measurement's result (and an optional matplotlib
``Axes``, or none where the figure has several panels), draws it, and returns the Figure; it
never measures anything itself. They are re-exported by `experiments` (``experiments.plot_*``),
next to the measurements they draw.

Design decisions:
- The notebook stays thin: a cell calls the measurement, prints what a reader should read,
  and calls one of these; a reader who wants another view changes a plot function, not the
  measurement.
- matplotlib (and networkx for lineage) are imported inside the functions: the tracking
  store and its command line never need them.
"""

from __future__ import annotations

from typing import Any

from mlinfra_lab.tracking.workload import SEARCH_P99_TARGET_MS

__all__ = [
    "plot_bench",
    "plot_cache_hit_rates",
    "plot_inline_vs_reference",
    "plot_json_appends",
    "plot_lineage",
    "plot_retention",
]

GiB = 2**30
_INLINE_ROWS = (
    ("database size (MB)", "db_bytes", 1e-6),
    ("narrow query (ms)", "narrow_query_ms", 1),
    ("whole-row query (ms)", "row_query_ms", 1),
    ("backup (ms)", "backup_ms", 1),
)
_NODE_COLORS = {
    "dataset": "tab:green",
    "code": "tab:gray",
    "run": "tab:blue",
    "artifact": "tab:orange",
}


def _axes(ax: Any, size: tuple[float, float]) -> tuple[Any, Any]:
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=size)
        return fig, ax
    return ax.figure, ax


def plot_inline_vs_reference(ivr: dict[str, Any], ax: Any = None) -> Any:
    """Bars of `experiments.inline_vs_reference`: size, queries and backup, both designs."""
    fig, ax = _axes(ax, (7, 3))
    labels = [row[0] for row in _INLINE_ROWS]
    ax.barh(
        [label + " " for label in labels],
        [ivr["inline"][key] * k for _, key, k in _INLINE_ROWS],
        label="blobs inline",
        color="tab:red",
    )
    ax.barh(
        labels,
        [ivr["reference"][key] * k for _, key, k in _INLINE_ROWS],
        label="blobs by reference",
        color="tab:blue",
    )
    ax.set_xscale("log")
    ax.set_xlabel("log scale")
    ax.legend(loc="lower right")
    ax.set_title(f"{ivr['runs']} runs, one {ivr['blob_bytes'] // 1024} KiB checkpoint each")
    fig.tight_layout()
    return fig


def plot_json_appends(hpj: dict[str, Any], ax: Any = None) -> Any:
    """`experiments.hot_params_vs_json`'s appends: cost of one point against history length."""
    fig, ax = _axes(ax, (5, 3))
    lengths = [a["history"] for a in hpj["append"]]
    ax.loglog(
        lengths,
        [a["json_ms"] for a in hpj["append"]],
        "o-",
        label="rewrite the run's JSON document",
    )
    ax.loglog(
        lengths,
        [a["table_ms"] for a in hpj["append"]],
        "s-",
        label="insert one row (append-only table)",
    )
    ax.set_xlabel("points already in the history")
    ax.set_ylabel("ms to append one point")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_lineage(graph: Any, ax: Any = None) -> Any:
    """A lineage graph (``Lineage.to_networkx()``, several merged) left to right: datasets and
    code, the runs that read them, their artifacts, the runs that consumed those."""
    import networkx as nx

    fig, ax = _axes(ax, (9, 4))

    def layer(node: str) -> int:
        preds = list(graph.predecessors(node))
        return 0 if not preds else 1 + max(layer(p) for p in preds)

    for node in graph.nodes:
        graph.nodes[node]["layer"] = layer(node)
    pos = nx.multipartite_layout(graph, subset_key="layer")
    nx.draw_networkx(
        graph,
        pos,
        ax=ax,
        node_size=900,
        font_size=7,
        arrowsize=12,
        node_color=[_NODE_COLORS[n.split(":")[0]] for n in graph.nodes],
        labels={n: graph.nodes[n].get("label", n) for n in graph.nodes},
    )
    nx.draw_networkx_edge_labels(
        graph,
        pos,
        ax=ax,
        font_size=6,
        edge_labels={(s, d): r["relation"] for s, d, r in graph.edges(data=True)},
    )
    ax.set_title(
        "lineage: datasets and code (left) -> runs -> artifacts -> runs that consumed them"
    )
    ax.axis("off")
    fig.tight_layout()
    return fig


def plot_cache_hit_rates(
    simulated: dict[int, float], measured: Any, artifact_bytes: int, title: str, ax: Any = None
) -> Any:
    """Simulated LRU hit rate against cache size (`experiments.skewed_access_hit_rates`), and
    the store's cache measured on the same trace (its `CacheStats`) as one point."""
    fig, ax = _axes(ax, (6, 3))
    ax.plot(
        [c / artifact_bytes for c in simulated],
        list(simulated.values()),
        "o-",
        label="LRU, simulated on the same trace",
    )
    ax.plot(
        [measured.max_bytes / artifact_bytes],
        [measured.hit_rate],
        "r*",
        markersize=14,
        label="the store's cache, measured",
    )
    ax.set_xlabel("cache size (artifacts)")
    ax.set_ylabel("hit rate")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_cold_and_cached(reads: list[dict[str, Any]], ax: Any = None) -> Any:
    """`tiers.cold_and_cached_reads`: read latency against blob size, a cold read (a cache miss,
    fetched from storage) beside a cache hit, each point labelled with the bytes it moved."""
    fig, ax = _axes(ax, (6, 3))
    sizes = [r["size"] for r in reads]
    for kind, style, label in (
        ("cold", "o-", "cold read (from storage)"),
        ("hit", "s-", "cache hit"),
    ):
        ax.plot(sizes, [r[f"{kind}_ms"] for r in reads], style, label=label)
        for r in reads:
            ax.annotate(
                f"{r[f'{kind}_bytes'] / 2**20:.2g} MiB moved",
                (r["size"], r[f"{kind}_ms"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("blob size (bytes)")
    ax.set_ylabel("read latency, median (ms)")
    ax.set_title("cold read from S3 (loopback) vs cache hit, measured")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_retention(sim: Any, ax: Any = None, stacked: bool = True) -> Any:
    """Storage over the days of `experiments.simulate_retention`: hot and cold tiers under the
    policy (stacked) against keeping everything; `stacked=False` draws the tiers as lines."""
    fig, ax = _axes(ax, (7, 3.5) if stacked else (6, 2.5))
    kept, cold = [b / GiB for b in sim.kept_bytes], [b / GiB for b in sim.cold_bytes]
    if stacked:
        ax.plot(sim.days, [b / GiB for b in sim.unmanaged_bytes], "k--", label="keep everything")
        ax.stackplot(
            sim.days,
            kept,
            cold,
            labels=["hot tier (with policy)", "cold tier (with policy)"],
            colors=["tab:red", "tab:blue"],
            alpha=0.7,
        )
        ax.set_title("storage over a year of simulated runs")
        ax.set_ylabel("GiB stored")
    else:
        ax.plot(sim.days, kept, label="hot")
        ax.plot(sim.days, cold, label="cold")
        ax.set_ylabel("GiB")
    ax.set_xlabel("day")
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def _at(result: dict[str, Any], key: str, measured: dict[str, Any] | None = None) -> str:
    """A line ``(2% scale)`` when an MLflow phase ran at a smaller scale than ours, else ``""``."""
    cfg = result.get("config", {})
    scale = (measured or {}).get("scale") or cfg.get(key) or cfg.get("mlflow_scale")
    ours = cfg.get("scale", 1.0)
    return f"\n({scale / ours:.0%} scale)" if scale and ours and scale < ours else ""


def plot_bench(result: dict[str, Any]) -> Any:
    """A `bench` result: logging throughput, and search latency per query (p50 bars, our
    p99 against the target), with MLflow's beside ours when the result has it (batches of
    1000 first, the like-for-like anchor; then per step synchronous, and per step
    asynchronous when the result measured it), and the served paths (ours through the tracking
    server, MLflow's own server) when it has them. An MLflow bar measured at a smaller scale
    than ours says so in its label: its rate is assumed to hold at ours."""
    import matplotlib.pyplot as plt

    systems = result["systems"]
    ours, ml = systems["mlinfra"], systems.get("mlflow")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    bars = [("this store", ours["log"]["points_per_s"], "tab:blue")]
    if ml:  # the like-for-like anchor first: MLflow fed the same batches of 1000 points
        bars.append(
            (
                "MLflow,\nbatches of 1000\n(like for like)",
                ml["log_batched_1000"]["points_per_s"],
                "salmon",
            )
        )
        bars.append(
            (
                "MLflow,\nper step" + _at(result, "mlflow_scale"),
                ml["log"]["points_per_s"],
                "tab:red",
            )
        )
        if ml.get("log_async"):  # MLflow's log_batch(..., synchronous=False), one call per step
            label = "MLflow async,\nper step" + _at(result, "mlflow_async_scale", ml["log_async"])
            bars.append((label, ml["log_async"]["points_per_s"], "orangered"))
    if systems.get("served"):
        bars.append(("this store,\nserved", systems["served"]["log"]["points_per_s"], "steelblue"))
    if systems.get("mlflow_server"):
        bars.append(
            ("MLflow server,\nper step", systems["mlflow_server"]["log"]["points_per_s"], "darkred")
        )
    axes[0].bar([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    axes[0].tick_params(axis="x", labelsize=7)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("metric points / s")
    axes[0].set_title("logging throughput")
    queries = [q["name"] for q in ours["search"]["queries"]]
    x = range(len(queries))
    axes[1].bar(
        [i - 0.2 for i in x],
        [q["p50_ms"] for q in ours["search"]["queries"]],
        0.4,
        label="this store p50",
    )
    p99 = [(i - 0.2, q["p99_ms"]) for i, q in enumerate(ours["search"]["queries"]) if "p99_ms" in q]
    if p99:  # each query's p99 over its timed calls, against the target the benchmark sets
        xs, ys = [p[0] for p in p99], [p[1] for p in p99]
        axes[1].scatter(xs, ys, marker="_", s=200, color="navy", label="this store p99")
        axes[1].axhline(SEARCH_P99_TARGET_MS, ls=":", color="gray", label="p99 target")
    if ml:
        axes[1].bar(
            [i + 0.2 for i in x],
            [q["p50_ms"] for q in ml["search"]["queries"]],
            0.4,
            label="MLflow p50",
            color="tab:red",
        )
    axes[1].set_xticks(list(x), queries, rotation=25, ha="right", fontsize=8)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("ms")
    axes[1].set_title(f"search over {ours['search']['db_runs']:,} runs")
    axes[1].legend()
    fig.tight_layout()
    return fig
