"""Four writer processes at once lose no metric row and no artifact (SQLite WAL, PostgreSQL)."""

from __future__ import annotations

import os

import pytest

from mlinfra_lab.tracking.testing import available_backends, fresh_store, run_together

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]
WRITERS, RUNS, STEPS, KEYS, ARTIFACTS = 4, 2, 60, 3, 4


def _writer(db_url: str, artifact_root: str, worker: int, barrier) -> None:
    from mlinfra_lab.tracking import TrackingStore

    store = TrackingStore(
        db_url, artifact_root, default_user="owner", batch_size=16, migrate_schema=False
    )
    barrier.wait()  # start together so the transactions really contend
    for r in range(RUNS):
        run = store.start_run("shared", name=f"w{worker}-r{r}", params={"worker": worker})
        for step in range(STEPS):
            run.log_metrics({f"m{k}": worker + step / STEPS for k in range(KEYS)}, step=step)
            if step % (STEPS // ARTIFACTS) == 0:
                run.log_artifact(
                    f"w{worker} r{r} s{step}".encode(), f"ckpt/{step}.pt", "checkpoint", step=step
                )
                run.log_artifact(b"same bytes for everyone", "vocab.txt")  # de-dup under contention
        run.end()
    store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_four_writer_processes_lose_nothing(backend, tmp_path):
    with fresh_store(backend, tmp_path) as store:
        store.create_project("shared")
        codes = run_together(_writer, WRITERS, store.db_url, store.artifact_root)
        assert codes == [0] * WRITERS, "a writer process failed (see its stderr)"
        assert store.count("runs") == WRITERS * RUNS
        assert store.count("metrics") == WRITERS * RUNS * STEPS * KEYS, "metric rows were lost"
        assert store.count("latest_metrics") == WRITERS * RUNS * KEYS
        assert store.count("artifacts") == WRITERS * RUNS * ARTIFACTS * 2
        for run in store.search_runs("shared", None, limit=100):
            assert run.metrics["m0"] == pytest.approx(
                int(run.params["worker"]) + (STEPS - 1) / STEPS
            )
            for a in store.list_artifacts(run.id):
                assert store.read_artifact(a.id), f"artifact {a.id} of {run.name} is unreadable"
        tmp_dir = os.path.join(store.blobs._root_path, "tmp")
        assert not os.path.exists(tmp_dir) or os.listdir(tmp_dir) == [], (
            "temporary upload files left behind"
        )
