"""A run being logged: metrics buffered and written in batches, artifacts stored by reference.

Contract: a `Run` (from `TrackingStore.start_run`) buffers `log_metrics` points in memory
and writes them in one transaction per batch (every `batch_size` points, at `flush()` and
at `end()`); `log_artifact` stores the bytes in the blob store first and only then inserts
the row that references them (`uploads.log_artifact`, the one function that logs an
artifact); `end(status)` flushes and closes the run.

Design decisions:
- `log_metric` is `log_metrics` of one, and `log_metrics` only appends to a buffer: a
  training loop that logs ten metrics per step costs a few list appends per step, and the
  database sees one multi-row INSERT per batch (SQLAlchemy's "insertmanyvalues" batching)
  plus one upsert of the latest value per key, instead of a transaction per point. This is
  where the throughput against MLflow's per-call logging comes from.
- Until `flush()` returns, buffered points are not durable: a crash loses at most one
  batch. Call `flush()` where that matters (before a checkpoint, say). Using the run as a
  context manager ends it, FAILED if the block raised.
- A batch is written by `db.transact`: retried when PostgreSQL aborts it (deadlock,
  serialization failure), its latest values upserted in sorted key order, and the buffer
  emptied only after the commit, so a failed commit loses no point (`flush` again).
- The latest-value table is updated with an upsert that only moves forward in steps
  (``ON CONFLICT ... DO UPDATE ... WHERE excluded.step >= step``), so batches from
  out-of-order writers never make `latest_metrics` go back in time.
- Every write (a metric batch, params, tags, an artifact row, `end`) re-checks WRITE inside
  its own transaction, on the project read from the database for this run id
  (`access.require_run`), not on the handle's `project`: a handle built by hand for
  another project's run is refused, and so is an open run after its WRITE was revoked.
  The check costs two indexed reads per batch.
- A run writes through the engine and blob store of the object it is given (`RunBackend`,
  in practice the `TrackingStore` that started it) and never calls back into the store,
  so ``run`` does not import ``store``: the store depends on the run, not both ways.
"""

from __future__ import annotations

import os
import time
from typing import Any, BinaryIO, Protocol

from sqlalchemy import Engine, update

from mlinfra_lab.tracking import access, bounds, uploads, writing
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.access import Level
from mlinfra_lab.tracking.artifacts import BlobStore, check_name
from mlinfra_lab.tracking.audit import audited_transact
from mlinfra_lab.tracking.errors import TrackingError
from mlinfra_lab.tracking.handle import RunHandle
from mlinfra_lab.tracking.records import ArtifactInfo

__all__ = ["RUN_STATUSES", "Run", "RunBackend"]

RUN_STATUSES = ("RUNNING", "FINISHED", "FAILED", "KILLED")


class RunBackend(Protocol):
    """What a run writes through: a `TrackingStore` is one (a run never imports the store)."""

    engine: Engine
    blobs: BlobStore


class Run(RunHandle):
    """Handle of one run; created by `TrackingStore.start_run`, not directly."""

    def __init__(
        self,
        store: RunBackend,
        run_id: int,
        project: str,
        name: str,
        user: str,
        batch_size: int = 1000,
    ) -> None:
        super().__init__(run_id, project, name, user, batch_size)
        self.store = store
        self._buffer: list[dict[str, Any]] = []

    # -- metrics -------------------------------------------------------------------
    def log_metrics(self, values: dict[str, float], step: int | None = None) -> None:
        """Buffer one point per key at `step` (default: one past the previous step)."""
        self._check_open()
        step = self._next_step(bounds.step(self._step if step is None else step))
        now = time.time()
        points = [  # every value checked before any is buffered: a refused call buffers nothing
            {
                "run_id": self.id,
                "key": self._metric_key(key),
                "step": step,
                "value": bounds.metric_value(key, value, step),
                "timestamp": now,
            }
            for key, value in values.items()
        ]
        self._buffer.extend(points)
        if len(self._buffer) >= self.batch_size:
            self.flush()

    def flush(self) -> int:
        """Write the buffered points in one transaction; return how many were written.

        The buffer is emptied only once that transaction has committed: a failed commit
        (or a refusal) leaves every point buffered for the next `flush`.
        """
        if not self._buffer:
            return 0
        rows = list(self._buffer)

        def write(conn) -> None:  # noqa: ANN001 (may run again if PostgreSQL aborts the first try)
            access.require_run(conn, self.id, self.user, Level.WRITE, "log metrics")
            self._write_rows(conn, rows)

        audited_transact(self.store.engine, write, f"logging metrics of run {self.id}")
        return self._written(rows)

    def _written(self, rows: list[dict[str, Any]]) -> int:
        """Drop `rows` (the head of the buffer, now committed) from the buffer."""
        del self._buffer[: len(rows)]
        self.flushes += bool(rows)
        return len(rows)

    @staticmethod
    def _write_rows(conn, rows: list[dict[str, Any]]) -> None:  # noqa: ANN001 (a Connection in a write tx)
        """Insert `rows` into the history and upsert the latest value per key, keys in sorted order."""
        if not rows:
            return
        latest: dict[str, dict[str, Any]] = {}
        for r in rows:
            best = latest.get(r["key"])
            if best is None or r["step"] >= best["step"]:
                latest[r["key"]] = r
        upsert = writing.upsert(
            conn.dialect.name,
            S.latest_metrics,
            ("run_id", "key"),
            ("step", "value"),
            guard_step=True,
        )
        conn.execute(S.metrics.insert(), rows)
        conn.execute(
            upsert,
            [
                {k: latest[key][k] for k in ("run_id", "key", "step", "value")}
                for key in sorted(latest)
            ],
        )

    # -- params and tags -----------------------------------------------------------
    def log_params(self, params: dict[str, Any]) -> None:
        self._check_open()

        def write(conn) -> None:  # noqa: ANN001
            access.require_run(conn, self.id, self.user, Level.WRITE, "log params")
            writing.write_params(conn, self.id, params)

        audited_transact(self.store.engine, write, f"logging params of run {self.id}")

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._check_open()

        def write(conn) -> None:  # noqa: ANN001
            access.require_run(conn, self.id, self.user, Level.WRITE, "set tags")
            writing.write_tags(conn, self.id, tags)

        audited_transact(self.store.engine, write, f"setting tags of run {self.id}")

    # -- artifacts -----------------------------------------------------------------
    def log_artifact(
        self,
        source: bytes | str | os.PathLike | BinaryIO,
        name: str,
        kind: str = "other",
        step: int | None = None,
        pinned: bool = False,
    ) -> ArtifactInfo:
        """Store `source` (bytes, a file path or a binary stream) and record a reference to it.

        Order matters: the blob is written (atomically, de-duplicated) before the row, so
        an upload that fails midway leaves no row pointing at a missing blob.
        """
        self._check_open()
        check_name(name)
        return uploads.log_artifact(
            self.store.engine,
            self.store.blobs,
            self.id,
            self.user,
            source,
            name,
            kind,
            step,
            pinned,
        )

    # -- end -----------------------------------------------------------------------
    def end(self, status: str = "FINISHED") -> None:
        """Flush, then mark the run ended with `status` (FINISHED, FAILED or KILLED)."""
        if status not in RUN_STATUSES[1:]:
            raise TrackingError(f"end status must be one of {RUN_STATUSES[1:]}, got {status!r}")
        self._check_open()
        rows = list(self._buffer)

        def write(conn) -> None:  # noqa: ANN001 (last batch and status: one transaction)
            access.require_run(conn, self.id, self.user, Level.WRITE, "end runs")
            self._write_rows(conn, rows)
            conn.execute(
                update(S.runs)
                .where(S.runs.c.id == self.id)
                .values(status=status, ended_at=time.time())
            )

        audited_transact(self.store.engine, write, f"ending run {self.id}")
        self._written(rows)
        self.ended = True
