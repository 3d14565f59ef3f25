"""Runs, batched metrics, artifacts by reference, bad input, integrity, the cache, migrations."""

from __future__ import annotations

import io

import pytest
from sqlalchemy import inspect

from mlinfra_lab.tracking import (
    ArtifactNameError,
    IntegrityError,
    TrackingError,
)
from mlinfra_lab.tracking.testing import available_backends, fresh_store

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    with fresh_store(request.param, tmp_path, cache_dir=tmp_path / "cache", cache_bytes=1000) as s:
        yield s


def _blob_path(store, uri: str) -> str:
    return store.blobs._path(uri)


def test_batched_metrics_are_written_per_batch_and_on_flush(store):
    run = store.start_run("p", params={"lr": 0.01})
    run.batch_size = 25
    for step in range(10):
        run.log_metrics({"loss": 1.0 / (step + 1), "acc": step / 10}, step=step)
    assert store.count("metrics") == 0, "points must stay buffered until a batch is full"
    for step in range(10, 13):
        run.log_metrics({"loss": 0.01, "acc": 0.99}, step=step)
    assert store.count("metrics") == 26 and run.flushes == 1, "a full batch is one write"
    assert run.flush() == 0, "the full batch left nothing buffered"
    run.end()
    assert store.count("metrics") == 26
    info = store.get_run(run.id)
    assert info.status == "FINISHED"
    assert info.metrics["acc"] == pytest.approx(0.99)
    assert store.metric_history(run.id, "loss")[:2] == [
        (0, pytest.approx(1.0)),
        (1, pytest.approx(0.5)),
    ]


def test_latest_metric_never_moves_back_in_steps(store):
    run = store.start_run("p")
    run.log_metrics({"acc": 0.9}, step=100)
    run.flush()
    run.log_metrics({"acc": 0.1}, step=5)  # a late, older point
    run.end()
    assert store.get_run(run.id).metrics["acc"] == pytest.approx(0.9)
    assert len(store.metric_history(run.id, "acc")) == 2


def test_artifacts_are_content_addressed_deduplicated_and_by_reference(store):
    run = store.start_run("p")
    a = run.log_artifact(b"weights" * 100, "ckpt/step1.pt", kind="checkpoint", step=1)
    b = run.log_artifact(io.BytesIO(b"weights" * 100), "ckpt/copy.pt", kind="checkpoint", step=2)
    run.end()
    assert a.sha256 == b.sha256 and a.uri == b.uri, "same bytes must be stored once"
    assert len(store.blobs.list_blobs()) == 1
    assert store.read_artifact(a.id) == b"weights" * 100
    with store.engine.connect() as conn:  # the database holds references only
        cols = {c["name"]: str(c["type"]) for c in inspect(conn).get_columns("artifacts")}
    assert not any("BLOB" in t or "BYTEA" in t for t in cols.values())


@pytest.mark.parametrize(
    "name", ["../escape.pt", "a/../../b", "/etc/passwd", "C:\\x", "ok\x00.pt", "", "a//b"]
)
def test_bad_artifact_names_are_refused(store, name):
    run = store.start_run("p")
    with pytest.raises(ArtifactNameError):
        run.log_artifact(b"x", name)
    assert store.count("artifacts") == 0 and store.blobs.list_blobs() == []


class _FailingStream(io.RawIOBase):
    """Yields some bytes, then raises as a network upload would fail midway."""

    def __init__(self):
        self.calls = 0

    def readable(self):
        return True

    def read(self, n=-1):
        self.calls += 1
        if self.calls > 2:
            raise OSError("connection reset during upload")
        return b"x" * (1 << 20)


def test_upload_failing_midway_leaves_no_row_and_no_blob(store):
    run = store.start_run("p")
    with pytest.raises(OSError, match="connection reset"):
        run.log_artifact(_FailingStream(), "ckpt/big.pt", kind="checkpoint")
    assert store.count("artifacts") == 0, "no row may point at a blob that was never completed"
    assert store.blobs.list_blobs() == []
    assert (
        not store.blobs.fs.exists(f"{store.blobs._root_path}/tmp")
        or store.blobs.fs.ls(f"{store.blobs._root_path}/tmp") == []
    ), "the temporary file is removed"


def test_tampered_blob_raises_integrity_error(store):
    run = store.start_run("p")
    a = run.log_artifact(b"original bytes", "model.pt", kind="model")
    with open(_blob_path(store, a.uri), "wb") as f:
        f.write(b"tampered bytes")
    with pytest.raises(IntegrityError, match="expected"):
        store.read_artifact(a.id)
    assert a.sha256 not in store.cache, "a bad blob must not enter the cache"


def test_tampered_cache_entry_raises_integrity_error(store):
    run = store.start_run("p")
    a = run.log_artifact(b"cached bytes", "model.pt", kind="model")
    store.read_artifact(a.id)  # fill the cache
    (store.cache.dir / a.sha256).write_bytes(b"evil")
    with pytest.raises(IntegrityError):
        store.read_artifact(a.id)


def test_cache_counts_hits_misses_and_evicts_lru_within_its_bound(store):
    run = store.start_run("p")
    # 400 B each, cache 1000 B
    arts = [run.log_artifact(bytes([i]) * 400, f"a{i}.bin") for i in range(3)]
    for a in (arts[0], arts[1], arts[0], arts[2]):  # a2 evicts a1 (least recently used)
        store.read_artifact(a.id)
    st = store.cache_stats()
    assert (st.hits, st.misses, st.evictions) == (1, 3, 1)
    assert st.bytes_cached <= 1000
    assert arts[0].sha256 in store.cache and arts[1].sha256 not in store.cache
    big = run.log_artifact(b"z" * 5000, "big.bin")
    assert store.read_artifact(big.id) == b"z" * 5000, (
        "an item larger than the cache is still served"
    )
    assert store.cache_stats().bytes_cached <= 1000


def test_nan_metric_and_ended_run_are_refused(store):
    run = store.start_run("p")
    with pytest.raises(TrackingError, match="NaN"):
        run.log_metrics({"loss": float("nan")})
    run.end()
    with pytest.raises(TrackingError, match="ended"):
        run.log_metrics({"loss": 1.0})


def test_context_manager_marks_failed_runs(store):
    with pytest.raises(RuntimeError):
        with store.start_run("p") as run:
            run.log_metrics({"loss": 1.0})
            raise RuntimeError("training crashed")
    info = store.get_run(run.id)
    assert info.status == "FAILED" and info.metrics == {"loss": 1.0}, (
        "buffered points are flushed on failure"
    )


def test_migrations_build_exactly_the_declared_schema(store):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from mlinfra_lab.tracking.schema import metadata

    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == [], f"schema.py and the Alembic migrations disagree: {diff}"


def test_hot_params_are_promoted_and_backfilled_by_migration(tmp_path):
    from sqlalchemy import text

    from mlinfra_lab.tracking.db import make_engine, migrate

    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    migrate(engine, "0001")  # an old database, before hot params existed
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO projects (id, name, created_at) VALUES (1, 'p', 0)"))
        conn.execute(
            text(
                "INSERT INTO runs (id, project_id, name, status, user, created_at) "
                "VALUES (1, 1, 'r', 'FINISHED', 'u', 0)"
            )
        )
        conn.execute(text("INSERT INTO params VALUES (1, 'lr', '0.003', 0.003)"))
    migrate(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT hot_lr FROM runs WHERE id = 1")).scalar() == pytest.approx(
            0.003
        )
    engine.dispose()


def test_any_fsspec_root_works_unchanged(tmp_path):
    import uuid

    from mlinfra_lab.tracking import TrackingStore

    root = f"memory://tracking-test-{uuid.uuid4().hex[:8]}"  # an object store stand-in
    with TrackingStore(f"sqlite:///{tmp_path / 'm.db'}", root, default_user="u") as store:
        run = store.start_run("p")
        a = run.log_artifact(b"in memory", "x.bin")
        run.end()
        assert a.uri.startswith(root + "/blobs/") and store.read_artifact(a.id) == b"in memory"


def test_search_never_touches_the_artifact_store(store):
    run = store.start_run("p", params={"lr": 0.1})
    run.log_metrics({"acc": 0.5})
    run.log_artifact(b"bytes", "a.bin")
    run.end()

    class Unreachable:
        def __getattr__(self, name):
            raise AssertionError(f"search touched the artifact store ({name})")

    store.blobs = Unreachable()
    assert [r.id for r in store.search_runs("p", "metrics.acc > 0.1 and params.lr = 0.1")] == [
        run.id
    ]
    assert store.get_run(run.id).params == {"lr": "0.1"}
