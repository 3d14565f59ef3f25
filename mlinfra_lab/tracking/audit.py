"""The audit log: who tried what, in which scope, and whether it was allowed; writing it never fails.

Contract: `record(conn, principal, action, project, target, allowed)` appends one row inside
the caller's transaction, every field cut to its column's width; `denials_audited(engine)`
wraps a block so that a `PermissionDenied` escaping it is recorded (once) with its real
scope before it propagates; `audited_write(engine, what)` is a write transaction wrapped
that way (driver errors become `DatabaseError`), `audited_read(engine, what)` a connection
for reading, `audited_transact(engine, fn, what)` a retried transaction (`db.transact`);
`log(engine, ...)` records one row in a transaction of its own; `latest(conn, project,
limit)` reads the newest rows of a project (or, with None, the store-wide ones).

Design decisions:
- A denial inside a write transaction is recorded *after* the rollback, in a transaction
  of its own: the rolled-back transaction cannot keep the row.
- The real scope of a denial is recorded even when the caller is told less: a
  `NotFoundOrDenied` names only the id the caller gave (``run:12``), the audit row also
  names the project that run belongs to, so that project's ADMINs see the probe in
  `TrackingStore.audit_log`. Store-wide denials (gc, counts, teams) have no project and
  are listed by ``audit_log(None)``.
- Fields are truncated to the column widths (a 300-character user name is legal input to
  a denial and PostgreSQL refuses over-long strings), so auditing a denial cannot itself
  fail and hide the denial behind a database error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from sqlalchemy import Connection, Engine, String, select

from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.db import database_errors, transact, write_tx
from mlinfra_lab.tracking.errors import NotFoundOrDenied, PermissionDenied

__all__ = [
    "audited_read",
    "audited_transact",
    "audited_write",
    "denials_audited",
    "latest",
    "log",
    "record",
    "record_denial",
]

T = TypeVar("T")


def _cut(value: object, column: str) -> str | None:
    if value is None:
        return None
    column_type = S.audit_log.c[column].type
    assert isinstance(column_type, String), f"audit_log.{column} is not a String column"
    return str(value)[: column_type.length]


def record(
    conn: Connection,
    principal: str,
    action: str,
    project: str | None,
    target: object,
    allowed: bool,
) -> None:
    """Append one audit row in `conn`'s transaction (fields truncated to fit their columns)."""
    conn.execute(
        S.audit_log.insert().values(
            at=time.time(),
            principal=_cut(principal, "principal") or "?",
            action=_cut(action, "action") or "?",
            project=_cut(project, "project"),
            target=_cut(target, "target"),
            allowed=allowed,
        )
    )


def log(
    engine: Engine, principal: str, action: str, project: str | None, target: object, allowed: bool
) -> None:
    """`record` in a write transaction of its own (for a decision made outside one)."""
    with write_tx(engine) as conn:
        record(conn, principal, action, project, target, allowed)


def latest(conn: Connection, project: str | None, limit: int) -> list[dict]:
    """The newest `limit` rows of `project`, or with None of the store-wide decisions."""
    t = S.audit_log
    where = t.c.project.is_(None) if project is None else t.c.project == project
    rows = conn.execute(select(t).where(where).order_by(t.c.id.desc()).limit(limit))
    return [dict(r._mapping) for r in rows]


def record_denial(engine: Engine, err: PermissionDenied) -> None:
    """Record `err` in a transaction of its own, with its real scope; at most once per error."""
    if err._audited:
        return
    target: str | None
    if isinstance(err, NotFoundOrDenied):
        project, target = err._audit_project, err.scope
    else:
        project = err.project if err.scope == f"project:{err.project}" else None
        target = None if project is not None else err.scope
    with database_errors("auditing a denial", True), write_tx(engine) as conn:
        record(conn, err.principal, err.action, project, target, False)
    err._audited = True


@contextlib.contextmanager
def denials_audited(engine: Engine) -> Iterator[None]:
    """Record a `PermissionDenied` raised in the block, then let it propagate."""
    try:
        yield
    except PermissionDenied as err:
        record_denial(engine, err)
        raise


@contextlib.contextmanager
def audited_write(engine: Engine, what: str = "writing") -> Iterator[Connection]:
    """A write transaction whose denials are recorded after its rollback."""
    with denials_audited(engine), database_errors(what, True), write_tx(engine) as conn:
        yield conn


@contextlib.contextmanager
def audited_read(engine: Engine, what: str = "reading") -> Iterator[Connection]:
    """A connection for reading whose denials are recorded; driver errors become `DatabaseError`."""
    with denials_audited(engine), database_errors(what), engine.connect() as conn:
        yield conn


def audited_transact(engine: Engine, fn: Callable[[Connection], T], what: str) -> T:
    """`db.transact` (retried on deadlocks) whose denials are recorded after the rollback."""
    with denials_audited(engine):
        return transact(engine, fn, what)
