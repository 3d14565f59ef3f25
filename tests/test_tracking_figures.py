"""Chapter 4's figures (`experiments.plot_*`) draw what the measurements return."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import networkx as nx
import pytest

from mlinfra_lab.tracking import RetentionPolicy, RetentionRule, experiments
from mlinfra_lab.tracking.cache import CacheStats

pytestmark = pytest.mark.tracking


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_each_measurement_has_its_figure(tmp_path):
    ivr = experiments.inline_vs_reference(tmp_path, runs=5, blob_bytes=10_000, repeats=1)
    ax = experiments.plot_inline_vs_reference(ivr).axes[0]
    assert len(ax.patches) == 8 and ax.get_xscale() == "log"  # 4 measures x 2 designs

    hpj = experiments.hot_params_vs_json(tmp_path, runs=200, history=(10, 100), repeats=1)
    lines = experiments.plot_json_appends(hpj).axes[0].get_lines()
    assert [list(line.get_xdata()) for line in lines] == [[10, 100], [10, 100]]

    sim = experiments.skewed_access_hit_rates([10] * 20, [10, 100, 200], accesses=200)
    stats = CacheStats(hits=3, misses=1, evictions=0, bytes_cached=100, max_bytes=100)
    ax = experiments.plot_cache_hit_rates(sim, stats, 10, "demo").axes[0]
    assert list(ax.get_lines()[1].get_xdata()) == [10] and ax.get_title() == "demo"

    policy = RetentionPolicy(
        (
            RetentionRule(
                keep_all_days=5, keep_last_runs=1, cold_after_days=10, delete_after_days=20
            ),
        ),
        cold_root="memory://c",
    )
    ret = experiments.simulate_retention(
        policy, days=30, runs_per_day=1, ckpts_per_run=2, ckpt_bytes=1
    )
    assert len(experiments.plot_retention(ret).axes[0].collections) == 2  # hot and cold stacked
    assert len(experiments.plot_retention(ret, stacked=False).axes[0].get_lines()) == 2


def test_lineage_is_drawn_left_to_right():
    g = nx.DiGraph()
    g.add_edge("dataset:1", "run:1", relation="input")
    g.add_edge("run:1", "artifact:1", relation="output")
    fig = experiments.plot_lineage(g)
    assert [g.nodes[n]["layer"] for n in ("dataset:1", "run:1", "artifact:1")] == [0, 1, 2]
    assert fig.axes[0].get_title().startswith("lineage")


def test_the_benchmark_figure_with_and_without_mlflow():
    search = {
        "db_runs": 10,
        "queries": [{"name": "a", "p50_ms": 1.0}, {"name": "b", "p50_ms": 2.0}],
    }
    ours = {"log": {"points_per_s": 1e5}, "search": search}
    mlflow = {
        "log": {"points_per_s": 1e3},
        "log_batched_1000": {"points_per_s": 1e4},
        "search": search,
    }
    alone = experiments.plot_bench({"systems": {"mlinfra": ours}})
    assert len(alone.axes[0].patches) == 1 and len(alone.axes[1].patches) == 2
    both = experiments.plot_bench({"systems": {"mlinfra": ours, "mlflow": mlflow}})
    assert len(both.axes[0].patches) == 3 and len(both.axes[1].patches) == 4
    served = {"log": {"points_per_s": 5e4}}
    mlflow_server = {"log": {"points_per_s": 8e2}}
    all_five = experiments.plot_bench(
        {
            "systems": {
                "mlinfra": ours,
                "mlflow": mlflow,
                "served": served,
                "mlflow_server": mlflow_server,
            }
        }
    )
    assert [t.get_text() for t in all_five.axes[0].get_xticklabels()][-2:] == [
        "this store,\nserved",
        "MLflow server,\nper step",
    ]
    assert len(all_five.axes[0].patches) == 5


def test_the_benchmark_figure_draws_mlflow_async_logging_with_its_scale():
    search = {"db_runs": 10, "queries": [{"name": "a", "p50_ms": 1.0}]}
    ours = {"log": {"points_per_s": 1e5}, "search": search}
    mlflow = {
        "log": {"points_per_s": 1e3},
        "log_async": {"points_per_s": 8e2, "scale": 0.2},
        "log_batched_1000": {"points_per_s": 1e4},
        "search": search,
    }
    cfg = {"scale": 1.0, "mlflow_scale": 0.02, "mlflow_async_scale": 0.2}
    fig = experiments.plot_bench({"config": cfg, "systems": {"mlinfra": ours, "mlflow": mlflow}})
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert labels == [
        "this store",
        "MLflow,\nbatches of 1000\n(like for like)",
        "MLflow,\nper step\n(2% scale)",
        "MLflow async,\nper step\n(20% scale)",
    ]
    assert heights == [1e5, 1e4, 1e3, 8e2]


def test_the_benchmark_figure_marks_each_p99_against_the_target():
    from mlinfra_lab.tracking.workload import SEARCH_P99_TARGET_MS

    queries = [
        {"name": "a", "p50_ms": 1.0, "p99_ms": 70.0},
        {"name": "b", "p50_ms": 2.0, "p99_ms": 9.0},
    ]
    ours = {"log": {"points_per_s": 1e5}, "search": {"db_runs": 10, "queries": queries}}
    ax = experiments.plot_bench({"systems": {"mlinfra": ours}}).axes[1]
    assert [list(p) for p in ax.collections[0].get_offsets()] == [[-0.2, 70.0], [0.8, 9.0]]
    assert [line.get_ydata()[0] for line in ax.get_lines()] == [SEARCH_P99_TARGET_MS]


def test_the_cold_read_figure_draws_both_reads_with_the_bytes_they_moved():
    reads = [
        {"size": 1 << 16, "cold_ms": 9.0, "hit_ms": 1.0, "cold_bytes": 1 << 16, "hit_bytes": 0},
        {"size": 1 << 20, "cold_ms": 20.0, "hit_ms": 3.0, "cold_bytes": 1 << 20, "hit_bytes": 0},
    ]
    ax = experiments.plot_cold_and_cached(reads).axes[0]
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[9.0, 20.0], [1.0, 3.0]]
    notes = [t.get_text() for t in ax.texts]
    assert notes == ["0.062 MiB moved", "1 MiB moved", "0 MiB moved", "0 MiB moved"]
