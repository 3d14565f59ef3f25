"""Garbage collection against uploads: no race loses a blob, killed uploads are swept, tampering heals.

The collector deletes blobs no artifact row references. An upload of bytes that match such
a blob de-duplicates onto it, so the two race: the issue found the new artifact unreadable
4 times in 4. These tests run the collector and the upload in separate processes, kill a
writer in the middle of an upload, and re-log the right bytes over a tampered blob, on
SQLite and PostgreSQL, each beside an honest user's artifact that must stay readable.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from mlinfra_lab.tracking.testing import available_backends, fresh_store, row_count, run_together

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]
ROUNDS = 20
DELAY_S = 0.03  # seconds; the old collector lost 1 to 4 of 20 rounds at this spread


def _racer(db_url: str, artifact_root: str, results: str, worker: int, barrier) -> None:
    from mlinfra_lab.tracking import TrackingStore

    store = TrackingStore(db_url, artifact_root, default_user="owner", migrate_schema=False)
    run = store.start_run("p", name="racer") if worker == 0 else None
    rng = random.Random(worker)
    for i in range(ROUNDS):
        data = f"round {i} weights ".encode() * 64
        if worker == 0:
            store.blobs.put(data)  # an unreferenced blob with these bytes: the collector's prey
        barrier.wait()
        # Start at a random moment of the collector's pass (seeded): some rounds land the upload
        # between the collector's read of the referenced set and its deletes.
        time.sleep(rng.uniform(0, DELAY_S))
        if worker == 0:  # de-duplicated upload of the same bytes ...
            art = run.log_artifact(data, f"ckpt{i}.pt", kind="checkpoint")
        else:  # ... while the collector deletes unreferenced blobs
            store.gc(grace_seconds=0)
        barrier.wait()
        if worker == 0:
            try:
                ok = store.read_artifact(art.id) == data
            except Exception as err:  # noqa: BLE001 (the outcome is what the test counts)
                ok = type(err).__name__
            with open(results, "a") as f:
                f.write(f"{ok}\n")
    store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_gc_racing_a_deduplicated_upload_never_loses_the_new_artifact(backend, tmp_path):
    with fresh_store(backend, tmp_path) as store:
        honest = store.start_run("p", name="honest")
        kept = honest.log_artifact(b"honest weights", "ckpt.pt")
        honest.end()
        results = tmp_path / "results.txt"
        codes = run_together(_racer, 2, store.db_url, store.artifact_root, str(results))
        assert codes == [0, 0], "a racer failed (see its stderr)"
        outcomes = results.read_text().split()
        assert outcomes == ["True"] * ROUNDS, (
            f"readable {outcomes.count('True')}/{ROUNDS}: {outcomes}"
        )
        assert store.read_artifact(kept.id) == b"honest weights"
        assert row_count(store, "pending_uploads") == 0, "finished uploads leave no pending record"


class _KillMidway:
    """A source stream that kills its own process (SIGKILL) after 2 MiB: a writer killed mid-upload."""

    def __init__(self):
        self.sent = 0

    def read(self, n=-1):
        if self.sent >= 2 << 20:
            os.kill(os.getpid(), signal.SIGKILL)
        self.sent += 1 << 20
        return b"k" * (1 << 20)


def _killed_writer(db_url: str, artifact_root: str, worker: int, barrier) -> None:
    from mlinfra_lab.tracking import TrackingStore

    store = TrackingStore(db_url, artifact_root, default_user="owner", migrate_schema=False)
    barrier.wait()
    store.start_run("p", name="doomed").log_artifact(_KillMidway(), "big.pt")


@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_uploads_of_killed_writers_are_swept_after_the_grace_period(backend, tmp_path):
    with fresh_store(backend, tmp_path) as store:
        honest = store.start_run("p", name="honest")
        kept = honest.log_artifact(b"honest weights", "ckpt.pt")
        codes = run_together(_killed_writer, 1, store.db_url, store.artifact_root)
        assert codes == [-signal.SIGKILL]
        tmp = Path(store.blobs._root_path) / "tmp"
        partial = list(tmp.iterdir())
        assert len(partial) == 1 and partial[0].stat().st_size >= 2 << 20, (
            "the killed upload left its part"
        )
        store.gc(grace_seconds=0)
        assert partial[0].exists(), "an upload younger than the grace period may still be running"
        old = time.time() - 2 * 3600
        os.utime(partial[0], (old, old))
        report = store.gc(grace_seconds=0)
        assert not partial[0].exists() and report.bytes_freed >= 2 << 20, (
            "the stale partial upload is swept"
        )
        assert store.read_artifact(kept.id) == b"honest weights"
        honest.end()


@pytest.mark.parametrize("backend", BACKENDS)
def test_logging_the_right_bytes_again_replaces_a_tampered_blob(backend, tmp_path):
    from mlinfra_lab.tracking import IntegrityError

    with fresh_store(backend, tmp_path) as store:
        honest = store.start_run("p", name="honest")
        kept = honest.log_artifact(b"honest weights", "other.pt")
        run = store.start_run("p", name="r")
        a = run.log_artifact(b"the right bytes", "model.pt")
        with open(store.blobs._path(a.uri), "wb") as f:
            f.write(b"tampered!")
        with pytest.raises(IntegrityError):
            store.read_artifact(a.id)
        b = run.log_artifact(b"the right bytes", "model-again.pt")
        assert b.uri == a.uri, "still one blob per content"
        assert store.read_artifact(a.id) == store.read_artifact(b.id) == b"the right bytes"
        assert store.read_artifact(kept.id) == b"honest weights"
