"""Writers that collide: 8 processes on the same keys of one run, and a commit that fails.

On PostgreSQL, concurrent upserts of the same rows in different orders deadlock, and a
deadlock (or serialization failure) aborts one transaction; the store must order its
upserts, retry what the database aborted, keep buffered points until a commit succeeds, and
never hand a caller a raw driver error carrying SQL. Both backends run both tests.
"""

from __future__ import annotations

import random

import pytest
from sqlalchemy import text

from mlinfra_lab.tracking import TrackingError
from mlinfra_lab.tracking.testing import available_backends, fresh_store, row_count, run_together

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]
WRITERS, KEYS, STEPS = 8, 20, 10


def _value(step: int, key: int) -> float:
    return step * 1000.0 + key


def _same_keys_writer(db_url: str, artifact_root: str, run_id: int, worker: int, barrier) -> None:
    from mlinfra_lab.tracking import TrackingStore
    from mlinfra_lab.tracking.run import Run

    store = TrackingStore(db_url, artifact_root, default_user="owner", migrate_schema=False)
    # 5 batches per writer
    run = Run(store, run_id, "shared", "contended", "owner", batch_size=2 * KEYS)
    keys = list(range(KEYS))
    rng = random.Random(worker)  # each writer sends the keys in its own order: the deadlock recipe
    barrier.wait()
    for s in range(STEPS):
        rng.shuffle(keys)
        step = s * WRITERS + worker  # the writers interleave in steps
        run.log_metrics({f"k{k:02d}": _value(step, k) for k in keys}, step=step)
    run.flush()
    store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_writers_on_the_same_keys_of_one_run_lose_nothing(backend, tmp_path):
    with fresh_store(backend, tmp_path) as store:
        honest = store.start_run("shared", name="honest")
        honest.log_metrics({"k00": 1.0}, step=0)
        honest.end()
        run = store.start_run("shared", name="contended")
        codes = run_together(_same_keys_writer, WRITERS, store.db_url, store.artifact_root, run.id)
        assert codes == [0] * WRITERS, (
            "a writer failed (a deadlock or raw database error reached it; see stderr)"
        )
        assert row_count(store, "metrics") == WRITERS * KEYS * STEPS + 1, "metric points were lost"
        last = (STEPS - 1) * WRITERS + WRITERS - 1
        assert store.get_run(run.id).metrics == {f"k{k:02d}": _value(last, k) for k in range(KEYS)}
        assert len(store.metric_history(run.id, "k07")) == WRITERS * STEPS
        assert store.get_run(honest.id).metrics == {"k00": 1.0}, "the honest run changed"


def _inject_failure(store, backend: str) -> None:
    """A real database fault: a trigger that fails every metric write while table `fault` has a row.

    On PostgreSQL it is a deferred constraint trigger, so the failure comes at COMMIT, after
    every statement of the flush succeeded; SQLite has no deferred triggers, so there it
    fails the second statement of the transaction (the latest-value upsert).
    """
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE fault (x INTEGER)"))
        conn.execute(text("INSERT INTO fault VALUES (1)"))
        if backend == "postgres":
            conn.execute(
                text(
                    "CREATE FUNCTION fail_if_fault() RETURNS trigger AS $$ BEGIN "
                    "IF EXISTS (SELECT 1 FROM fault) THEN RAISE EXCEPTION 'injected fault'; END IF; "
                    "RETURN NULL; END $$ LANGUAGE plpgsql"
                )
            )
            conn.execute(
                text(
                    "CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON metrics "
                    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_if_fault()"
                )
            )
        else:
            conn.execute(
                text(
                    "CREATE TRIGGER fail_upsert BEFORE INSERT ON latest_metrics "
                    "WHEN EXISTS (SELECT 1 FROM fault) BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
                )
            )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_commit_keeps_the_buffered_points_and_says_no_sql(backend, tmp_path):
    with fresh_store(backend, tmp_path) as store:
        run = store.start_run("p", name="r")
        for step in range(30):
            run.log_metrics({"loss": 1.0 / (step + 1), "acc": step / 30}, step=step)
        _inject_failure(store, backend)
        with pytest.raises(TrackingError) as err:
            run.flush()
        message = str(err.value)
        assert (
            "INSERT" not in message.upper() and "injected" not in message and "0.5" not in message
        ), message
        assert err.value.__cause__ is None and err.value.__suppress_context__, (
            "the raw driver error is not chained"
        )
        assert row_count(store, "metrics") == 0
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM fault"))
        assert run.flush() == 60, "the points buffered before the failure are all still there"
        run.end()
        assert row_count(store, "metrics") == 60 and store.get_run(run.id).metrics == {
            "loss": 1 / 30,
            "acc": 29 / 30,
        }


@pytest.mark.parametrize("backend", BACKENDS)
def test_transactions_the_database_aborts_are_retried_and_others_are_wrapped(backend, tmp_path):
    from mlinfra_lab.tracking.db import RETRIES, transact
    from mlinfra_lab.tracking.errors import DatabaseError

    with fresh_store(backend, tmp_path) as store:
        honest = store.start_run("p", name="honest", params={"lr": 0.1})
        calls = []

        def abort_first(conn):  # the database itself aborts the first attempt, as a deadlock victim
            calls.append(1)
            conn.execute(
                text("INSERT INTO tags (run_id, key, value) VALUES (:r, 'try', :n)"),
                {"r": honest.id, "n": str(len(calls))},
            )
            if len(calls) == 1:
                conn.execute(
                    text(
                        "DO $$ BEGIN RAISE EXCEPTION 'victim' USING ERRCODE = 'deadlock_detected'; END $$"
                    )
                    if backend == "postgres"
                    else text("SELECT * FROM no_such_table")
                )
            return len(calls)

        if backend == "postgres":
            assert transact(store.engine, abort_first, "testing") == 2, (
                "a deadlock victim is run again"
            )
            assert store.get_run(honest.id).tags == {"try": "2"}, "the aborted attempt left nothing"

            def always(conn):
                calls.append(1)
                conn.execute(
                    text(
                        "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = 'serialization_failure'; END $$"
                    )
                )

            calls.clear()
            with pytest.raises(DatabaseError) as err:
                transact(store.engine, always, "testing")
            assert len(calls) == RETRIES and err.value.sqlstate == "40001", "retries are bounded"
        else:  # SQLite has no deadlock victims: an error is wrapped at once, never retried
            with pytest.raises(DatabaseError, match="OperationalError") as err:
                transact(store.engine, abort_first, "testing")
            assert len(calls) == 1 and "no_such_table" not in str(err.value)
            assert store.get_run(honest.id).tags == {}
        assert store.get_run(honest.id).params == {"lr": "0.1"}
