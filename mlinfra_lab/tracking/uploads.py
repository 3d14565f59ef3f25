"""Uploads the garbage collector cannot race: a pending record before the blob, a re-check before a delete.

Contract: `log_artifact(engine, blobs, run_id, user, source, ...)` is the one way an
artifact is logged (`Run.log_artifact` calls it): WRITE checked, the blob published
under a committed pending-upload record, then the artifact row inserted and the record
deleted in one transaction that re-checks WRITE. `delete_if_unused(engine, blobs, uri, ...)`
is the one way the collector deletes a blob: inside a write transaction that holds the
blob's lock, only when no artifact row and no fresh pending record names it. The other
artifact rows' SQL is here too: `list_artifacts` (a run's rows, URIs shown or hidden) and
`set_pinned`; the store checks access before calling either.

Design decisions (the race the issue found: the collector read the referenced set, an
upload of the same bytes found the blob present and inserted its row, then the collector
deleted the blob it had judged unreferenced, 4 times in 4):
- Order: hash the bytes into ``tmp/`` -> commit a `pending_uploads` row for the blob's
  URI -> move the blob into place -> insert the artifact row and delete the pending row in
  one transaction. At every moment the blob is named by a pending row or an artifact row.
- The collector decides per blob, in a write transaction, after taking the blob's lock:
  on SQLite every write transaction is ``BEGIN IMMEDIATE`` (one writer at a time), on
  PostgreSQL both sides take ``pg_advisory_xact_lock`` on the URI's hash. So either the
  pending row committed first (the collector sees it and keeps the blob) or the collector
  deleted first (the upload then moves its own bytes into place after its pending commit).
- A pending record older than `STALE_UPLOAD_S` (default an hour) belongs to a writer that
  died; the collector removes it, and ``tmp/`` files that old (the partial uploads of
  killed writers), so neither accumulates.
"""

from __future__ import annotations

import os
import time
from typing import BinaryIO

from sqlalchemy import Connection, Engine, delete, select, text, union_all, update

from mlinfra_lab.tracking import access
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.access import Level
from mlinfra_lab.tracking.artifacts import BlobStore, canonical_blob_uri
from mlinfra_lab.tracking.audit import audited_transact, denials_audited
from mlinfra_lab.tracking.db import database_errors, inserted_id, write_tx
from mlinfra_lab.tracking.records import ArtifactInfo

__all__ = [
    "STALE_UPLOAD_S",
    "delete_if_unused",
    "list_artifacts",
    "log_artifact",
    "pending",
    "set_pinned",
    "sweep_stale",
]

STALE_UPLOAD_S = 3600.0  # an upload not finished after this long is presumed dead
_PG_LOCK_CLASS = 0x6D6C6962  # "mlib": first key of the per-blob advisory lock


def lock_blob(conn: Connection, uri: str) -> None:
    """Serialise uploads and the collector on one blob until `conn`'s transaction ends.

    Keyed on the blob's digest (its file name), not its URI: an upload and the collector
    that spell the root differently still take the same lock.
    """
    if conn.dialect.name == "postgresql":  # SQLite: BEGIN IMMEDIATE already serialises writers
        conn.execute(
            text("SELECT pg_advisory_xact_lock(CAST(:cls AS integer), hashtext(:uri))"),
            {"cls": _PG_LOCK_CLASS, "uri": uri.rpartition("/")[2]},
        )


def pending(engine: Engine, uri: str) -> int:
    """Commit a pending-upload record for `uri` (under the blob's lock); return its id."""
    with database_errors("recording a pending upload", True), write_tx(engine) as conn:
        lock_blob(conn, uri)
        ins = S.pending_uploads.insert().values(uri=uri, started_at=time.time())
        return conn.execute(ins.returning(S.pending_uploads.c.id)).scalar_one()


def _drop_pending(engine: Engine, pid: int) -> None:
    """Best effort after a failed upload (a stale record is swept by the collector anyway)."""
    try:
        with write_tx(engine) as conn:
            conn.execute(delete(S.pending_uploads).where(S.pending_uploads.c.id == pid))
    except Exception:  # noqa: BLE001, S110 (the upload's own error is the one to report)
        pass


def log_artifact(
    engine: Engine,
    blobs: BlobStore,
    run_id: int,
    user: str,
    source: bytes | str | os.PathLike | BinaryIO,
    name: str,
    kind: str,
    step: int | None,
    pinned: bool,
) -> ArtifactInfo:
    """Upload `source` for run `run_id` as `user` and insert its row; WRITE is checked before
    any byte moves and again in the insert's transaction."""
    with denials_audited(engine), database_errors("checking access"), engine.connect() as conn:
        access.require_run(conn, run_id, user, Level.WRITE, "log artifacts")
    ids: list[int] = []
    try:
        put = blobs.put(source, before_publish=lambda uri: ids.append(pending(engine, uri)))

        def write(conn: Connection) -> int:
            access.require_run(conn, run_id, user, Level.WRITE, "log artifacts")
            aid = inserted_id(
                conn.execute(
                    S.artifacts.insert().values(
                        run_id=run_id,
                        name=name,
                        kind=kind,
                        step=step,
                        uri=put.uri,
                        sha256=put.sha256,
                        size=put.size,
                        tier="hot",
                        pinned=pinned,
                        created_at=time.time(),
                    )
                )
            )
            conn.execute(
                S.lineage_edges.insert().values(
                    src=f"run:{run_id}", dst=f"artifact:{aid}", relation="produced"
                )
            )
            conn.execute(delete(S.pending_uploads).where(S.pending_uploads.c.id == ids[0]))
            return aid

        aid = audited_transact(engine, write, f"recording artifact {name!r}")
    except BaseException:
        if ids:
            _drop_pending(engine, ids[0])
        raise
    return ArtifactInfo(aid, run_id, name, kind, step, put.sha256, put.size, "hot", pinned, put.uri)


def list_artifacts(conn: Connection, run_id: int, show_uris: bool) -> list[ArtifactInfo]:
    """The artifacts of run `run_id`, oldest first; their URIs only when `show_uris`."""
    a = S.artifacts
    rows = conn.execute(select(a).where(a.c.run_id == run_id).order_by(a.c.id)).all()
    return [
        ArtifactInfo(
            r.id,
            r.run_id,
            r.name,
            r.kind,
            r.step,
            r.sha256,
            r.size,
            r.tier,
            r.pinned,
            r.uri if show_uris else None,
        )
        for r in rows
    ]


def set_pinned(conn: Connection, artifact_id: int, pinned: bool) -> None:
    """Pin (or unpin) artifact `artifact_id`: retention never touches a pinned artifact."""
    a = S.artifacts
    conn.execute(update(a).where(a.c.id == artifact_id).values(pinned=pinned))


def delete_if_unused(
    engine: Engine, blobs: BlobStore, uri: str, now: float, stale_s: float = STALE_UPLOAD_S
) -> bool:
    """Delete the blob at `uri` unless an artifact row or a fresh pending upload names it; True if deleted.

    `uri` is in `canonical_blob_uri`'s form; the rows that could name it (those with its
    digest) are compared in that form too, whatever spelling of the root they were written with.
    """
    a, p = S.artifacts, S.pending_uploads
    sha = uri.rpartition("/")[2]
    with database_errors("collecting garbage", True), write_tx(engine) as conn:
        lock_blob(conn, uri)
        # One statement, one snapshot: on PostgreSQL (READ COMMITTED) two separate reads could
        # miss an upload whose row insert and pending delete commit between them.
        naming = union_all(
            select(a.c.uri).where(a.c.sha256 == sha),
            select(p.c.uri).where(p.c.uri.like(f"%/{sha}"), p.c.started_at > now - stale_s),
        )
        rows = conn.execute(naming).scalars().all()
        if any(canonical_blob_uri(u) == uri for u in rows):
            return False
        blobs.delete(uri)  # inside the transaction: no upload of this blob can commit meanwhile
    return True


def sweep_stale(
    engine: Engine,
    blobs: list[BlobStore],
    now: float,
    stale_s: float = STALE_UPLOAD_S,
    dry_run: bool = False,
) -> tuple[list[str], int]:
    """Remove pending records and ``tmp/`` files older than `stale_s`: (paths removed, bytes freed)."""
    removed, freed = [], 0
    for store in blobs:
        for path, mtime, size in store.list_tmp():
            if now - mtime >= stale_s:
                removed.append(path)
                freed += size
                if not dry_run:
                    store.remove_tmp(path)
    if not dry_run:
        with database_errors("collecting garbage", True), write_tx(engine) as conn:
            conn.execute(
                delete(S.pending_uploads).where(S.pending_uploads.c.started_at <= now - stale_s)
            )
    return removed, freed
