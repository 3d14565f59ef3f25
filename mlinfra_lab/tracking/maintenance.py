"""Carrying out a retention plan and collecting garbage: the two operations that delete things.

Contract: `execute_plan(store, plan, user)` does exactly what a `RetentionPlan` lists (moves
to the cold root, then row deletes) and returns the plan marked applied, with a note for
anything that changed since planning; `collect_garbage(store, ...)` deletes only blobs that
no artifact row references and that are older than a grace period.

Design decisions:
- Moves copy first and verify: the blob is re-hashed on its way to the cold root and the row
  is switched to the new URI only if the digest matches (`IntegrityError` otherwise); the
  update is conditional on the row still pointing at the old URI and not being pinned.
- Deletes replace rows by lineage tombstones (`lineage.bury`; the edges stay, so a run that
  consumed a deleted checkpoint still shows it), never bytes: de-duplication means a blob
  may back several rows, so bytes are freed only by the garbage collector, which works from
  the set of URIs that rows reference at the time it runs.
- The collector cannot race an upload (`uploads`): every blob is re-checked and deleted
  inside a write transaction holding its lock, against artifact rows and pending-upload
  records. It also sweeps what dead writers leave: pending records and partial ``tmp/``
  files older than `stale_upload_seconds`. Blobs younger than `grace_seconds` are kept too
  (a margin for blobs written by hand, and for backups in progress).
- Retention needs ADMIN on the projects it touches (the plan is already limited to them);
  garbage collection needs store ADMIN (`access`), since blobs are shared across projects.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlalchemy import delete, select, update

from mlinfra_lab.tracking import access, audit, lineage, uploads
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.artifacts import BlobStore, open_uri, to_url
from mlinfra_lab.tracking.db import database_errors
from mlinfra_lab.tracking.errors import IntegrityError
from mlinfra_lab.tracking.records import GcReport
from mlinfra_lab.tracking.retention import RetentionPlan

if TYPE_CHECKING:
    from mlinfra_lab.tracking.store import TrackingStore

__all__ = ["collect_garbage", "execute_plan"]


def execute_plan(store: TrackingStore, plan: RetentionPlan, user: str) -> RetentionPlan:
    """Carry out `plan` (computed for `user`'s ADMIN projects); return it marked applied."""
    a, notes = S.artifacts, []
    policy = plan.policy
    cold = BlobStore(to_url(policy.cold_root)) if policy.cold_root else None
    for act in plan.actions:
        if act.action != "move_cold":
            continue
        with store.engine.connect() as conn:
            row = conn.execute(select(a.c.uri, a.c.sha256).where(a.c.id == act.artifact_id)).first()
        if row is None:
            notes.append(f"artifact {act.artifact_id} is gone since planning")
            continue
        ids: list[int] = []
        with open_uri(row.uri) as f:  # the cold copy is a pending upload until its row points at it
            put = cold.put(f, before_publish=lambda uri, ids=ids: ids.append(uploads.pending(store.engine, uri)))
        if put.sha256 != row.sha256:
            raise IntegrityError(act.artifact_id, row.sha256, put.sha256, f"at {row.uri}")
        with store._write() as conn:
            n = conn.execute(update(a).where(a.c.id == act.artifact_id, a.c.uri == row.uri, a.c.pinned.is_(False))
                             .values(uri=put.uri, tier="cold")).rowcount  # fmt: skip
            conn.execute(delete(S.pending_uploads).where(S.pending_uploads.c.id == ids[0]))
        if n != 1:
            notes.append(f"artifact {act.artifact_id} was pinned or changed since planning: not moved")
    ids = plan.deletes
    with store._write() as conn:
        for chunk in (ids[i:i + 500] for i in range(0, len(ids), 500)):
            lineage.bury(conn, chunk, "retention")  # a tombstone for each row about to go; edges stay
            n = conn.execute(delete(a).where(a.c.id.in_(chunk), a.c.pinned.is_(False))).rowcount
            if n != len(chunk):
                notes.append(f"{len(chunk) - n} listed artifacts were pinned or gone since planning")
        store._audit(user, "apply_retention", None, f"{len(ids)} deletes, {len(plan.moves)} moves", True, conn)
    return replace(plan, applied=True, notes=tuple(notes))


def collect_garbage(store: TrackingStore, grace_seconds: float, dry_run: bool, extra_roots: Sequence[str],
                    user: str, stale_upload_seconds: float = uploads.STALE_UPLOAD_S) -> GcReport:  # fmt: skip
    """Delete (or, in a dry run, list) unreferenced blobs older than `grace_seconds`, and stale uploads.

    Each blob is re-checked and deleted inside a write transaction holding its lock
    (`uploads.delete_if_unused`), so an upload that names it in the meantime keeps it.
    """
    now = time.time()
    with audit.denials_audited(store.engine), database_errors("collecting garbage"), store.engine.connect() as conn:
        access.require_store_admin(conn, user, "garbage-collect blobs")
        referenced = set(conn.execute(select(S.artifacts.c.uri).distinct()).scalars())
        cold_roots = {u.split("/blobs/")[0] for u in conn.execute(
            select(S.artifacts.c.uri).where(S.artifacts.c.tier == "cold").distinct()).scalars()}  # fmt: skip
    roots = [store.blobs] + [BlobStore(to_url(r)) for r in sorted(cold_roots | set(extra_roots))
                             if to_url(r) != store.blobs.root]  # fmt: skip
    deleted, freed, kept = [], 0, 0
    for blobs in roots:
        for uri, mtime in blobs.list_blobs():
            if uri in referenced:
                kept += 1
            elif now - mtime >= grace_seconds:
                size = blobs.size(uri)
                if dry_run or uploads.delete_if_unused(store.engine, blobs, uri, now, stale_upload_seconds):
                    freed += size
                    deleted.append(uri)
                else:
                    kept += 1  # referenced since the listing: an upload in flight
    swept, swept_bytes = uploads.sweep_stale(store.engine, roots, now, stale_upload_seconds, dry_run)
    if not dry_run:
        store._audit(user, "gc", None, f"{len(deleted)} blobs, {len(swept)} stale uploads", True)
    return GcReport(tuple(deleted + swept), freed + swept_bytes, kept, dry_run)
