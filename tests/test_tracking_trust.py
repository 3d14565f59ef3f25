"""Every write checked where it happens: forged handles, revoked runs, squatted names, id oracles.

Each test attacks one defence of issue 15 (item 2) on SQLite and PostgreSQL, and checks that
an honest user's run in the same database is left exactly as it was.
"""

from __future__ import annotations

import pytest

from mlinfra_lab.tracking import Level, NotFound, PermissionDenied, TrackingError
from mlinfra_lab.tracking.errors import NotFoundOrDenied
from mlinfra_lab.tracking.run import Run
from mlinfra_lab.tracking.testing import available_backends, fresh_store, row_count

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]


@pytest.fixture(params=BACKENDS)
def world(request, tmp_path):
    """alice (the store's first user) owns 'secret' with an honest run; mallory owns 'mine'."""
    with fresh_store(request.param, tmp_path, default_user="alice") as store:
        honest = store.start_run("secret", name="honest", params={"lr": 0.1}, tags={"team": "nlp"})
        honest.log_metrics({"acc": 0.9}, step=5)
        art = honest.log_artifact(b"honest weights", "ckpt.pt", kind="checkpoint")
        honest.end()
        store.start_run("mine", name="mallorys", user="mallory").end()
        yield store, honest, art


def _snapshot(store, run_id):
    info = store.get_run(run_id, user="alice")
    arts = [(a.name, a.sha256) for a in store.list_artifacts(run_id, user="alice")]
    return info, arts, store.metric_history(run_id, "acc", user="alice")


def _denials(store, project, who):
    return [
        r
        for r in store.audit_log(project, limit=1000, user="alice")
        if r["principal"] == who and not r["allowed"]
    ]


def test_a_forged_run_handle_cannot_write_into_another_projects_run(world):
    store, honest, _ = world
    before, blobs = _snapshot(store, honest.id), store.blobs.list_blobs()
    # mallory is ADMIN of 'mine', not 'secret'
    forged = Run(store, honest.id, "mine", "forged", "mallory")
    forged.log_metrics({"acc": 0.0}, step=99)
    for write in (
        forged.flush,
        lambda: forged.log_params({"lr": 9}),
        lambda: forged.set_tags({"team": "evil"}),
        lambda: forged.end("KILLED"),
        lambda: forged.log_artifact(b"evil", "evil.pt"),
    ):
        with pytest.raises(NotFoundOrDenied) as err:
            write()
        assert "secret" not in str(err.value), "the refusal must not name the run's project"
    assert _snapshot(store, honest.id) == before, "the honest run changed"
    assert store.blobs.list_blobs() == blobs, "a refused artifact must not even be uploaded"
    assert len(_denials(store, "secret", "mallory")) == 5, (
        "each refused write is audited under its real project"
    )


def test_an_open_run_stops_writing_when_write_is_revoked(world):
    store, honest, _ = world
    before = _snapshot(store, honest.id)
    store.grant("secret", "bob", "WRITE")
    run = store.start_run("secret", name="bobs", user="bob")
    run.log_metrics({"loss": 1.0}, step=0)
    run.flush()
    store.grant("secret", "bob", "VIEW")  # revoked while the run is open
    run.log_metrics({"loss": 0.5}, step=1)
    for write in (
        run.flush,
        lambda: run.log_params({"lr": 1}),
        lambda: run.set_tags({"x": "y"}),
        lambda: run.end(),
        lambda: run.log_artifact(b"late", "late.pt"),
    ):
        with pytest.raises(PermissionDenied) as err:
            write()
        assert err.value.needed == "WRITE" and err.value.scope == "project:secret"
    info = store.get_run(run.id, user="alice")
    assert info.status == "RUNNING" and info.params == {} and info.tags == {}
    assert store.metric_history(run.id, "loss", user="alice") == [(0, 1.0)], (
        "only the point before the revoke"
    )
    assert store.list_artifacts(run.id, user="alice") == []
    assert _snapshot(store, honest.id) == before


def test_no_team_can_squat_a_name_and_only_store_admins_manage_teams(world):
    store, honest, art = world
    before = _snapshot(store, honest.id)
    # a future user's name; a new team
    for team, member in (("bob", "mallory"), ("ml-platform", "mallory")):
        with pytest.raises(PermissionDenied) as err:
            store.add_to_team(team, member, user="mallory")
        assert err.value.scope == f"team:{team}"
    store.add_to_team("ml-platform", "erin")  # alice, the store's first user, is a store ADMIN
    with pytest.raises(PermissionDenied):
        store.add_to_team("ml-platform", "mallory", user="erin")  # members cannot add members
    store.grant("secret", "bob", "VIEW")  # bob is unknown: registered as a user, never a team
    assert (
        store.level("secret", user="bob") == Level.VIEW
        and store.level("secret", user="mallory") == Level.NONE
    )
    with pytest.raises(TrackingError, match="is a user"):
        # not even a store ADMIN can turn a user's name into a team
        store.add_to_team("bob", "mallory")
    with pytest.raises(TrackingError, match="is a team"):
        store.grant("secret", "ml-platform", "VIEW", kind="user")
    with pytest.raises(TrackingError, match="is a user"):
        store.grant("secret", "bob", "VIEW", kind="team")
    with pytest.raises(NotFound):
        store.grant("secret", "no-such-team", "VIEW", kind="team")
    with pytest.raises(TrackingError, match="is a team"):
        store.add_to_team("ml-platform", "ml-platform")  # a team is not a member
    store.grant("secret", "ml-platform", "READ_ARTIFACTS", kind="team")
    assert store.read_artifact(art.id, user="erin") == b"honest weights"
    store.start_run("bobs-own", user="bob").end()  # the real user can still act under their name
    assert row_count(store, "team_members") == 1, "only erin joined a team"
    assert _snapshot(store, honest.id) == before


def test_ids_you_cannot_see_get_one_answer_whether_they_exist_or_not(world):
    store, honest, art = world
    missing_run, missing_art = 10**6, 10**6 + 1

    def answer(call, real_id, missing_id):
        out = []
        for i in (real_id, missing_id):
            with pytest.raises(NotFoundOrDenied) as err:
                call(i)
            out.append((type(err.value), str(err.value).replace(str(i), "ID")))
        assert out[0] == out[1], f"existing and missing ids are told apart: {out}"
        assert "secret" not in out[0][1]

    m = "mallory"
    answer(lambda i: store.get_run(i, user=m), honest.id, missing_run)
    answer(lambda i: store.metric_history(i, "acc", user=m), honest.id, missing_run)
    answer(lambda i: store.list_artifacts(i, user=m), honest.id, missing_run)
    answer(lambda i: store.open_artifact(i, user=m), art.id, missing_art)
    answer(lambda i: store.pin_artifact(i, user=m), art.id, missing_art)
    answer(lambda i: store.lineage(f"run:{i}", user=m), honest.id, missing_run)
    answer(lambda i: store.start_run("mine", inputs=[f"artifact:{i}"], user=m), art.id, missing_art)
    assert all(isinstance(e, NotFound) for e in [NotFoundOrDenied("u", "run:1", "x")]), (
        "callers catching NotFound"
    )
    assert len(_denials(store, "secret", m)) == 7, (
        "probes of existing ids are audited under their project"
    )


def test_level_of_others_and_counts_need_a_grant_and_denials_fit_the_audit_log(world):
    store, honest, _ = world
    before = _snapshot(store, honest.id)
    audited = row_count(store, "audit_log")
    assert store.level("secret", user="mallory") == Level.NONE, "your own level needs no grant"
    assert row_count(store, "audit_log") == audited, "asking for your own level tries nothing"
    with pytest.raises(PermissionDenied):
        store.level("secret", principal="alice", user="mallory")
    assert store.level("secret", principal="mallory") == Level.NONE  # alice is ADMIN of 'secret'
    with pytest.raises(PermissionDenied) as err:
        store.count("runs", user="mallory")
    assert err.value.scope == "store"
    with pytest.raises(PermissionDenied):
        store.gc(user="mallory")
    assert store.count("runs") == 2
    store.set_store_admin("mallory")
    assert store.count("runs", user="mallory") == 2
    store.set_store_admin("mallory", False)
    long_name = "m" * 300  # legal input; wider than the audit column
    with pytest.raises(NotFoundOrDenied):
        store.get_run(honest.id, user=long_name)
    with pytest.raises(PermissionDenied):
        store.count("runs", user=long_name)
    rows = _denials(store, "secret", long_name[:200])
    assert [(r["project"], r["target"]) for r in rows] == [("secret", f"run:{honest.id}")]
    store_rows = [r for r in store.audit_log(None, limit=1000) if not r["allowed"]]
    assert {r["target"] for r in store_rows} == {"store"} and len(store_rows) == 3, (
        "count, gc, count: scope 'store'"
    )
    assert _snapshot(store, honest.id) == before
