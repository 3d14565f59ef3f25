"""Artifacts in object storage: the S3 backend (s3fs) against moto's S3 server on loopback.

The course says "artifacts in object storage"; these tests hold the store to it with a real
S3 API: moto's server runs as its own process on 127.0.0.1 (so its memory is not ours), the
store reaches it through fsspec's configuration as a deployment would reach AWS or MinIO,
and the tests log, de-duplicate, tamper with, delete (retention, then gc) and stream blobs,
on SQLite and PostgreSQL metadata, beside an honest user's artifact that must stay intact.
"""

from __future__ import annotations

import hashlib
import io
import time
import uuid

import pytest
from _artifact_streaming import open_and_hash

from mlinfra_lab.tracking import IntegrityError, RetentionPolicy, RetentionRule, TrackingError
from mlinfra_lab.tracking.loopback_s3 import loopback_s3
from mlinfra_lab.tracking.testing import available_backends, fresh_store
from mlinfra_lab.tracking.tiers import cold_and_cached_reads

s3fs = pytest.importorskip(
    "s3fs", reason="pip install s3fs 'moto[server]' (requirements.txt) for the S3 suite"
)
pytest.importorskip(
    "moto.server", reason="pip install 'moto[server]' (requirements.txt) for the S3 suite"
)

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]


@pytest.fixture(scope="module")
def s3_endpoint():
    """moto's S3 server on a free loopback port, with fsspec's s3 configuration pointing at it."""
    with loopback_s3() as endpoint:
        yield endpoint


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path, s3_endpoint):
    bucket = f"artifacts-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem().mkdir(bucket)
    with fresh_store(request.param, tmp_path, artifact_root=f"s3://{bucket}/tracking") as s:
        honest = s.start_run("honest", name="honest")
        s.honest = honest.log_artifact(b"honest weights", "ckpt.pt", kind="model")
        honest.end()
        yield s


def _objects(store) -> set[str]:
    return {u for u, _ in store.blobs.list_blobs()}


def test_artifacts_live_in_the_bucket_once_per_content(store):
    run = store.start_run("p", name="r")
    a = run.log_artifact(b"tokenizer", "tok.json")
    b = run.log_artifact(io.BytesIO(b"tokenizer"), "tok-again.json")
    run.end()
    assert a.uri == b.uri and a.uri.startswith(store.artifact_root + "/blobs/")
    assert store.blobs.fs.cat(store.blobs._path(a.uri)) == b"tokenizer", (
        "the bytes are an S3 object"
    )
    assert _objects(store) == {a.uri, store.honest.uri}, "one object per content"
    assert store.read_artifact(a.id) == store.read_artifact(b.id) == b"tokenizer"
    assert store.blobs.list_tmp() == [], "no temporary object is left behind"


def test_a_tampered_object_is_refused_and_healed_by_the_right_bytes(store):
    run = store.start_run("p", name="r")
    a = run.log_artifact(b"the right bytes", "model.pt")
    store.blobs.fs.pipe(store.blobs._path(a.uri), b"evil")  # someone with bucket access rewrites it
    with pytest.raises(IntegrityError):
        store.read_artifact(a.id)
    run.log_artifact(b"the right bytes", "model-again.pt")
    assert store.read_artifact(a.id) == b"the right bytes"
    assert store.read_artifact(store.honest.id) == b"honest weights"


def test_retention_then_gc_delete_the_object_and_nothing_else(store):
    run = store.start_run("p", name="old", start_time=time.time() - 400 * 86400)
    old = run.log_artifact(b"old checkpoint", "ckpt.pt", kind="checkpoint", step=1)
    run.end()
    policy = RetentionPolicy(
        (RetentionRule("checkpoint", keep_all_days=0, keep_last_runs=0, keep_final=False),)
    )
    assert store.apply_retention(policy, dry_run=False).deletes == [old.id]
    report = store.gc(grace_seconds=0)
    assert report.deleted == (old.uri,) and not store.blobs.exists(old.uri), (
        "the object is gone from the bucket"
    )
    assert (
        _objects(store) == {store.honest.uri}
        and store.read_artifact(store.honest.id) == b"honest weights"
    )


def test_open_artifact_streams_an_object_of_megabytes(store):
    data = hashlib.sha256(b"s3").digest() * ((12 << 20) // 32)  # 12 MiB
    run = store.start_run("p", name="big")
    art = run.log_artifact(io.BytesIO(data), "big.bin")
    del data
    digest, peak = open_and_hash(store, art.id)
    assert digest == art.sha256
    assert peak < 6 << 20, f"open_artifact held {peak / 2**20:.1f} MiB of a 12 MiB object in memory"


def test_a_cold_read_fetches_the_object_and_a_cache_hit_fetches_nothing(tmp_path, s3_endpoint):
    bucket = f"cache-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem().mkdir(bucket)
    root = f"s3://{bucket}/tracking"
    with fresh_store(
        "sqlite", tmp_path, artifact_root=root, cache_dir=tmp_path / "cache", cache_bytes=1 << 20
    ) as s:
        rows = cold_and_cached_reads(s, sizes=(1000, 200_000), repeats=2, seed=5)
    for r in rows:
        assert r["cold_bytes"] == r["size"] and r["cold_calls"] >= 1, r
        assert r["hit_bytes"] == 0 and r["hit_calls"] == 0, r


def test_gc_leaves_another_teams_objects_under_a_shared_cold_prefix(store):
    """A cold root in a bucket prefix other teams use too: gc deletes only the store's own
    content-addressed blobs there, never another team's objects, even under ``blobs/``."""
    fs = s3fs.S3FileSystem()
    bucket = store.artifact_root.split("/")[2]
    shared = f"s3://{bucket}/shared"
    theirs = [f"{bucket}/shared/blobs/reports/q3.csv", f"{bucket}/shared/blobs/ab/notes.txt"]
    for key in theirs:
        fs.pipe(key, b"another team's object")
    report = store.gc(grace_seconds=0, extra_roots=[shared])
    assert [k for k in theirs if not fs.exists(k)] == [], "gc deleted objects it never made"
    assert report.deleted == () and store.read_artifact(store.honest.id) == b"honest weights"
    with pytest.raises(TrackingError, match="overlaps the artifact root"):
        store.gc(grace_seconds=0, extra_roots=[f"s3://{bucket}/tracking/blobs"])
