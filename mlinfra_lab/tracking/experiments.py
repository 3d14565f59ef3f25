"""The chapter's measurements: inline blobs vs references, index effect, params and history in
JSON vs promoted columns and tables, cache hit rates, a year of retention.

Contract: each function sets up its own small experiment (in a directory it is given, or
purely in memory), measures one claim of the chapter and returns plain numbers that the
notebook plots; sizes are arguments, so a test can run them tiny and a GPU-less laptop
runs the chapter in seconds.

Design decisions:
- The inline-blob measurement uses a raw SQLite table on purpose: it is the design the
  chapter argues against, so it is not built into the store.
- So does the JSON measurement (`hot_params_vs_json`): params and metric history kept in
  a JSON document per run, the schema-less design, against a promoted indexed column and
  an append-only history table, in one SQLite file of the size given.
- The figures of these measurements are `figures`' ``plot_*`` functions, re-exported here
  (``experiments.plot_*``) so the notebook reads one module.
- The retention simulation is pure (it calls `plan_retention` on `ArtifactRecord`s day by
  day), so a year of runs costs milliseconds and needs no storage at all.
"""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlinfra_lab.tracking.figures import (
    plot_bench,
    plot_cache_hit_rates,
    plot_cold_and_cached,
    plot_inline_vs_reference,
    plot_json_appends,
    plot_lineage,
    plot_retention,
)
from mlinfra_lab.tracking.retention import DAY, ArtifactRecord, RetentionPolicy, plan_retention

if TYPE_CHECKING:
    from mlinfra_lab.tracking.store import TrackingStore

__all__ = [
    "hot_params_vs_json",
    "index_effect",
    "inline_vs_reference",
    "plot_bench",
    "plot_cache_hit_rates",
    "plot_cold_and_cached",
    "plot_inline_vs_reference",
    "plot_json_appends",
    "plot_lineage",
    "plot_retention",
    "populate_demo",
    "simulate_retention",
    "skewed_access_hit_rates",
]


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: page cache, compiled-statement cache
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def inline_vs_reference(
    directory: str | os.PathLike,
    runs: int = 200,
    blob_bytes: int = 256 * 1024,
    repeats: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """Same runs and checkpoints, stored two ways; time what metadata work costs in each.

    `inline`: one table, the checkpoint bytes in a BLOB column next to the metrics.
    `reference`: metadata rows hold a sha256 and a path; bytes live in files.
    Measures the database size, a narrow query (``SELECT id, acc ... WHERE acc > 0.9``),
    a whole-row query (``SELECT * ...``, what an ORM loading run objects does) and a
    backup of the database (what every replica, snapshot and migration pays).
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    accs = [rng.random() for _ in range(runs)]
    blob = rng.randbytes(blob_bytes)
    out: dict[str, Any] = {"runs": runs, "blob_bytes": blob_bytes}
    for design in ("inline", "reference"):
        path = d / f"{design}.db"
        path.unlink(missing_ok=True)
        con = sqlite3.connect(path)
        con.execute(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT, acc REAL, ckpt BLOB, ckpt_uri TEXT, ckpt_sha TEXT)"
        )
        for i, acc in enumerate(accs):
            if design == "inline":
                con.execute(
                    "INSERT INTO runs VALUES (?, ?, ?, ?, NULL, NULL)", (i, f"run-{i}", acc, blob)
                )
            else:
                f = d / "blobs" / f"{i}.bin"
                f.parent.mkdir(exist_ok=True)
                f.write_bytes(blob)
                con.execute(
                    "INSERT INTO runs VALUES (?, ?, ?, NULL, ?, ?)",
                    (i, f"run-{i}", acc, str(f), "sha"),
                )
        con.commit()
        narrow = lambda c=con: c.execute("SELECT id, acc FROM runs WHERE acc > 0.9").fetchall()  # noqa: E731
        wide = lambda c=con: c.execute("SELECT * FROM runs WHERE acc > 0.9").fetchall()  # noqa: E731

        def backup(c: sqlite3.Connection = con, dst: Path = d / f"{design}-backup.db") -> None:
            dst.unlink(missing_ok=True)
            with sqlite3.connect(dst) as b:
                c.backup(b)

        out[design] = {
            "db_bytes": path.stat().st_size,
            "narrow_query_ms": _median_ms(narrow, repeats),
            "row_query_ms": _median_ms(wide, repeats),
            "backup_ms": _median_ms(backup, 3),
        }
        con.close()
    return out


def populate_demo(
    store: TrackingStore,
    project: str = "demo",
    runs: int = 200,
    metrics: int = 5,
    steps: int = 50,
    seed: int = 0,
    now: float | None = None,
) -> list[int]:
    """Fill `project` with `runs` runs spread over 90 days (params, a team tag, metric curves).

    Everything is drawn from `seed`, run names included (from a generator of their own, so
    the values are those of earlier versions): two stores filled alike hold the same runs.
    """
    rng = random.Random(seed)
    names = random.Random(f"{seed}:names")
    now = time.time() if now is None else now
    ids = []
    for _ in range(runs):
        lr = rng.choice([1e-4, 3e-4, 1e-3, 3e-3, 1e-2])
        run = store.start_run(
            project,
            name=f"run-{names.getrandbits(32):08x}",
            params={
                "lr": lr,
                "optimizer": rng.choice(["adam", "adamw", "sgd"]),
                "model": rng.choice(["resnet18", "resnet50", "vit-b16"]),
            },
            tags={"team": rng.choice(["nlp", "vision", "speech"])},
            start_time=now - rng.uniform(0, 90) * DAY,
        )
        ceiling = rng.uniform(0.5, 0.99)
        for step in range(steps):
            frac = (step + 1) / steps
            vals = {
                "val_acc": ceiling * (1 - 0.9 ** (step + 1)),
                "val_loss": (1 - ceiling) + 1 / (1 + 10 * frac),
            }
            vals |= {f"aux{k}": rng.random() for k in range(metrics - 2)}
            run.log_metrics(vals, step=step)
        run.end()
        ids.append(run.id)
    return ids


def index_effect(
    store: TrackingStore, project: str, filter: str, repeats: int = 20
) -> dict[str, Any]:
    """Median search latency and query plan with the (key, value) index on latest_metrics, then without."""
    name = "ix_latest_metrics_key_value_run_id"
    search = lambda: store.search_runs(project, filter)  # noqa: E731
    out = {
        "with_index": {
            "ms": _median_ms(search, repeats),
            "plan": store.explain_search(project, filter),
        }
    }
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP INDEX {name}")
    store.engine.dispose()  # pooled connections cache prepared EXPLAINs with the old plan
    try:
        out["without_index"] = {
            "ms": _median_ms(search, repeats),
            "plan": store.explain_search(project, filter),
        }
    finally:
        with store.engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE INDEX {name} ON latest_metrics (key, value, run_id)")
        store.engine.dispose()
    return out


def hot_params_vs_json(
    directory: str | os.PathLike,
    runs: int = 100_000,
    params: int = 20,
    history: tuple[int, ...] = (10, 100, 1000, 10000),
    repeats: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """Params and metric history in a JSON document per run, against the store's design.

    Search: `runs` runs whose `params` keys (``lr`` among them) sit in a JSON column; the
    same filter on ``lr`` through ``json_extract`` (every row parsed) and through a promoted,
    indexed ``hot_lr`` column (an index range). Logging: appending one point to a metric
    history of each length in `history`, as a read-modify-write of the run's JSON document
    against one insert into an append-only table. Returns medians in ms, the query plans,
    the row counts (equal: the same answer) and the database size.
    """
    import json

    path = Path(directory) / "json_vs_columns.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    rng = random.Random(seed)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, params TEXT, hot_lr REAL)")
    rows = []
    for i in range(runs):
        ps = {f"p{k}": rng.random() for k in range(params - 1)} | {"lr": 10 ** rng.uniform(-5, -1)}
        rows.append((i, json.dumps(ps), ps["lr"]))
    con.executemany("INSERT INTO runs VALUES (?, ?, ?)", rows)
    con.execute("CREATE INDEX ix_runs_hot_lr ON runs (hot_lr)")
    con.commit()
    lo, hi = 1e-3, 1.02e-3  # about 0.2% of the runs: the selective search people run
    queries = {
        "json": "SELECT id FROM runs WHERE json_extract(params, '$.lr') BETWEEN ? AND ?",
        "promoted": "SELECT id FROM runs WHERE hot_lr BETWEEN ? AND ?",
    }
    out: dict[str, Any] = {"runs": runs, "params": params, "db_mb": path.stat().st_size / 2**20}
    for name, sql in queries.items():

        def fetch(q: str = sql) -> list[Any]:
            return con.execute(q, (lo, hi)).fetchall()

        out[name] = {
            "ms": _median_ms(fetch, repeats),
            "rows": len(con.execute(sql, (lo, hi)).fetchall()),
            "plan": [r[-1] for r in con.execute("EXPLAIN QUERY PLAN " + sql, (lo, hi))],
        }
    con.execute("CREATE TABLE doc (run_id INTEGER PRIMARY KEY, metrics TEXT)")
    con.execute("CREATE TABLE points (run_id INTEGER, key TEXT, step INTEGER, value REAL)")
    con.execute("CREATE INDEX ix_points ON points (run_id, key, step)")
    out["append"] = []
    for run_id, length in enumerate(history):
        steps = [[s, rng.random()] for s in range(length)]
        con.execute("INSERT INTO doc VALUES (?, ?)", (run_id, json.dumps({"loss": steps})))
        con.executemany(
            "INSERT INTO points VALUES (?, 'loss', ?, ?)", [(run_id, s, v) for s, v in steps]
        )
        con.commit()
        step = iter(range(length, length + 10 * (repeats + 1)))

        def append_json(run_id: int = run_id, step: Any = step) -> None:
            (text,) = con.execute("SELECT metrics FROM doc WHERE run_id = ?", (run_id,)).fetchone()
            doc = json.loads(text)
            doc["loss"].append([next(step), 0.5])
            con.execute("UPDATE doc SET metrics = ? WHERE run_id = ?", (json.dumps(doc), run_id))
            con.commit()

        def append_row(run_id: int = run_id, step: Any = step) -> None:
            con.execute("INSERT INTO points VALUES (?, 'loss', ?, 0.5)", (run_id, next(step)))
            con.commit()

        out["append"].append(
            {
                "history": length,
                "json_ms": _median_ms(append_json, repeats),
                "table_ms": _median_ms(append_row, repeats),
            }
        )
    con.close()
    return out


def skewed_access_hit_rates(
    artifact_sizes: list[int],
    cache_bytes: list[int],
    accesses: int = 2000,
    zipf_s: float = 1.1,
    seed: int = 0,
) -> dict[int, float]:
    """Hit rate of an LRU cache of each size under a Zipf(s)-skewed access pattern (simulated).

    The same policy as `ArtifactCache`, replayed on a trace, so many sizes cost nothing;
    the chapter checks one point against the real cache.
    """
    from collections import OrderedDict

    rng = random.Random(seed)
    n = len(artifact_sizes)
    weights = [1 / (i + 1) ** zipf_s for i in range(n)]
    trace = rng.choices(range(n), weights=weights, k=accesses)
    rates = {}
    for cap in cache_bytes:
        lru: OrderedDict[int, int] = OrderedDict()
        used = hits = 0
        for i in trace:
            if i in lru:
                hits += 1
                lru.move_to_end(i)
                continue
            size = artifact_sizes[i]
            if size > cap:
                continue
            while used + size > cap:
                _, s = lru.popitem(last=False)
                used -= s
            lru[i] = size
            used += size
        rates[cap] = hits / accesses
    return rates


@dataclass(frozen=True)
class RetentionSim:
    days: list[int]
    kept_bytes: list[int]  # hot tier after each day's retention
    cold_bytes: list[int]
    unmanaged_bytes: list[int]  # what keeping everything would cost


def simulate_retention(
    policy: RetentionPolicy,
    days: int = 365,
    runs_per_day: int = 3,
    ckpts_per_run: int = 10,
    ckpt_bytes: int = 100 * 2**20,
    seed: int = 0,
) -> RetentionSim:
    """A year of runs, each saving `ckpts_per_run` checkpoints; retention applied every day."""
    rng = random.Random(seed)
    t0, next_id, run_id = 1_700_000_000.0, 1, 1
    live: dict[int, ArtifactRecord] = {}
    out = RetentionSim([], [], [], [])
    total = 0
    for day in range(days):
        for _ in range(rng.randint(max(0, runs_per_day - 2), runs_per_day + 2)):
            created = t0 + (day + rng.random()) * DAY
            for step in range(ckpts_per_run):
                live[next_id] = ArtifactRecord(
                    next_id,
                    "proj",
                    run_id,
                    created,
                    "checkpoint",
                    step,
                    created,
                    ckpt_bytes,
                    "hot",
                    pinned=rng.random() < 0.002,
                )
                next_id += 1
                total += ckpt_bytes
            run_id += 1
        now = t0 + (day + 1) * DAY
        plan = plan_retention(policy, list(live.values()), now)
        for act in plan.actions:
            if act.action == "delete":
                del live[act.artifact_id]
            else:
                live[act.artifact_id] = replace(live[act.artifact_id], tier="cold")
        out.days.append(day + 1)
        out.kept_bytes.append(sum(a.size for a in live.values() if a.tier == "hot"))
        out.cold_bytes.append(sum(a.size for a in live.values() if a.tier == "cold"))
        out.unmanaged_bytes.append(total)
    return out
