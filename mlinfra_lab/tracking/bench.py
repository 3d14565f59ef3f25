"""`mlinfra-lab bench tracking`: this store side by side with MLflow's SQLAlchemy store on SQLite.

(and, through HTTP, our client -> our server beside MLflow's own server: `server.bench`)

Contract: `run_benchmark(config)` measures, for this store and (when installed) MLflow, on
SQLite files in one work directory on this machine: metric-logging throughput
(``log_runs x log_metrics x log_steps`` points, logged one step at a time the way a
training loop does), run creation throughput (runs with params, tags and two metrics),
and p50/p99 latency of five representative searches over a database of `search_runs`
runs; it returns one JSON-able dict with the machine, versions, config and the ratios.

Design decisions:
- Same workload, same API level: each system is driven through its public Python API
  (`TrackingStore` / `MlflowClient`), one call per training step, as a user would.
  MLflow is measured three ways: per-step synchronous `log_batch` (its default), per-step
  *asynchronous* `log_batch(..., synchronous=False)` (MLflow's own answer to per-step
  latency: the call enqueues the points and returns a `RunOperations` future, a background
  thread writes them; timed until every future's ``wait()`` has returned and every point is
  counted in MLflow's database, with the time spent inside the calls reported apart),
  and `log_batch` of 1000 points per call (batches a user buffers by hand).
- MLflow's synchronous calls are about two orders of magnitude slower, so its synchronous
  log and create phases may run at a smaller scale (`mlflow_scale`), and its asynchronous
  logging at `mlflow_async_scale` (default: `mlflow_scale`). Throughputs are rates, and the
  JSON records the scale each was measured at.
- The search database is grown to `search_runs` runs: the runs created through the API
  plus synthetic runs inserted directly with SQL into each system's own tables (untimed,
  same generator, same value distributions), so both answer the same queries over the
  same number of runs. The JSON says how many runs were bulk-inserted.
- Latencies are wall-clock per call after two warm-up calls; the machine's load average
  is recorded, because on a shared machine it moves every number.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from mlinfra_lab.results import results_dir as committed_results_dir
from mlinfra_lab.tracking.workload import (
    DAY,
    QUERIES,
    SEARCH_P99_TARGET_MS,
    BenchConfig,
    Progress,
    fill_mlflow,
    fill_ours,
    synthetic_runs,
    time_queries,
)

__all__ = ["BenchConfig", "QUERIES", "load_latest", "run_benchmark", "save", "synthetic_runs"]

T = TypeVar("T")


# -- this store ------------------------------------------------------------------------
def _bench_ours(cfg: BenchConfig, work: Path, now: float, progress: Progress) -> dict[str, Any]:
    from mlinfra_lab.tracking.store import TrackingStore

    store = TrackingStore(
        f"sqlite:///{work / 'mlinfra.db'}", str(work / "mlinfra-artifacts"), default_user="bench"
    )
    out: dict[str, Any] = {"system": "mlinfra_lab.tracking", "backend": "sqlite (WAL)"}
    runs, keys = cfg.n(cfg.log_runs), [f"m{k}" for k in range(cfg.log_metrics)]
    t0 = time.perf_counter()
    for r in progress(range(runs), desc="mlinfra: log metrics"):
        run = store.start_run("log", name=f"log-{r}")
        for step in range(cfg.log_steps):
            run.log_metrics({k: step / cfg.log_steps for k in keys}, step=step)
        run.end()
    dt = time.perf_counter() - t0
    points = runs * cfg.log_steps * cfg.log_metrics
    out["log"] = {"runs": runs, "points": points, "seconds": dt, "points_per_s": points / dt}
    assert store.count("metrics") == points, "the benchmark lost metric points"

    n_create = cfg.n(cfg.create_runs)
    specs = synthetic_runs(max(n_create, cfg.n(cfg.search_runs)), cfg.seed, now)
    t0 = time.perf_counter()
    for spec in progress(specs[:n_create], desc="mlinfra: create runs"):
        run = store.start_run(
            "search", params=spec["params"], tags=spec["tags"], start_time=spec["created"]
        )
        run.log_metrics(spec["metrics"])
        run.end()
    dt = time.perf_counter() - t0
    out["create"] = {"runs": n_create, "seconds": dt, "runs_per_s": n_create / dt}

    fill = specs[n_create:]
    fill_ours(store.engine, "search", fill, now, progress)
    queries = [(name, ours) for name, ours, _ in QUERIES]
    search = time_queries(
        lambda f: store.search_runs("search", f, limit=100), queries, cfg.search_repeats
    )
    out["search"] = {
        "db_runs": len(specs),
        "bulk_inserted": len(fill),
        **search,
        "plans": {name: store.explain_search("search", f) for name, f in queries},
    }
    out["db_bytes"] = os.path.getsize(work / "mlinfra.db")
    store.close()
    return out


# -- MLflow ----------------------------------------------------------------------------
def _bench_mlflow(cfg: BenchConfig, work: Path, now: float, progress: Progress) -> dict[str, Any]:
    import logging

    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    url = f"sqlite:///{work / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=url)
    out: dict[str, Any] = {
        "system": "mlflow (SqlAlchemyStore via MlflowClient)",
        "backend": "sqlite",
    }
    exp = client.create_experiment("log", artifact_location=(work / "mlflow-artifacts").as_uri())
    runs, keys = cfg.n(cfg.log_runs, mlflow=True), [f"m{k}" for k in range(cfg.log_metrics)]
    t0 = time.perf_counter()
    for _ in progress(range(runs), desc="mlflow: log metrics"):
        rid = client.create_run(exp).info.run_id
        for step in range(cfg.log_steps):
            ts = int(time.time() * 1000)
            client.log_batch(rid, metrics=[Metric(k, step / cfg.log_steps, ts, step) for k in keys])
        client.set_terminated(rid)
    dt = time.perf_counter() - t0
    points = runs * cfg.log_steps * cfg.log_metrics
    out["log"] = {"runs": runs, "points": points, "seconds": dt, "points_per_s": points / dt}
    # MLflow's best case: the user buffers points and sends log_batch of 1000 (its maximum).
    rid = client.create_run(exp).info.run_id
    pts = [Metric(k, 0.5, int(now * 1000), s) for s in range(cfg.log_steps) for k in keys]
    t0 = time.perf_counter()
    for i in range(0, len(pts), 1000):
        client.log_batch(rid, metrics=pts[i : i + 1000])
    dt = time.perf_counter() - t0
    out["log_batched_1000"] = {"points": len(pts), "seconds": dt, "points_per_s": len(pts) / dt}
    out["log_async"] = _mlflow_async_log(cfg, client, exp, work / "mlflow.db", keys, progress)

    sexp = client.create_experiment(
        "search", artifact_location=(work / "mlflow-artifacts").as_uri()
    )
    n_create = cfg.n(cfg.create_runs, mlflow=True)
    specs = synthetic_runs(max(n_create, cfg.n(cfg.search_runs)), cfg.seed, now)
    t0 = time.perf_counter()
    for spec in progress(specs[:n_create], desc="mlflow: create runs"):
        rid = client.create_run(
            sexp, start_time=int(spec["created"] * 1000), tags=spec["tags"]
        ).info.run_id
        client.log_batch(
            rid,
            metrics=[Metric(k, v, int(now * 1000), 0) for k, v in spec["metrics"].items()],
            params=[Param(k, str(v)) for k, v in spec["params"].items()],
        )
        client.set_terminated(rid)
    dt = time.perf_counter() - t0
    out["create"] = {"runs": n_create, "seconds": dt, "runs_per_s": n_create / dt}

    fill = specs[n_create:]
    fill_mlflow(url, int(sexp), fill, now, progress)
    week_ms = int((now - 7 * DAY) * 1000)
    queries = [(name, theirs.format(week_ms=week_ms)) for name, _, theirs in QUERIES]
    search = time_queries(
        lambda f: client.search_runs([sexp], f, max_results=100), queries, cfg.search_repeats
    )
    out["search"] = {"db_runs": len(specs), "bulk_inserted": len(fill), **search}
    out["db_bytes"] = os.path.getsize(work / "mlflow.db")
    return out


def _mlflow_async_log(
    cfg: BenchConfig, client: Any, exp: str, db: Path, keys: list[str], progress: Progress
) -> dict[str, Any]:
    """MLflow's asynchronous per-step logging, timed until every point is in its database."""
    import sqlite3

    from mlflow.entities import Metric

    runs = cfg.n(cfg.log_runs, mlflow_async=True)
    calls_s, run_ids = 0.0, []
    t0 = time.perf_counter()
    for _ in progress(range(runs), desc="mlflow: log metrics, async"):
        rid = client.create_run(exp).info.run_id
        run_ids.append(rid)
        c0, pending = time.perf_counter(), []
        for step in range(cfg.log_steps):
            ts = int(time.time() * 1000)
            pending.append(
                client.log_batch(
                    rid,
                    metrics=[Metric(k, step / cfg.log_steps, ts, step) for k in keys],
                    synchronous=False,
                )
            )
        calls_s += time.perf_counter() - c0  # what the training loop waited for
        for operation in pending:  # the run is over only when its points are stored
            operation.wait()
        client.set_terminated(rid)
    dt = time.perf_counter() - t0
    points = runs * cfg.log_steps * cfg.log_metrics
    with sqlite3.connect(db) as con:
        marks = ",".join("?" * len(run_ids))
        (stored,) = con.execute(
            f"SELECT COUNT(*) FROM metrics WHERE run_uuid IN ({marks})", run_ids
        ).fetchone()
    assert stored == points, f"MLflow's async logging stored {stored} of {points} points"
    return {
        "runs": runs,
        "points": points,
        "seconds": dt,
        "points_per_s": points / dt,
        "call_seconds": calls_s,  # time inside log_batch calls, the loop's own stall
        "scale": cfg.mlflow_async_scale_or_default(),
    }


def _versions() -> dict[str, str | None]:
    import sqlite3
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    for pkg in ("mlinfra-lab", "sqlalchemy", "alembic", "fsspec", "mlflow"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def mlflow_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("mlflow") is not None


def run_benchmark(
    cfg: BenchConfig, workdir: str | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """Run the benchmark; return the results dict (machine, versions, config, systems, ratios)."""
    if progress is None:

        def progress(it: Iterable[T], /, desc: str = "") -> Iterable[T]:  # noqa: ARG001 (plain iteration, no bar)
            return it

    now = time.time()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mlinfra-bench-", dir=workdir) as tmp:
        work = Path(tmp)
        systems = {"mlinfra": _bench_ours(cfg, work, now, progress)}
        notes = []
        if cfg.with_mlflow and mlflow_available():
            systems["mlflow"] = _bench_mlflow(cfg, work, now, progress)
        elif cfg.with_mlflow:
            notes.append(
                "MLflow is not installed (pip install 'mlinfra-lab[bench]'): measured this store only"
            )
        if cfg.with_server:
            from mlinfra_lab.tracking.server import bench as served  # needs FastAPI and uvicorn

            systems["served"] = served.bench_served(cfg, work, now, progress)
            command = served.mlflow_server_command(cfg.mlflow_bin) if cfg.with_mlflow else None
            if command:
                systems["mlflow_server"] = served.bench_mlflow_server(
                    cfg, work, now, progress, command
                )
            elif cfg.with_mlflow:
                notes.append(served.why_no_mlflow_server)
    result: dict[str, Any] = {
        "benchmark": "tracking",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "versions": _versions(),
        "config": asdict(cfg),
        "systems": systems,
        "notes": notes,
    }
    if "mlflow" in systems:
        ours, theirs = systems["mlinfra"], systems["mlflow"]
        result["ratios"] = {
            "log_throughput_vs_mlflow_per_step": ours["log"]["points_per_s"]
            / theirs["log"]["points_per_s"],
            "log_throughput_vs_mlflow_async": ours["log"]["points_per_s"]
            / theirs["log_async"]["points_per_s"],
            "log_throughput_vs_mlflow_batched_1000": ours["log"]["points_per_s"]
            / theirs["log_batched_1000"]["points_per_s"],
            "create_throughput": ours["create"]["runs_per_s"] / theirs["create"]["runs_per_s"],
            "search_p50_latency": theirs["search"]["p50_ms"] / ours["search"]["p50_ms"],
            "search_p99_latency": theirs["search"]["p99_ms"] / ours["search"]["p99_ms"],
            "per_query_p50": {
                a["name"]: b["p50_ms"] / a["p50_ms"]
                for a, b in zip(ours["search"]["queries"], theirs["search"]["queries"], strict=True)
            },
        }
    if "served" in systems and "mlflow_server" in systems:
        ours, theirs = systems["served"], systems["mlflow_server"]
        result["ratios_served"] = {
            "log_throughput_vs_mlflow_server_per_step": ours["log"]["points_per_s"]
            / theirs["log"]["points_per_s"],
            "log_throughput_vs_mlflow_server_batched_1000": ours["log"]["points_per_s"]
            / theirs["log_batched_1000"]["points_per_s"],
            "create_throughput": ours["create"]["runs_per_s"] / theirs["create"]["runs_per_s"],
            "search_p50_latency": theirs["search"]["p50_ms"] / ours["search"]["p50_ms"],
            "search_p99_latency": theirs["search"]["p99_ms"] / ours["search"]["p99_ms"],
        }
    result["targets"] = {
        "p99_search_under_50ms": systems["mlinfra"]["search"]["p99_ms"] < SEARCH_P99_TARGET_MS
    }
    if "served" in systems:
        result["targets"]["served_p99_search_under_50ms"] = (
            systems["served"]["search"]["p99_ms"] < SEARCH_P99_TARGET_MS
        )
    if "ratios_served" in result:
        rs = result["ratios_served"]
        result["targets"] |= {
            "served_ingest_10x_mlflow_server": rs["log_throughput_vs_mlflow_server_per_step"] >= 10,
            "served_search_10x_mlflow_server": rs["search_p50_latency"] >= 10,
        }
    if "ratios" in result:
        result["targets"] |= {
            "log_10x_mlflow": result["ratios"]["log_throughput_vs_mlflow_per_step"] >= 10,
            "log_10x_mlflow_async": result["ratios"]["log_throughput_vs_mlflow_async"] >= 10,
            "search_p50_10x_lower": result["ratios"]["search_p50_latency"] >= 10,
        }
    return result


def save(result: dict[str, Any], out: str | os.PathLike = "benchmarks/results") -> Path:
    """Write `result` to `out`: a ``.json`` file name as given (the convention of every bench
    target's ``--out FILE``), else a folder, as ``cpu-tracking-<date>.json`` in it; return
    the path."""
    out = Path(out)
    path = out if out.suffix == ".json" else out / f"cpu-tracking-{result['date'][:10]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def load_latest(
    results_dir: str | os.PathLike | None = None, needs: str | None = None
) -> tuple[Path, dict[str, Any]] | None:
    """The newest committed ``*tracking*.json`` result and its path (None when there is none).

    Newest by the ``date`` the result records, not by file name (``cpu-tracking-server-...``
    sorts after every dated name); with `needs`, only results whose ``systems`` hold that
    system (``"mlflow"``, ``"served"``, ``"mlflow_server"``). Looks in `results_dir`, else in
    the committed ``benchmarks/results`` (a source checkout's or the installed wheel's copy,
    `mlinfra_lab.results`), else in ``./benchmarks/results`` and ``../benchmarks/results``.
    """
    candidates = (
        [Path(results_dir)]
        if results_dir
        else [
            committed_results_dir(),
            Path.cwd() / "benchmarks" / "results",
            Path.cwd().parent / "benchmarks" / "results",
        ]
    )
    for d in candidates:
        found = [
            (f, json.loads(f.read_text()))
            for f in (sorted(d.glob("*tracking*.json")) if d.is_dir() else [])
        ]
        found = [(f, r) for f, r in found if needs is None or needs in r.get("systems", {})]
        if found:
            return max(found, key=lambda fr: fr[1].get("date", ""))
    return None
