"""Several processes using something for the first time at the same moment: one creates it.

The first `TrackingStore` on an empty database runs the Alembic migrations. When several
processes open it at once, the upgrade must run once and the others must wait for it and
then see the finished schema (`db.migrate` serialises it: BEGIN IMMEDIATE on SQLite, an
advisory lock on PostgreSQL). Each process then logs a run, which needs every table.
Likewise the first runs of a new project by a new user, started at once: one process
creates the project and the principal, the others use them (INSERT ... ON CONFLICT DO
NOTHING, then read back), and nobody fails on the unique index.
"""

from __future__ import annotations

import pytest

from mlinfra_lab.tracking.testing import (
    available_backends,
    fresh_db_url,
    fresh_store,
    row_count,
    run_together,
)

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]
OPENERS = 4


def _open_and_log(db_url: str, artifact_root: str, worker: int, barrier) -> None:
    from mlinfra_lab.tracking import TrackingStore

    barrier.wait()  # every process opens the empty database at the same moment
    with TrackingStore(db_url, artifact_root, default_user=f"user{worker}") as store:
        run = store.start_run(f"project{worker}", params={"lr": 1e-3, "worker": worker})
        run.log_metrics({"loss": 1.0 / (worker + 1)}, step=0)
        run.log_artifact(f"weights of {worker}".encode(), "model.pt", "checkpoint")
        run.end()


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_first_open_migrates_once_and_every_opener_can_log(backend, tmp_path):
    from mlinfra_lab.tracking import TrackingStore
    from mlinfra_lab.tracking.db import current_revision, head_revision

    with fresh_db_url(backend, tmp_path) as url:
        codes = run_together(_open_and_log, OPENERS, url, str(tmp_path / "artifacts"))
        assert codes == [0] * OPENERS, (
            f"an opener failed on the fresh database (exit codes {codes}; see stderr)"
        )
        with TrackingStore(
            url, str(tmp_path / "artifacts"), default_user="user0", migrate_schema=False
        ) as store:
            assert current_revision(store.engine) == head_revision(), (
                "the schema is not at the newest revision"
            )
            assert row_count(store, "runs") == OPENERS and row_count(store, "metrics") == OPENERS
            assert (
                row_count(store, "artifacts") == OPENERS and row_count(store, "projects") == OPENERS
            )


def _first_run_of_shared_project(db_url: str, artifact_root: str, worker: int, barrier) -> None:
    from mlinfra_lab.tracking import TrackingStore

    with TrackingStore(
        db_url, artifact_root, default_user="newcomer", migrate_schema=False
    ) as store:
        barrier.wait()  # all four see no project "shared" and no principal "newcomer" yet
        store.start_run("shared", name=f"w{worker}", params={"worker": worker}).end()


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_first_runs_of_a_new_project_by_a_new_user_all_succeed(backend, tmp_path):
    from mlinfra_lab.tracking import Level

    with fresh_store(backend, tmp_path) as store:
        codes = run_together(
            _first_run_of_shared_project, OPENERS, store.db_url, store.artifact_root
        )
        assert codes == [0] * OPENERS, (
            f"a first run of the new project failed (exit codes {codes}; see stderr)"
        )
        assert row_count(store, "projects") == 1 and row_count(store, "runs") == OPENERS
        assert row_count(store, "principals") == 1, (
            "the new user must be one principal, created once"
        )
        assert row_count(store, "grants") == 1, "exactly one process (the creator) grants ADMIN"
        assert store.level("shared", user="newcomer") == Level.ADMIN
