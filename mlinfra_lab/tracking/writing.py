"""Writing run metadata rows: datasets, runs, params (with hot-param promotion), tags, upserts.

Contract: `register_dataset(conn, project_id, ...)` inserts a dataset version (or finds the
identical one); `insert_run(conn, project_id, ...)` inserts a run with its params, tags and
input lineage edges; `write_params(conn, run_id, params)` and `write_tags(conn, run_id,
tags)` upsert key/value rows of one run; all inside the caller's write transaction.
`upsert(dialect, table, keys, values)` is the cached ``INSERT ... ON CONFLICT DO UPDATE``
statement they (and the metric batches of `run.Run`) execute with many rows at once.

Design decisions:
- A param is stored as its string and, when it is a number, as a float too (`number`), so
  a filter like ``params.lr <= 1e-3`` compares numbers, not strings; booleans are not numbers.
- Params named in `schema.HOT_PARAMS` are also copied into indexed columns of ``runs``
  (migration 0002), which makes the commonest filters a single-table index range.
- Upsert statements are built once per (dialect, table) and reused: building and compiling
  a statement costs more than executing a small batch with it.
- Rows that concurrent first users may both create (projects, principals) are inserted
  with `insert_ignoring_conflicts` and read back, so the race has one winner, no error.
- Upserts send their rows sorted by key: two transactions upserting the same keys then lock
  the rows in the same order and wait for each other instead of deadlocking (PostgreSQL
  locks each row as it goes; in different orders, 8 writers on 20 keys deadlocked).
- Datasets are immutable: registering a name and version again with another URI or hash
  is refused (`TrackingError`), with the same ones it returns the existing row.
- No access checks here: the caller checks WRITE inside the same transaction (and that the
  run's inputs are visible to it).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from typing import Any, TypedDict

from sqlalchemy import Connection, Insert, Table, select, update
from sqlalchemy.dialects import postgresql, sqlite

from mlinfra_lab.tracking import bounds
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.db import inserted_id
from mlinfra_lab.tracking.errors import TrackingError

__all__ = [
    "insert_ignoring_conflicts",
    "insert_run",
    "number",
    "register_dataset",
    "upsert",
    "write_params",
    "write_tags",
]


def number(v: Any) -> float | None:
    """The numeric value of a param (None for booleans and non-numbers)."""
    if isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):  # 10**400 is a number no float holds
        return None
    return f if math.isfinite(f) else None


@functools.cache
def upsert(
    dialect: str,
    table: Table,
    keys: tuple[str, ...],
    values: tuple[str, ...],
    guard_step: bool = False,
) -> Insert:
    """INSERT ... ON CONFLICT (`keys`) DO UPDATE SET `values` for "sqlite" or "postgresql".

    With `guard_step`, an existing row is only replaced by one with a step at least as
    large, so the latest value of a metric never moves back in steps.
    """
    ins = (postgresql if dialect == "postgresql" else sqlite).insert(table)
    where = ins.excluded.step >= table.c.step if guard_step else None
    return ins.on_conflict_do_update(
        index_elements=list(keys), set_={v: ins.excluded[v] for v in values}, where=where
    )


def insert_ignoring_conflicts(dialect: str, table: Table) -> Insert:
    """INSERT ... ON CONFLICT DO NOTHING for "sqlite" or "postgresql".

    For rows that several processes may create at once (a project or a principal seen for
    the first time): on PostgreSQL the loser waits for the winner's commit and then inserts
    nothing instead of failing on the unique index; read the row back afterwards.
    """
    return (
        (postgresql if dialect == "postgresql" else sqlite).insert(table).on_conflict_do_nothing()
    )


def write_params(
    conn: Connection, run_id: int, params: dict[str, Any], hot_done: bool = False
) -> None:
    """Upsert `params` of run `run_id`; also set the hot-param columns unless `hot_done`."""
    if not params:
        return
    rows, hot = [], {}
    key_chars = bounds.column_chars("params", "key")
    # one lock order for every writer
    for k, v in sorted(params.items(), key=lambda kv: str(kv[0])):
        num = number(v)
        key = bounds.text("a param name", str(k), key_chars)
        value = bounds.text(f"param {key!r}", str(v), allow_empty=True)
        rows.append({"run_id": run_id, "key": key, "value_str": value, "value_num": num})
        if k in S.HOT_PARAMS:
            hot[S.HOT_PARAMS[k]] = num
    conn.execute(
        upsert(conn.dialect.name, S.params, ("run_id", "key"), ("value_str", "value_num")), rows
    )
    if hot and not hot_done:
        conn.execute(update(S.runs).where(S.runs.c.id == run_id).values(**hot))


class _TagRow(TypedDict):
    """One row of the `tags` table as `write_tags` inserts it."""

    run_id: int
    key: str
    value: str


def write_tags(conn: Connection, run_id: int, tags: dict[str, Any]) -> None:
    """Upsert `tags` of run `run_id` (values stored as strings)."""
    if tags:
        key_chars = bounds.column_chars("tags", "key")
        rows: list[_TagRow] = [
            {
                "run_id": run_id,
                "key": bounds.text("a tag name", str(k), key_chars),
                "value": bounds.text(f"tag {k!r}", str(v), allow_empty=True),
            }
            for k, v in tags.items()
        ]
        rows.sort(key=lambda r: r["key"])  # one lock order for every writer
        conn.execute(upsert(conn.dialect.name, S.tags, ("run_id", "key"), ("value",)), rows)


def register_dataset(
    conn: Connection, project_id: int, name: str, version: str, uri: str, sha256: str | None
) -> int:
    """Id of dataset `name`@`version` of the project, inserted unless it exists with the same
    URI (and hash, when given); another URI or hash raises `TrackingError`."""
    d = S.datasets
    bounds.text("a dataset name", name, bounds.column_chars("datasets", "name"))
    bounds.text("a dataset version", version, bounds.column_chars("datasets", "version"))
    bounds.text("a dataset URI", uri)
    if sha256 is not None:
        bounds.text("a dataset sha256", sha256, bounds.column_chars("datasets", "sha256"))
    row = conn.execute(
        select(d).where(d.c.project_id == project_id, d.c.name == name, d.c.version == version)
    ).first()
    if row is None:
        return inserted_id(
            conn.execute(
                d.insert().values(
                    project_id=project_id,
                    name=name,
                    version=version,
                    uri=uri,
                    sha256=sha256,
                    created_at=time.time(),
                )
            )
        )
    if row.uri != uri or (sha256 and row.sha256 != sha256):
        raise TrackingError(
            f"dataset {name}@{version} already exists with another URI or hash; "
            "datasets are immutable: register a new version"
        )
    return row.id


def insert_run(
    conn: Connection,
    project_id: int,
    name: str,
    user: str,
    code_commit: str | None,
    created_at: float,
    params: dict[str, Any],
    tags: dict[str, Any],
    inputs: Sequence[str],
) -> int:
    """Insert a RUNNING run with its params (hot ones in their columns), tags, and lineage
    edges from its `inputs` (node ids) and its code commit; return its id."""
    bounds.text("a run name", name, bounds.column_chars("runs", "name"))
    if code_commit is not None:
        bounds.text("a code commit", code_commit, bounds.column_chars("runs", "code_commit"))
    bounds.finite("a run's start time", created_at)
    hot = {col: number(params[k]) for k, col in S.HOT_PARAMS.items() if k in params}
    run_id = inserted_id(
        conn.execute(
            S.runs.insert().values(
                project_id=project_id,
                name=name,
                status="RUNNING",
                user=user,
                code_commit=code_commit,
                created_at=created_at,
                **hot,
            )
        )
    )
    write_params(conn, run_id, params, hot_done=True)
    write_tags(conn, run_id, tags)
    run = f"run:{run_id}"
    edges = [{"src": n, "dst": run, "relation": "consumed"} for n in inputs]
    if code_commit:
        edges.append({"src": f"code:{code_commit}", "dst": run, "relation": "ran_code"})
    if edges:
        conn.execute(S.lineage_edges.insert(), edges)
    return run_id
