"""Reading run metadata: the SQL behind `get_run`, `metric_history`, `search_runs`,
`explain_search` and `count`.

Contract: `search_statement(conn, pids, filter, order_by, limit)` builds the one
SELECT that answers a search over the given project ids; `run_infos(conn, rows, names)`
turns run rows into `RunInfo` records with their params, latest metrics and tags (three
queries per page, not three per run); `search(conn, pids, ...)` plans and runs a search
under its time bound and returns those records, `run_info(conn, run_id, ...)` one run's;
`explain(conn, stmt)` returns the database's plan; `metric_history`, `project_names` and
`count_rows` are the store's other reads.

Design decisions:
- No access checks here: the store's facade resolves the caller's grants into the list of
  project ids first, and these functions only ever see runs of those projects. Keeping
  the check in one place (`TrackingStore`) makes it easy to see that no read path skips it.
- Each conjunct of a filter is compiled either as an IN over its materialized matches or
  as an EXISTS probe per run, whichever `plan_choice` estimates cheaper (see there).
- The child queries are built once (`functools.cache`) with an expanding bind parameter,
  so a page of runs costs three cached statements.
- Only indexed metadata tables are read; the artifact store is never touched.
- A search runs under a time bound (`time_bound`): PostgreSQL's ``statement_timeout``,
  local to the search's transaction (the server stops the query itself, even when the
  client has died), and on SQLite a progress handler that interrupts the query. Running
  out of time, or a value the database refuses (SQLSTATE class 22), is a `QueryError`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import BindParameter, Connection, Select, Table, and_, bindparam, func, select, text
from sqlalchemy.exc import DBAPIError

from mlinfra_lab.tracking import bounds, query
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.db import sqlstate
from mlinfra_lab.tracking.errors import QueryError, TrackingError
from mlinfra_lab.tracking.records import RunInfo

__all__ = [
    "MAX_LIMIT",
    "PROBE_COST",
    "count_rows",
    "explain",
    "explain_search",
    "metric_history",
    "plan_choice",
    "project_names",
    "run_info",
    "run_infos",
    "schema_table",
    "search",
    "search_statement",
    "time_bound",
]

PROBE_COST = 20  # cost of probing one run by primary key / materializing one matching id (measured)
MAX_LIMIT = 10_000


@functools.cache
def _child_statements() -> dict[str, Any]:
    """Queries loading params, latest metrics and tags of a page of runs (built once)."""
    ids: BindParameter[int] = bindparam("ids", expanding=True)
    p, m, t = S.params, S.latest_metrics, S.tags
    return {
        "params": select(p.c.run_id, p.c.key, p.c.value_str).where(p.c.run_id.in_(ids)),
        "metrics": select(m.c.run_id, m.c.key, m.c.value).where(m.c.run_id.in_(ids)),
        "tags": select(t.c.run_id, t.c.key, t.c.value).where(t.c.run_id.in_(ids)),
    }


@contextlib.contextmanager
def time_bound(conn: Connection, seconds: float, filter: str | None) -> Iterator[None]:
    """Stop the block's queries after `seconds`; raise `QueryError` for a timeout or a refused value."""
    raw: sqlite3.Connection | None = None
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT set_config('statement_timeout', :ms, true)"),
            {"ms": str(max(1, int(seconds * 1000)))},
        )
    else:
        deadline = time.monotonic() + seconds
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection), (
            f"time_bound supports PostgreSQL and SQLite, not {conn.dialect.name}"
        )
        # checked every 1000 VM instructions: ~1% of the VM's time
        raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    try:
        yield
    except DBAPIError as err:
        state, shown = sqlstate(err), (filter or "")[:200]
        if state == "57014" or "interrupted" in str(err.orig):
            raise QueryError(
                f"search took longer than {seconds:g} s and was stopped; narrow the filter",
                shown,
                0,
            ) from None
        if state and state.startswith("22"):
            raise QueryError(
                f"a value in the filter does not fit its field (SQLSTATE {state})", shown, 0
            ) from None
        raise
    finally:
        if raw is not None:
            raw.set_progress_handler(None, 0)


def run_infos(conn: Connection, rows: Sequence, names: dict[int, str]) -> list[RunInfo]:
    """`RunInfo` records for run rows, with params, latest metrics and tags loaded per page."""
    ids = [r.id for r in rows]
    params: dict[int, dict] = {i: {} for i in ids}
    mets: dict[int, dict] = {i: {} for i in ids}
    tags: dict[int, dict] = {i: {} for i in ids}
    if ids:
        load = _child_statements()
        for r in conn.execute(load["params"], {"ids": ids}):
            params[r[0]][r[1]] = r[2]
        for r in conn.execute(load["metrics"], {"ids": ids}):
            mets[r[0]][r[1]] = r[2]
        for r in conn.execute(load["tags"], {"ids": ids}):
            tags[r[0]][r[1]] = r[2]
    return [
        RunInfo(
            r.id,
            names[r.project_id],
            r.name,
            r.status,
            r.user,
            r.code_commit,
            r.created_at,
            r.ended_at,
            params[r.id],
            mets[r.id],
            tags[r.id],
        )
        for r in rows
    ]


def plan_choice(conn: Connection, pred: query.Pred, limit: int) -> str:
    """ "in" (materialize matches) or "exists" (probe runs in creation order) for one conjunct.

    Materializing costs about one unit per matching row; probing about `PROBE_COST`
    units per run scanned, and the scan needs about ``limit * runs / matches`` runs.
    Probing wins when ``matches > sqrt(PROBE_COST * limit * runs)``; the count stops
    at that threshold, so the estimate never costs more than the cheaper plan.
    """
    runs = conn.execute(select(func.max(S.runs.c.id))).scalar() or 1  # upper bound, O(1)
    threshold = int(math.sqrt(PROBE_COST * limit * runs)) + 1
    capped = pred.matches().limit(threshold).subquery()
    n = conn.execute(select(func.count()).select_from(capped)).scalar_one()
    return "in" if n < threshold else "exists"


def search_statement(
    conn: Connection, pids: Sequence[int], filter: str | None, order_by: str | None, limit: int
) -> Select:
    """The SELECT of the runs of projects `pids` matching `filter`, ordered, at most `limit`.

    Raises `QueryError` for a bad filter or order and `TrackingError` for a
    limit outside 1..`MAX_LIMIT`. Ties (and no `order_by`) go newest first.
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise TrackingError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    r = S.runs
    stmt = select(r).where(
        r.c.project_id == pids[0] if len(pids) == 1 else r.c.project_id.in_(pids)
    )
    cond = query.compile_filter(
        filter, time.time(), choose=lambda pred: plan_choice(conn, pred, limit)
    )
    if cond is not None:
        stmt = stmt.where(cond)
    for i, key in enumerate(query.compile_order_by(order_by)):
        f = key.field
        if f.kind == "attr":
            col = r.c[f.key]
        else:
            t = (S.latest_metrics if f.kind == "metrics" else S.params).alias(f"o{i}")
            stmt = stmt.outerjoin(t, and_(t.c.run_id == r.c.id, t.c.key == f.key))
            col = t.c.value if f.kind == "metrics" else t.c.value_num
        stmt = stmt.order_by((col.desc() if key.descending else col.asc()).nulls_last())
    return stmt.order_by(r.c.created_at.desc(), r.c.id.desc()).limit(limit)


def explain(conn: Connection, stmt: Select) -> list[str]:
    """The database's plan for `stmt` (SQLite: EXPLAIN QUERY PLAN; PostgreSQL: EXPLAIN), one line per step."""
    # render_postcompile: an `in (...)` list is an "expanding" parameter, expanded only at
    # execution; rendered here, so the text and `positiontup` hold one parameter per value
    compiled = stmt.compile(conn.engine, compile_kwargs={"render_postcompile": True})
    params = compiled.params
    if conn.dialect.name == "sqlite":
        assert compiled.positiontup is not None, "SQLite's paramstyle is positional (qmark)"
        rows = conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + str(compiled), tuple(params[k] for k in compiled.positiontup)
        )
        return [str(row[-1]) for row in rows]
    return [str(row[0]) for row in conn.exec_driver_sql("EXPLAIN " + str(compiled), params)]


def search(
    conn: Connection,
    pids: Sequence[int],
    filter: str | None,
    order_by: str | None,
    limit: int,
    seconds: float,
) -> list[RunInfo]:
    """The runs of projects `pids` matching `filter`, as records: the statement is planned,
    then run, each under a `time_bound` of `seconds` (the planner's counts are queries too)."""
    with time_bound(conn, seconds, filter):
        stmt = search_statement(conn, pids, filter, order_by, limit)
    with time_bound(conn, seconds, filter):
        rows = conn.execute(stmt).all()
    return run_infos(conn, rows, project_names(conn, pids))


def explain_search(
    conn: Connection, pids: Sequence[int], filter: str | None, order_by: str | None, seconds: float
) -> list[str]:
    """The database's plan for the search `search` would run (limit 100), one line a step."""
    with time_bound(conn, seconds, filter):
        stmt = search_statement(conn, pids, filter, order_by, 100)
    return explain(conn, stmt)


def run_info(conn: Connection, run_id: int, project_id: int, project: str) -> RunInfo:
    """The `RunInfo` of run `run_id` of project `project` (whose id is `project_id`)."""
    rows = conn.execute(select(S.runs).where(S.runs.c.id == run_id)).all()
    return run_infos(conn, rows, {project_id: project})[0]


def metric_history(conn: Connection, run_id: int, key: str) -> list[tuple[int, float]]:
    """Every (step, value) point of metric `key` of run `run_id`, by step."""
    m = S.metrics
    bounds.text("a metric name", key, bounds.column_chars("metrics", "key"))
    q = select(m.c.step, m.c.value).where(m.c.run_id == run_id, m.c.key == key).order_by(m.c.step)
    return [(r[0], r[1]) for r in conn.execute(q)]


def project_names(conn: Connection, pids: Sequence[int]) -> dict[int, str]:
    """The names of projects `pids`, by id."""
    p = S.projects
    return dict(conn.execute(select(p.c.id, p.c.name).where(p.c.id.in_(pids))).all())


def schema_table(name: str) -> Table:
    """The schema's table `name`; `TrackingError` naming the tables when there is none."""
    if name not in S.metadata.tables:
        raise TrackingError(f"no table {name!r}; use one of {', '.join(sorted(S.metadata.tables))}")
    return S.metadata.tables[name]


def count_rows(conn: Connection, table: Table) -> int:
    """Row count of `table`, over every project."""
    return conn.execute(select(func.count()).select_from(table)).scalar_one()
