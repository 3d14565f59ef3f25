"""Where a search's time goes: the planner's counts, the SELECT, and loading the page of runs.

Contract: `build_search_db(store, project, runs)` grows `project` to `runs` synthetic runs
(the benchmark's generator and bulk insert, untimed); `search_phases(store, project,
queries, repeats)` runs each search the way `TrackingStore.search_runs` does, one phase at
a time, and returns per query the median time of each phase, the median and the largest
total, the plan chosen for each condition ("in" or "exists") and the database's plan;
`committed_search_tails()` lists, for every committed ``*tracking*.json`` result, the
search p99, the slowest query and the machine's load when the run started.

Design decisions:
- The phases are the store's own functions called in order (`reading.search_statement`,
  which counts matches to choose each condition's plan; executing that statement;
  `reading.run_infos`, three queries for the page's params, metrics and tags), on one
  connection, so the sum is the search the store runs less its access check, audit and time bound.
- The queries default to the benchmark's (`workload.QUERIES`) and the runs to its
  generator, so a phase measured here explains a latency in a committed benchmark file.
- The medians describe this machine now; a tail (p99) also depends on what else runs
  on it, which no phase breakdown can show: the largest total is reported, not judged.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlinfra_lab.tracking import access, query, reading
from mlinfra_lab.tracking.workload import QUERIES, fill_ours, synthetic_runs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mlinfra_lab.tracking.store import TrackingStore

__all__ = ["BENCH_QUERIES", "build_search_db", "committed_search_tails", "search_phases"]

# (name, filter) of the benchmark's five searches, in this store's language
BENCH_QUERIES: tuple[tuple[str, str], ...] = tuple((name, ours) for name, ours, _ in QUERIES)


def build_search_db(
    store: TrackingStore, project: str, runs: int, seed: int = 0, now: float | None = None
) -> int:
    """Add `runs` synthetic runs to `project` (created if new) with plain SQL; return the count."""
    now = time.time() if now is None else now
    store.start_run(project, name="seed").end()  # creates the project, with the caller as ADMIN
    fill_ours(store.engine, project, synthetic_runs(runs, seed, now), now, lambda it, desc="": it)
    return runs


def _plan_choices(conn: Any, text: str, limit: int) -> dict[str, str]:
    """The plan `reading.plan_choice` picks for each condition of `text`, by field."""
    chosen: dict[str, str] = {}

    def choose(pred: query.Pred) -> str:
        choice = reading.plan_choice(conn, pred, limit)
        chosen[f"{pred.field.kind}.{pred.field.key}"] = choice
        return choice

    query.compile_filter(text, time.time(), choose=choose)
    return chosen


def search_phases(
    store: TrackingStore,
    project: str,
    queries: Sequence[tuple[str, str]] = BENCH_QUERIES,
    repeats: int = 20,
    limit: int = 100,
    user: str | None = None,
) -> list[dict[str, Any]]:
    """Per query: median ms of planning, the SELECT and loading the page; median and max total."""
    user = user or store.default_user
    out = []
    for name, text in queries:
        phases: dict[str, list[float]] = {"plan": [], "select": [], "load": [], "total": []}
        with store.engine.connect() as conn:
            pids = access.searched_project_ids(conn, project, user)
            names = reading.project_names(conn, pids)
            for i in range(repeats + 2):  # two warm-ups: statement cache, page cache
                t0 = time.perf_counter()
                stmt = reading.search_statement(conn, pids, text, None, limit)
                t1 = time.perf_counter()
                rows = conn.execute(stmt).all()
                t2 = time.perf_counter()
                runs = reading.run_infos(conn, rows, names)
                t3 = time.perf_counter()
                if i >= 2:
                    for key, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                        phases[key].append(dt * 1000)
            choices = _plan_choices(conn, text, limit)
            plan = reading.explain(conn, reading.search_statement(conn, pids, text, None, limit))
        out.append(
            {
                "name": name,
                "filter": text,
                "results": len(runs),
                **{f"{k}_ms": statistics.median(v) for k, v in phases.items()},
                "max_ms": max(phases["total"]),
                "choices": choices,
                "plan": plan,
            }
        )
    return out


def committed_search_tails(results_dir: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Per committed tracking result (oldest first): date, load, cores, this store's search
    p50/p99 (pooled over the five queries) and its slowest query by p99."""
    from mlinfra_lab.results import results_dir as committed_results_dir

    folder = Path(results_dir) if results_dir else committed_results_dir()
    out = []
    for path in sorted(folder.glob("*tracking*.json")):
        res = json.loads(path.read_text())
        search = res.get("systems", {}).get("mlinfra", {}).get("search")
        if not search:
            continue
        worst = max(search["queries"], key=lambda q: q["p99_ms"])
        out.append(
            {
                "file": path.name,
                "date": res["date"],
                "load": res["machine"]["loadavg_before"][0],
                "cores": res["machine"]["cpu_count"],
                "db_runs": search["db_runs"],
                "repeats": res["config"]["search_repeats"],
                "p50_ms": search["p50_ms"],
                "p99_ms": search["p99_ms"],
                "worst": worst["name"],
                "worst_p50_ms": worst["p50_ms"],
                "worst_p99_ms": worst["p99_ms"],
            }
        )
    return sorted(out, key=lambda r: r["date"])
