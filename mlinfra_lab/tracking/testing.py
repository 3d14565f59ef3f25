"""Throw-away stores for tests and notebooks: SQLite in a temporary directory, or PostgreSQL.

Contract: `fresh_store(backend, directory)` is a context manager yielding an empty, migrated
`TrackingStore` on "sqlite" (a file under `directory`) or "postgres" (a new schema in the
database at ``$MLINFRA_PG_URL``, dropped on exit), so the same test runs on both backends
and every test starts from nothing; `fresh_db_url` yields just the URL of such an empty,
not yet migrated database (for tests of what happens when a store first opens it);
`run_together` runs one function in several processes that start at the same moment;
`row_count` counts a table's rows straight from the database, as the trusted test harness
(`TrackingStore.count` needs store ADMIN, which no single user of a shared store holds).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mlinfra_lab.tracking.store import TrackingStore

__all__ = [
    "PG_ENV",
    "available_backends",
    "fresh_db_url",
    "fresh_store",
    "row_count",
    "run_together",
]

PG_ENV = "MLINFRA_PG_URL"


def available_backends() -> list[str]:
    """ "sqlite" always; "postgres" too when ``$MLINFRA_PG_URL`` names a server."""
    return ["sqlite"] + (["postgres"] if os.environ.get(PG_ENV) else [])


@contextlib.contextmanager
def fresh_db_url(backend: str, directory: str | os.PathLike) -> Iterator[str]:
    """The URL of an empty database (no tables, not migrated) on `backend`, dropped on exit.

    SQLite: a file under `directory` that does not exist yet. PostgreSQL: a new, empty
    schema in the database at ``$MLINFRA_PG_URL``, selected through the URL's search_path.
    """
    if backend == "sqlite":
        yield f"sqlite:///{Path(directory) / 'tracking.db'}"
        return
    if backend != "postgres":
        raise ValueError(f"backend must be 'sqlite' or 'postgres', got {backend!r}")
    from sqlalchemy import create_engine, text

    base = os.environ.get(PG_ENV)
    if not base:
        raise RuntimeError(
            f'set {PG_ENV} (eval "$(bash .ci/start-postgres.sh)") to test on PostgreSQL'
        )
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        sep = "&" if "?" in base else "?"
        yield f"{base}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@contextlib.contextmanager
def fresh_store(
    backend: str, directory: str | os.PathLike, artifact_root: str | None = None, **kwargs: Any
) -> Iterator[TrackingStore]:
    """An empty, migrated store on `backend` with artifacts under `directory` (or at `artifact_root`)."""
    kwargs.setdefault("default_user", "owner")
    with fresh_db_url(backend, directory) as url:
        store = TrackingStore(url, artifact_root or str(Path(directory) / "artifacts"), **kwargs)
        try:
            yield store
        finally:
            store.close()


def run_together(
    target: Callable[..., object], processes: int, *args: object, timeout_s: float = 120.0
) -> list[int | None]:
    """Run ``target(*args, worker, barrier)`` in `processes` fresh processes; their exit codes.

    Every process gets its index and one shared barrier, on which `target` waits so that
    all of them reach the contended step at the same moment. `target` must be importable
    (a module-level function). The processes come from a fork server that imported the
    store and `target`'s module once: each is a fresh, single-threaded process with no
    database connection of the parent's, started in milliseconds instead of the second or
    two a spawned interpreter spends importing SQLAlchemy (8 of them: ~10 s on 2 cores).
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["mlinfra_lab.tracking.store", target.__module__])
    barrier = ctx.Barrier(processes)
    procs = [ctx.Process(target=target, args=(*args, w, barrier)) for w in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout_s)
    return [p.exitcode for p in procs]


def row_count(store: TrackingStore, table: str) -> int:
    """Rows of schema table `table`, counted with no access check (for tests only)."""
    from sqlalchemy import func, select

    from mlinfra_lab.tracking.schema import metadata

    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(metadata.tables[table])).scalar_one()
