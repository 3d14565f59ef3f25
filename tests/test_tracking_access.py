"""Access control on every path: VIEW vs READ_ARTIFACTS, no grant, teams, search, lineage."""

from __future__ import annotations

import pytest

from mlinfra_lab.tracking import Level, NotFound, PermissionDenied
from mlinfra_lab.tracking.testing import available_backends, fresh_store

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]


@pytest.fixture(params=BACKENDS)
def world(request, tmp_path):
    """Project 'secret' owned by alice: a dataset, a run, a checkpoint; bob and carol get grants."""
    with fresh_store(request.param, tmp_path, default_user="alice") as store:
        store.create_project("secret")
        ds = store.register_dataset("secret", "corpus", "v1", "s3://bucket/corpus-v1")
        run = store.start_run(
            "secret",
            name="train",
            params={"lr": 0.1},
            tags={"team": "nlp"},
            code_commit="c0ffee",
            inputs=[ds],
        )
        run.log_metrics({"acc": 0.9})
        art = run.log_artifact(b"checkpoint bytes", "ckpt.pt", kind="checkpoint")
        run.end()
        store.grant("secret", "bob", "VIEW")
        yield store, ds, run, art


def test_view_sees_runs_and_metrics_but_cannot_download(world):
    store, ds, run, art = world
    assert store.get_run(run.id, user="bob").metrics == {"acc": 0.9}
    assert [r.name for r in store.search_runs("secret", "metrics.acc > 0.5", user="bob")] == [
        "train"
    ]
    listed = store.list_artifacts(run.id, user="bob")
    assert [a.name for a in listed] == ["ckpt.pt"] and listed[0].uri is None, (
        "VIEW must not reveal blob URIs"
    )
    with pytest.raises(PermissionDenied, match="READ_ARTIFACTS") as err:
        store.open_artifact(art.id, user="bob")
    assert err.value.needed == "READ_ARTIFACTS" and err.value.principal == "bob"
    store.grant("secret", "bob", Level.READ_ARTIFACTS)
    assert store.read_artifact(art.id, user="bob") == b"checkpoint bytes"
    with pytest.raises(PermissionDenied, match="WRITE"):
        store.start_run("secret", user="bob")


def test_no_grant_sees_nothing_through_any_path(world):
    store, ds, run, art = world
    mallory = "mallory"
    for call in (
        lambda: store.get_run(run.id, user=mallory),
        lambda: store.search_runs("secret", None, user=mallory),
        lambda: store.search_runs("secret", "tags.team = 'nlp'", user=mallory),
        lambda: store.metric_history(run.id, "acc", user=mallory),
        lambda: store.list_artifacts(run.id, user=mallory),
        lambda: store.open_artifact(art.id, user=mallory),
        lambda: store.lineage(ds, "forward", user=mallory),
        lambda: store.lineage(art, "backward", user=mallory),
        lambda: store.start_run("secret", user=mallory),
        lambda: store.grant("secret", mallory, "ADMIN", user=mallory),
        lambda: store.register_dataset("secret", "x", "1", "s3://x", user=mallory),
        lambda: store.pin_artifact(art.id, user=mallory),
    ):
        with pytest.raises(PermissionDenied):
            call()
    assert store.search_runs(None, None, user=mallory) == [], (
        "cross-project search lists only visible projects"
    )
    assert store.search_runs(None, "tags.team = 'nlp'", user=mallory) == []
    plan = store.apply_retention(_delete_all_policy(), user=mallory)
    assert plan.actions == (), "retention only plans over projects you ADMIN"
    with pytest.raises(PermissionDenied):
        store.gc(user=mallory)
    log = store.audit_log("secret")
    assert any(r["principal"] == mallory and not r["allowed"] for r in log), "denials are audited"


def test_unknown_project_reports_missing_grant_not_existence(world):
    store, *_ = world
    with pytest.raises(PermissionDenied) as a:
        store.search_runs("secret", user="mallory")
    with pytest.raises(PermissionDenied) as b:
        store.search_runs("no-such-project", user="mallory")
    assert type(a.value) is type(b.value)


def test_lineage_hides_nodes_of_projects_you_cannot_view(world):
    store, ds, run, art = world
    # carol owns 'public' and fine-tunes from alice's checkpoint after alice lets her see it
    store.grant("secret", "carol", "READ_ARTIFACTS")
    ft = store.start_run("public", name="finetune", inputs=[art], user="carol")
    out = ft.log_artifact(b"finetuned", "ft.pt", kind="model")
    ft.end()
    full = store.lineage(out, "backward", user="carol")
    assert {ds.node, run.node, art.node, "code:c0ffee"} <= set(full.nodes)
    store.grant("public", "dave", "VIEW", user="carol")  # dave sees 'public' only
    seen = store.lineage(out, "backward", user="dave")
    assert set(seen.nodes) == {out.node, ft.node}, "nodes of 'secret' must stay hidden"
    assert all(s in seen.nodes and d in seen.nodes for s, d, _ in seen.edges)
    fwd = store.lineage(ds, "forward", user="alice")
    assert {run.node, art.node} <= set(fwd.nodes) and ft.node not in fwd.nodes, (
        "alice cannot view 'public'"
    )
    assert set(store.lineage(ds, "forward", depth=1, user="alice").nodes) == {ds.node, run.node}


def test_teams_grant_through_membership(world):
    store, ds, run, art = world
    store.add_to_team("ml-platform", "erin", user="alice")
    store.grant("secret", "ml-platform", "READ_ARTIFACTS")
    assert store.level("secret", user="erin") == Level.READ_ARTIFACTS
    assert store.read_artifact(art.id, user="erin") == b"checkpoint bytes"
    with pytest.raises(PermissionDenied):
        store.add_to_team("ml-platform", "mallory", user="mallory")  # not a member: cannot join
    store.grant("secret", "ml-platform", "NONE")
    with pytest.raises(PermissionDenied):
        store.read_artifact(art.id, user="erin")


def test_missing_artifact_is_not_found(world):
    store, *_ = world
    with pytest.raises(NotFound):
        store.open_artifact(999, user="alice")


def _delete_all_policy():
    from mlinfra_lab.tracking import RetentionPolicy, RetentionRule

    return RetentionPolicy(
        (RetentionRule(kind="checkpoint", keep_all_days=0, keep_last_runs=0, keep_final=False),)
    )
