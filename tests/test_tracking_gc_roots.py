"""Garbage collection under another spelling of the same root, and next to files it did not make.

The attacks, on the filesystem: the artifact root is spelled one way when artifacts are
logged and another at gc time (a symlink to the same folder, ``..`` in the path, a
``file://`` URL), and the collector, comparing URIs as strings, deleted every referenced
blob; a cold root shared with other files (another team's, under its own ``blobs/``
folder) lost the ones that were not the store's; and a cold root inside the store's own
prefix, or containing it, was accepted.
"""

from __future__ import annotations

import os

import pytest

from mlinfra_lab.tracking import RetentionPolicy, RetentionRule, TrackingError, TrackingStore
from mlinfra_lab.tracking.testing import available_backends, fresh_store

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]


SPELLINGS = ["symlink", "dot-dot", "file URL via symlink", "file URL with dot-dot"]


def _spelling(base, name: str) -> str:
    """Another name of the folder base/'art': through a symlink, a '..' detour, as a file:// URL."""
    (base / "art").mkdir(parents=True)
    (base / "link").symlink_to(base / "art", target_is_directory=True)
    (base / "sub").mkdir()
    return {
        "symlink": str(base / "link"),
        "dot-dot": str(base / "sub" / ".." / "art"),
        "file URL via symlink": f"file://{base / 'link'}",
        "file URL with dot-dot": f"file://{base / 'sub' / '..' / 'art'}",
    }[name]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("at", ["upload", "gc"])
@pytest.mark.parametrize("name", SPELLINGS)
def test_gc_under_another_spelling_of_the_root_deletes_no_referenced_blob(
    backend, at, name, tmp_path
):
    other = _spelling(tmp_path, name)
    upload_root, gc_root = (other, str(tmp_path / "art"))[:: 1 if at == "upload" else -1]
    with fresh_store(backend, tmp_path, artifact_root=upload_root) as store:
        run = store.start_run("p", name=name)
        art = run.log_artifact(b"weights", "ckpt.pt")
        run.end()
        with TrackingStore(store.db_url, gc_root, default_user="owner") as collector:
            report = collector.gc(grace_seconds=0)
        assert report.deleted == (), f"{name} at {at} time: gc deleted {report.deleted}"
        assert store.read_artifact(art.id) == b"weights"


@pytest.mark.parametrize("backend", BACKENDS)
def test_gc_deletes_only_what_the_store_made_under_a_shared_cold_root(backend, tmp_path):
    shared = tmp_path / "shared"
    theirs = [shared / "blobs" / "reports" / "q3.csv", shared / "blobs" / "ab" / "notes.txt"]
    for f in theirs:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("another team's file")
    with fresh_store(backend, tmp_path) as store:
        run = store.start_run("p")
        run.log_artifact(b"kept", "a.pt")
        orphan = store.blobs.put(b"an upload that never got its row")  # the store's garbage
        run.end()
        report = store.gc(grace_seconds=0, extra_roots=[str(shared)])
        assert [f for f in theirs if not f.exists()] == [], "gc deleted files it never made"
        assert report.deleted == (orphan.uri,), "the store's own garbage still goes"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cold_root_overlapping_the_artifact_root_is_refused(backend, tmp_path):
    with fresh_store(backend, tmp_path) as store:
        run = store.start_run("p")
        art = run.log_artifact(b"kept", "a.pt", kind="checkpoint")
        run.end()
        root = store.blobs._root_path
        overlapping = {
            "the root itself": root,
            "inside its blobs": os.path.join(root, "blobs"),
            "its parent": os.path.dirname(root),
            "a symlink to it": str(tmp_path / "alias"),
        }
        (tmp_path / "alias").symlink_to(root, target_is_directory=True)
        rule = RetentionRule("checkpoint", keep_all_days=0, keep_last_runs=0, cold_after_days=0.0)
        for cold in overlapping.values():
            policy = RetentionPolicy((rule,), cold_root=cold)
            with pytest.raises(TrackingError, match="overlaps the artifact root"):
                store.apply_retention(policy, dry_run=False, now=run_time(store, run.id) + 86400)
            with pytest.raises(TrackingError, match="overlaps the artifact root"):
                store.gc(grace_seconds=0, extra_roots=[cold])
        assert store.read_artifact(art.id) == b"kept"


def run_time(store, run_id: int) -> float:
    return store.get_run(run_id).created_at
