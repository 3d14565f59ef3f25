"""Retention: dry run changes nothing, apply does exactly the plan, pins survive, GC is safe."""

from __future__ import annotations

import pytest

from mlinfra_lab.tracking import RetentionPolicy, RetentionRule, plan_retention
from mlinfra_lab.tracking.retention import ArtifactRecord
from mlinfra_lab.tracking.testing import available_backends, fresh_store

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]
DAY = 86400.0
NOW = 1_800_000_000.0


def _rec(id, run_id, age_days, step, kind="checkpoint", project="p", pinned=False, tier="hot"):
    t = NOW - age_days * DAY
    return ArtifactRecord(id, project, run_id, t, kind, step, t, 100, tier, pinned)


def test_plan_semantics_keep_recent_final_pinned_cold_delete():
    arts = [
        _rec(1, 1, 200, 1),
        _rec(2, 1, 200, 2),  # old run: keep final (2), older than 90 d -> cold
        _rec(3, 2, 50, 1),
        _rec(4, 2, 50, 2, pinned=True),
        _rec(5, 2, 50, 3),  # old: 3 final; 4 pinned
        _rec(6, 3, 5, 1),
        _rec(7, 3, 5, 2),  # recent run: keep everything
        _rec(8, 4, 400, 1),  # final, older than a year: deleted
        _rec(9, 4, 400, 0, kind="plot"),  # no rule for plots: kept
    ]
    policy = RetentionPolicy(
        (
            RetentionRule(
                "checkpoint",
                keep_all_days=30,
                keep_last_runs=1,
                cold_after_days=90,
                delete_after_days=365,
            ),
        ),
        cold_root="memory://cold",
    )
    plan = plan_retention(policy, arts, NOW)
    assert sorted(plan.deletes) == [1, 3, 8]
    assert plan.moves == [2]
    assert plan.kept == 5  # 4 (pinned), 5 (final, 50 d), 6, 7 (recent), 9 (no rule)


def test_project_rule_wins_and_keep_last_runs_counts_runs():
    arts = [
        _rec(i, i, 100 + i, 1, project=proj) for i, proj in enumerate(["a", "a", "a", "b", "b"], 1)
    ]
    arts += [_rec(10 + i, i, 100 + i, 0, project=a.project) for i, a in enumerate(arts, 1)]
    policy = RetentionPolicy(
        (
            RetentionRule("checkpoint", keep_all_days=0, keep_last_runs=0),
            RetentionRule("checkpoint", project="b", keep_all_days=0, keep_last_runs=5),
        )
    )
    plan = plan_retention(policy, arts, NOW)
    assert {a.project for a in plan.actions} == {"a"}, "project b keeps its 5 newest runs"
    assert sorted(plan.deletes) == [11, 12, 13], "project a keeps each run's final checkpoint only"


def test_policy_validation():
    with pytest.raises(ValueError, match="cold_root"):
        RetentionPolicy((RetentionRule(cold_after_days=10),))
    with pytest.raises(ValueError, match="larger"):
        RetentionRule(cold_after_days=100, delete_after_days=50)


@pytest.fixture(params=BACKENDS)
def aged(request, tmp_path):
    """Six runs of one project over 200 days, three checkpoints each, one pinned, one shared blob."""
    with fresh_store(request.param, tmp_path) as store:
        ids = {}
        for r, age in enumerate([200, 150, 100, 60, 10, 1]):
            run = store.start_run("p", name=f"r{r}", start_time=NOW - age * DAY)
            for step in range(3):
                a = run.log_artifact(
                    f"run{r} step{step}".encode(), f"ckpt/{step}.pt", "checkpoint", step=step
                )
                ids[(r, step)] = a.id
            run.log_artifact(b"shared tokenizer", "tokenizer.json", "other")
            run.end()
        store.pin_artifact(ids[(0, 0)])
        yield store, ids, tmp_path


def _state(store):
    from sqlalchemy import select

    from mlinfra_lab.tracking import schema as S

    with store.engine.connect() as conn:
        rows = conn.execute(select(S.artifacts.c.id, S.artifacts.c.uri, S.artifacts.c.tier)).all()
    return sorted(map(tuple, rows)), sorted(u for u, _ in store.blobs.list_blobs())


def test_dry_run_changes_nothing_and_apply_does_exactly_the_plan(aged):
    store, ids, tmp = aged
    policy = RetentionPolicy(
        (RetentionRule("checkpoint", keep_all_days=30, keep_last_runs=1, cold_after_days=90),),
        cold_root=str(tmp / "cold"),
    )
    before = _state(store)
    plan = store.apply_retention(policy, now=NOW, dry_run=True)
    assert _state(store) == before, "a dry run must not change rows or blobs"
    assert plan.deletes and plan.moves
    assert ids[(0, 0)] not in plan.deletes + plan.moves, "pinned artifacts are never touched"
    applied = store.apply_retention(policy, now=NOW, dry_run=False)
    assert applied.actions == plan.actions and applied.applied and not applied.notes
    rows, _ = _state(store)
    remaining = {r[0] for r in rows}
    before_ids = {r[0] for r in before[0]}
    assert before_ids - remaining == set(plan.deletes), "apply deletes exactly what the plan listed"
    assert {r[0] for r in rows if r[2] == "cold"} == set(plan.moves)
    assert all(store.read_artifact(i) for i in plan.moves), (
        "moved artifacts still read, from the cold root"
    )
    assert store.read_artifact(ids[(0, 0)]) == b"run0 step0"


def test_gc_deletes_only_unreferenced_blobs(aged):
    store, ids, tmp = aged
    policy = RetentionPolicy(
        (RetentionRule("checkpoint", keep_all_days=0, keep_last_runs=0, keep_final=False),)
    )
    plan = store.apply_retention(policy, now=NOW, dry_run=False)
    assert len(plan.deletes) == 17  # 18 checkpoints, one pinned
    orphan = store.blobs.put(b"crashed before its row was written")  # an upload in flight
    young = store.gc(grace_seconds=3600)
    assert orphan.uri not in young.deleted, "blobs younger than the grace period are kept"
    report = store.gc(grace_seconds=0)
    assert len(report.deleted) == 18 and report.bytes_freed > 0
    rows, blobs = _state(store)
    referenced = {r[1] for r in rows}
    assert referenced <= set(blobs), "GC must never delete a referenced blob"
    assert set(blobs) == referenced
    for aid, _, _ in rows:
        assert store.read_artifact(aid)
    assert store.gc(grace_seconds=0).deleted == ()


@pytest.mark.parametrize("backend", BACKENDS)
def test_lineage_outlives_retention_through_tombstones(backend, tmp_path):
    from mlinfra_lab.tracking import NotFoundOrDenied

    with fresh_store(backend, tmp_path, default_user="alice") as store:
        store.create_project("lab")
        ds = store.register_dataset("lab", "corpus", "v1", "s3://c/v1")
        pre = store.start_run("lab", name="pretrain", inputs=[ds], start_time=NOW - 400 * DAY)
        ckpt = pre.log_artifact(b"pretrained", "ckpt.pt", kind="checkpoint", step=1)
        pre.end()
        ft = store.start_run("lab", name="finetune", inputs=[ckpt], start_time=NOW - 300 * DAY)
        model = ft.log_artifact(b"finetuned", "model.pt", kind="model")
        ft.end()
        # another project: retention must not touch it
        bobs = store.start_run("bobs", name="honest", user="bob")
        bobs_ckpt = bobs.log_artifact(b"bob's", "ckpt.pt", kind="checkpoint", step=1)
        bobs.end()
        before_bob = store.lineage(bobs_ckpt, "backward", user="bob")
        policy = RetentionPolicy(
            (RetentionRule("checkpoint", keep_all_days=0, keep_last_runs=0, keep_final=False),)
        )
        plan = store.apply_retention(policy, now=NOW, dry_run=False)
        assert plan.deletes == [ckpt.id]
        assert store.gc(grace_seconds=0).deleted == (ckpt.uri,), (
            "alice, the store's first user, frees its bytes"
        )
        back = store.lineage(model, "backward")
        assert {ft.node, ckpt.node, pre.node, ds.node} <= set(back.nodes), (
            "the run still shows what it consumed"
        )
        assert (ckpt.node, ft.node, "consumed") in back.edges and (
            pre.node,
            ckpt.node,
            "produced",
        ) in back.edges
        assert (
            back.deleted[ckpt.node].startswith("deleted by retention")
            and "deleted" in back.nodes[ckpt.node]
        )
        assert set(back.deleted) == {ckpt.node}, "only the deleted artifact is marked"
        fwd = store.lineage(ckpt.node, "forward")  # the tombstone itself is a starting point
        assert ft.node in fwd.nodes and model.node in fwd.nodes
        with pytest.raises(NotFoundOrDenied):
            store.start_run("lab", inputs=[ckpt.node])  # a deleted artifact is no input any more
        with pytest.raises(NotFoundOrDenied):
            # tombstones are as private as the rows
            store.lineage(ckpt.node, "forward", user="mallory")
        assert store.lineage(bobs_ckpt, "backward", user="bob") == before_bob
        assert store.read_artifact(bobs_ckpt.id, user="bob") == b"bob's"
