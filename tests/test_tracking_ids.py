"""Ids are never reused: a deleted artifact's id, lineage and tombstone stay its own, on every backend.

The attack: alice's newest checkpoint is deleted by retention, then bob logs an artifact in
his own project. Were bob's artifact given the deleted id (SQLite's rowid picks the largest
id + 1, so deleting the largest frees it), the lineage edges and the tombstone of alice's
checkpoint would describe bob's artifact: its lineage would name alice's run as its
producer, alice's fine-tuning run would seem to have consumed bob's file, and retention of
bob's artifact would fail forever on the tombstone already holding that id.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from mlinfra_lab.tracking import RetentionPolicy, RetentionRule
from mlinfra_lab.tracking.testing import available_backends, fresh_store

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]
DAY = 86400.0
NOW = 1_800_000_000.0
DELETE_ALL = RetentionPolicy(
    (RetentionRule("checkpoint", keep_all_days=0, keep_last_runs=0, keep_final=False),)
)


def _alice_checkpoint_deleted(store):
    """alice pre-trains (checkpoint), fine-tunes from it, then retention deletes the checkpoint."""
    store.create_project("lab")
    pre = store.start_run("lab", name="pretrain", start_time=NOW - 400 * DAY)
    ckpt = pre.log_artifact(b"alice's weights", "ckpt.pt", kind="checkpoint", step=1)
    pre.end()
    ft = store.start_run("lab", name="finetune", inputs=[ckpt], start_time=NOW - 300 * DAY)
    ft.end()
    assert store.apply_retention(DELETE_ALL, now=NOW, dry_run=False).deletes == [ckpt.id]
    return pre, ckpt, ft


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_deleted_artifact_id_is_never_given_to_a_new_artifact(backend, tmp_path):
    with fresh_store(backend, tmp_path, default_user="alice") as store:
        pre, ckpt, ft = _alice_checkpoint_deleted(store)
        bob = store.start_run("bobs", name="bob", user="bob", start_time=NOW - 200 * DAY)
        new = bob.log_artifact(b"bob's weights", "ckpt.pt", kind="checkpoint", step=1)
        bob.end()
        assert new.id != ckpt.id, f"bob's new artifact took the deleted artifact's id {ckpt.id}"

        store.grant("bobs", "alice", "view", user="bob")  # alice may see both projects
        for who in ("alice", "bob"):
            back = store.lineage(new, "backward", user=who)
            assert set(back.nodes) == {new.node, bob.node}, (
                f"bob's artifact shows another user's run as its producer: {back.nodes}"
            )
            assert back.deleted == {}, f"bob's live artifact is shown as deleted: {back.deleted}"
        inputs = store.lineage(ft.node, "backward")
        assert ckpt.node in inputs.deleted and new.node not in inputs.nodes, (
            "alice's fine-tuning run must still show the deleted checkpoint it consumed"
        )

        plan = store.apply_retention(DELETE_ALL, now=NOW, dry_run=False, user="bob")
        assert plan.deletes == [new.id] and not plan.notes, "retention of the new artifact works"
        assert set(store.lineage(ft.node, "backward").deleted) == {ckpt.node}
        assert "bob" not in str(store.lineage(pre.node, "forward").nodes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_largest_id_is_not_reused_after_reopening_the_store(backend, tmp_path):
    """The high-water mark is in the database, not in the process: a new store keeps it."""
    from mlinfra_lab.tracking import TrackingStore

    with fresh_store(backend, tmp_path, default_user="alice") as store:
        _, ckpt, _ = _alice_checkpoint_deleted(store)
        url, root = store.db_url, store.artifact_root
        with TrackingStore(url, root, default_user="alice") as again:
            run = again.start_run("lab", name="later")
            assert run.log_artifact(b"later", "x.pt", kind="checkpoint").id > ckpt.id


def _sqlite_sequence(engine, table: str) -> int | None:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT seq FROM sqlite_sequence WHERE name = :t"), {"t": table}
        ).scalar()


def test_migration_keeps_ids_of_tombstones_and_rows_of_an_old_sqlite_database(tmp_path):
    """An old database (no AUTOINCREMENT) whose largest artifact was deleted: after the upgrade,
    the next id is above every id a row or a tombstone ever held, and no row is lost."""
    from mlinfra_lab.tracking.db import make_engine, migrate

    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    migrate(engine, "0006")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO projects (id, name, created_at) VALUES (1, 'p', 0)"))
        conn.execute(
            text(
                "INSERT INTO runs (id, project_id, name, status, user, created_at) "
                "VALUES (1, 1, 'r', 'FINISHED', 'u', 0)"
            )
        )
        for i in (1, 2):
            conn.execute(
                text(
                    "INSERT INTO artifacts (id, run_id, name, kind, uri, sha256, size, tier, "
                    "pinned, created_at) VALUES (:i, 1, 'a', 'checkpoint', 'u', 'h', 1, 'hot', 0, 0)"
                ),
                {"i": i},
            )
        conn.execute(
            text(
                "INSERT INTO tombstones VALUES (7, 1, 1, 'gone', 'checkpoint', 'h', 1, 0, 'retention')"
            )
        )
        conn.execute(text("INSERT INTO params VALUES (1, 'lr', '0.1', 0.1)"))
    migrate(engine)
    with engine.begin() as conn:
        sql = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'artifacts'")).scalar()
        assert "AUTOINCREMENT" in sql.upper()
        assert conn.execute(text("SELECT count(*) FROM artifacts")).scalar() == 2
        assert conn.execute(text("SELECT count(*) FROM params")).scalar() == 1, (
            "rebuilding a table must not cascade deletes to its neighbours"
        )
        new_id = conn.execute(
            text(
                "INSERT INTO artifacts (run_id, name, kind, uri, sha256, size, tier, pinned, "
                "created_at) VALUES (1, 'b', 'checkpoint', 'u', 'h', 1, 'hot', 0, 0) RETURNING id"
            )
        ).scalar()
    assert new_id == 8, "the next artifact id is above every tombstoned id (7)"
    assert _sqlite_sequence(engine, "artifacts") == 8
    engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_swept_pending_upload_id_is_not_given_to_the_next_upload(backend, tmp_path):
    """A slow writer whose stale record the collector swept deletes its record by id when it
    finishes; were that id handed out again, it would delete a newer writer's record and leave
    the newer blob unprotected from the collector."""
    import time

    from mlinfra_lab.tracking import uploads
    from mlinfra_lab.tracking.testing import row_count

    with fresh_store(backend, tmp_path) as store:
        slow = uploads.pending(store.engine, "file:///blobs/aa/slow")
        uploads.sweep_stale(store.engine, [], time.time() + 2 * uploads.STALE_UPLOAD_S)
        assert row_count(store, "pending_uploads") == 0
        fresh = uploads.pending(store.engine, "file:///blobs/bb/fresh")
        assert fresh != slow, f"the swept record's id {slow} was given to a new upload"
