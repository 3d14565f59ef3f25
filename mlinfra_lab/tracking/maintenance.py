"""Carrying out a retention plan and collecting garbage: the two operations that delete things.

Contract: `artifact_records(conn, project_ids)` reads what a retention plan is computed from;
`execute_plan(engine, plan, user, audit_fn)` does exactly what a `RetentionPlan` lists (moves
to the cold root, then row deletes) and returns the plan marked applied, with a note for
anything that changed since planning; `collect_garbage(engine, blobs, ...)` deletes only
blobs that no artifact row references and that are older than a grace period. Both record
what they did with `audit_fn` (`audit.record`'s signature).

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
- The collector compares blobs and rows in one spelling (`artifacts.to_url`,
  `canonical_blob_uri`: symlinks and ``..`` resolved), lists only content-addressed files
  (`BlobStore.list_blobs`), and refuses an extra root that overlaps the artifact root
  (`check_cold_root`, which `apply_retention` applies to a policy's cold root as well): a
  root spelled another way at gc time, or a cold root shared with other files, loses nothing.
- Retention needs ADMIN on the projects it touches (the plan is already limited to them);
  garbage collection needs store ADMIN (`access`), since blobs are shared across projects.
  Both are checked by the caller (`TrackingStore`) before it calls in here.
- This module is given the engine, the blob store and an audit function, never the
  `TrackingStore`: the store calls maintenance, maintenance does not call back, so the two
  modules do not import each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from sqlalchemy import Connection, Engine, delete, select, update

from mlinfra_lab.tracking import audit, lineage, uploads
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.artifacts import (
    BlobStore,
    canonical_blob_uri,
    open_uri,
    overlaps,
    to_url,
)
from mlinfra_lab.tracking.db import write_tx
from mlinfra_lab.tracking.errors import IntegrityError, TrackingError
from mlinfra_lab.tracking.records import GcReport
from mlinfra_lab.tracking.retention import ArtifactRecord, RetentionPlan

__all__ = ["AuditFn", "artifact_records", "check_cold_root", "collect_garbage", "execute_plan"]

# (conn, principal, action, project, target, allowed): `audit.record`'s signature
AuditFn = Callable[[Connection, str, str, str | None, str | None, bool], None]


def artifact_records(conn: Connection, project_ids: Sequence[int]) -> list[ArtifactRecord]:
    """Every artifact of the projects `project_ids`, as the records `plan_retention` reads."""
    a, r, p = S.artifacts, S.runs, S.projects
    q = (
        select(
            a.c.id,
            p.c.name,
            a.c.run_id,
            r.c.created_at.label("run_created"),
            a.c.kind,
            a.c.step,
            a.c.created_at,
            a.c.size,
            a.c.tier,
            a.c.pinned,
            a.c.uri,
        )
        .join(r, r.c.id == a.c.run_id)
        .join(p, p.c.id == r.c.project_id)
        .where(p.c.id.in_(project_ids))
    )
    return [ArtifactRecord(*row) for row in conn.execute(q)]


def check_cold_root(cold_root: str, artifact_root: str, what: str = "cold root") -> None:
    """Raise `TrackingError` when `cold_root` is the artifact root, inside it or around it:
    moving blobs there, or collecting garbage there, would work on the store's own files."""
    if overlaps(cold_root, artifact_root):
        raise TrackingError(
            f"the {what} {cold_root!r} overlaps the artifact root {artifact_root!r} (one "
            "is the other, or inside it, once symlinks and '..' are resolved); use a "
            "separate folder or bucket prefix"
        )


def execute_plan(
    engine: Engine, plan: RetentionPlan, user: str, audit_fn: AuditFn = audit.record
) -> RetentionPlan:
    """Carry out `plan` (computed for `user`'s ADMIN projects); return it marked applied."""
    a, notes = S.artifacts, []
    policy = plan.policy
    cold = BlobStore(to_url(policy.cold_root)) if policy.cold_root else None
    for act in plan.actions:
        if act.action != "move_cold":
            continue
        with engine.connect() as conn:
            row = conn.execute(select(a.c.uri, a.c.sha256).where(a.c.id == act.artifact_id)).first()
        if row is None:
            notes.append(f"artifact {act.artifact_id} is gone since planning")
            continue
        assert cold is not None, "a move_cold action comes from a policy with a cold_root"
        ids: list[int] = []

        def record_pending(uri: str, ids: list[int] = ids) -> None:
            ids.append(uploads.pending(engine, uri))

        with open_uri(row.uri) as f:  # the cold copy is a pending upload until its row points at it
            put = cold.put(f, before_publish=record_pending)
        if put.sha256 != row.sha256:
            raise IntegrityError(act.artifact_id, row.sha256, put.sha256, f"at {row.uri}")
        with audit.audited_write(engine, "applying retention") as conn:
            n = conn.execute(
                update(a)
                .where(a.c.id == act.artifact_id, a.c.uri == row.uri, a.c.pinned.is_(False))
                .values(uri=put.uri, tier="cold")
            ).rowcount
            conn.execute(delete(S.pending_uploads).where(S.pending_uploads.c.id == ids[0]))
        if n != 1:
            notes.append(
                f"artifact {act.artifact_id} was pinned or changed since planning: not moved"
            )
    ids = plan.deletes
    with audit.audited_write(engine, "applying retention") as conn:
        for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
            # a tombstone for each row about to go; edges stay
            lineage.bury(conn, chunk, "retention")
            n = conn.execute(delete(a).where(a.c.id.in_(chunk), a.c.pinned.is_(False))).rowcount
            if n != len(chunk):
                notes.append(
                    f"{len(chunk) - n} listed artifacts were pinned or gone since planning"
                )
        audit_fn(
            conn,
            user,
            "apply_retention",
            None,
            f"{len(ids)} deletes, {len(plan.moves)} moves",
            True,
        )
    return replace(plan, applied=True, notes=tuple(notes))


def collect_garbage(
    engine: Engine,
    blobs: BlobStore,
    grace_seconds: float,
    dry_run: bool,
    extra_roots: Sequence[str],
    user: str,
    stale_upload_seconds: float = uploads.STALE_UPLOAD_S,
    audit_fn: AuditFn = audit.record,
) -> GcReport:
    """Delete (or, in a dry run, list) unreferenced blobs older than `grace_seconds`, and stale uploads.

    Each blob is re-checked and deleted inside a write transaction holding its lock
    (`uploads.delete_if_unused`), so an upload that names it in the meantime keeps it.
    The caller has checked that `user` is a store ADMIN.
    """
    now = time.time()
    for r in extra_roots:
        check_cold_root(r, blobs.root, "extra root")
    with audit.audited_read(engine, "collecting garbage") as conn:
        uris = set(conn.execute(select(S.artifacts.c.uri).distinct()).scalars())
        cold_uris = conn.execute(
            select(S.artifacts.c.uri).where(S.artifacts.c.tier == "cold").distinct()
        ).scalars()
        cold_roots = {to_url(u.rpartition("/blobs/")[0]) for u in cold_uris}
    referenced = {canonical_blob_uri(u) for u in uris}  # one spelling per blob: see artifacts
    roots = [blobs] + [
        BlobStore(r)
        for r in sorted(cold_roots | {to_url(r) for r in extra_roots})
        if not overlaps(r, blobs.root)
    ]
    deleted, freed, kept = [], 0, 0
    for root in roots:
        for uri, mtime in root.list_blobs():
            if uri in referenced:
                kept += 1
            elif now - mtime >= grace_seconds:
                size = root.size(uri)
                if dry_run or uploads.delete_if_unused(
                    engine, root, uri, now, stale_upload_seconds
                ):
                    freed += size
                    deleted.append(uri)
                else:
                    kept += 1  # referenced since the listing: an upload in flight
    swept, swept_bytes = uploads.sweep_stale(engine, roots, now, stale_upload_seconds, dry_run)
    if not dry_run:
        with write_tx(engine) as conn:
            audit_fn(
                conn, user, "gc", None, f"{len(deleted)} blobs, {len(swept)} stale uploads", True
            )
    return GcReport(tuple(deleted + swept), freed + swept_bytes, kept, dry_run)
