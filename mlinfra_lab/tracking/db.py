"""Engines and migrations: open a SQLite or PostgreSQL database ready for concurrent writers.

Contract: `make_engine(url)` returns a SQLAlchemy engine tuned for the backend and
`migrate(engine)` brings its schema to the newest Alembic revision; `write_tx(engine)` is
the one way the store opens a transaction that writes, and `transact(engine, fn, what)`
runs ``fn(conn)`` in one, retried when PostgreSQL aborts it for a deadlock or a
serialization failure; `database_errors(what)` turns any driver error into `DatabaseError`;
`inserted_id(result)` is the primary key a single-row INSERT wrote.

Design decisions:
- SQLite runs in WAL mode (readers never block the writer), with a busy timeout (a second
  writer waits instead of failing), ``synchronous=NORMAL`` (durable at checkpoints, the
  usual WAL trade-off) and foreign keys on.
- Write transactions on SQLite start with ``BEGIN IMMEDIATE``: they take the write lock
  up front, so two processes never both read and then both try to upgrade to a write lock,
  which SQLite answers with an immediate "database is locked" that no timeout helps.
  Python's sqlite3 module would issue its own deferred ``BEGIN``; it is switched off
  (``isolation_level=None``) and SQLAlchemy's ``begin`` event emits ours (the recipe from
  SQLAlchemy's SQLite dialect documentation).
- The first opening of a new database migrates it, and several processes may open it at
  once: the upgrade runs inside one write transaction, which on SQLite is BEGIN IMMEDIATE
  (one migrator at a time; the next one then finds the schema at head and does nothing)
  and on PostgreSQL starts with ``pg_advisory_xact_lock`` keyed on the schema (DDL there
  is transactional, but two sessions creating the same table collide on the catalog's
  unique index instead of waiting). Under READ COMMITTED the waiter's next statement sees
  the committed schema, so Alembic finds the version table at head. Switching a new SQLite
  file to WAL is retried while another opener holds it (SQLite reports that at once).
- PostgreSQL needs nothing else special: row locks and MVCC handle concurrent writers. A schema
  can be chosen in the URL (``?options=-csearch_path%3Dmyschema``), which the tests use to
  give each test module a fresh schema.
- Migrations run through Alembic's API with the migration scripts shipped inside the
  package (``mlinfra_lab/tracking/migrations``), so ``pip install`` is all a user needs.

- PostgreSQL aborts one of two transactions that wait on each other (SQLSTATE 40P01,
  deadlock) or that cannot be serialized (40001); the aborted one did nothing, so
  `transact` runs it again, up to `RETRIES` times, after an exponential backoff with jitter
  (from a per-process generator seeded with the pid, so concurrent writers spread out and a
  test repeats). The store also takes row locks in one order (upserts sorted by key),
  which removes most deadlocks in the first place. SQLite's busy timeout already waits.
- A driver error never reaches a caller raw: its message carries the SQL and its
  parameters (another user's values, a whole hostile filter). `DatabaseError` names the
  operation, the driver's exception class and the SQLSTATE, and is raised ``from None``.
  An error that a value sent caused (text that is not Unicode, a number out of range:
  `bounds.data_error`) is `InvalidInput` instead, a client error that a retry cannot fix.

Caveat: SQLite allows one writer at a time; WAL makes that writer cheap, not parallel.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, CursorResult, Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError

from mlinfra_lab.tracking.bounds import data_error
from mlinfra_lab.tracking.errors import DatabaseError

__all__ = [
    "make_engine",
    "migrate",
    "write_tx",
    "transact",
    "database_errors",
    "inserted_id",
    "current_revision",
    "head_revision",
    "MIGRATIONS_DIR",
    "RETRIES",
]

T = TypeVar("T")
RETRIES = 10  # attempts of a transaction PostgreSQL aborted (deadlock, serialization failure)
_TRANSIENT = {"40001", "40P01"}  # serialization_failure, deadlock_detected
_rngs: dict[int, random.Random] = {}  # pid -> jitter generator (a forked child gets its own)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_WRITE = "mlinfra_write"
_PG_LOCK_CLASS = 0x6D6C6966  # "mlif": first key of the advisory lock that serialises migrations


def _enable_wal(cur, busy_timeout_s: float) -> None:  # noqa: ANN001 (DB-API cursor)
    """Switch the file to WAL (a persistent setting), retrying while another opener holds it.

    Changing the journal mode needs an exclusive lock, and SQLite answers "database is
    locked" at once (without its busy handler) when another connection is in the middle of
    opening or converting the same file; so retry with backoff up to the busy timeout.
    """
    deadline, wait = time.monotonic() + busy_timeout_s, 0.005
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) and "busy" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(wait)
            wait = min(wait * 2, 0.2)


def make_engine(url: str, busy_timeout_s: float = 30.0, echo: bool = False) -> Engine:
    """An engine for `url`; on SQLite with WAL, a busy timeout and IMMEDIATE write transactions."""
    if not url.startswith("sqlite"):
        return create_engine(url, echo=echo, pool_pre_ping=True)
    engine = create_engine(
        url, echo=echo, connect_args={"timeout": busy_timeout_s, "isolation_level": None}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # noqa: ANN001 (DB-API connection)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        if ":memory:" not in url and url not in ("sqlite://", "sqlite:///"):
            _enable_wal(cur, busy_timeout_s)
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA case_sensitive_like=ON")  # LIKE as on PostgreSQL (see query)
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


@contextlib.contextmanager
def write_tx(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: commits on exit, rolls back on an exception."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE: True})
        with conn.begin():
            yield conn


def sqlstate(err: DBAPIError) -> str | None:
    """The SQLSTATE of a driver error (None where the driver has none, as sqlite3)."""
    return getattr(err.orig, "sqlstate", None) or getattr(err.orig, "pgcode", None)


@contextlib.contextmanager
def database_errors(what: str, wrote: bool = False) -> Iterator[None]:
    """Re-raise a driver error from the block as `DatabaseError` (no SQL, no parameters), or
    as `InvalidInput` when a value sent caused it (`bounds.data_error`)."""
    try:
        yield
    except (UnicodeEncodeError, OverflowError) as err:
        raise data_error(err) from None
    except DBAPIError as err:
        raise data_error(err.orig, sqlstate(err)) or DatabaseError(
            what, type(err.orig).__name__, sqlstate(err), wrote
        ) from None


def inserted_id(result: CursorResult[Any]) -> int:
    """The primary key of the row that the single-row INSERT `result` wrote."""
    key = result.inserted_primary_key
    assert key is not None, "not a single-row INSERT: only one has an inserted primary key"
    return key[0]


def transact(engine: Engine, fn: Callable[[Connection], T], what: str) -> T:
    """``fn(conn)`` in a write transaction, committed; re-run when PostgreSQL aborts it as a deadlock
    victim or for a serialization failure (up to `RETRIES` attempts, backoff with jitter).

    `fn` may run more than once: it must not change anything outside the database (the
    metric buffer, say) until `transact` has returned. Other driver errors, and the last
    transient one, become `DatabaseError`.
    """
    rng = _rngs.setdefault(os.getpid(), random.Random(os.getpid()))
    for attempt in range(RETRIES):
        try:
            with write_tx(engine) as conn:
                return fn(conn)
        except (UnicodeEncodeError, OverflowError) as err:
            raise data_error(err) from None
        except DBAPIError as err:
            if sqlstate(err) not in _TRANSIENT or attempt == RETRIES - 1:
                raise data_error(err.orig, sqlstate(err)) or DatabaseError(
                    what, type(err.orig).__name__, sqlstate(err), True
                ) from None
        time.sleep(min(0.5, 0.005 * 2**attempt) * (0.5 + rng.random()))
    raise AssertionError("unreachable")


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database schema to `revision` (default: the newest) with Alembic."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with write_tx(engine) as conn:  # on SQLite: BEGIN IMMEDIATE, one migrator at a time
        if conn.dialect.name == "postgresql":  # one migrator per schema; released at commit
            conn.execute(
                text(
                    "SELECT pg_advisory_xact_lock(CAST(:cls AS integer), hashtext(coalesce(current_schema(), '')))"
                ),
                {"cls": _PG_LOCK_CLASS},
            )
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def head_revision() -> str:
    """The newest revision among the migration scripts shipped with the package."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(cfg).get_current_head()
    assert head is not None, f"no migration scripts under {MIGRATIONS_DIR}: reinstall the package"
    return head


def current_revision(engine: Engine) -> str | None:
    """The Alembic revision the database is at (None for an empty database)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
