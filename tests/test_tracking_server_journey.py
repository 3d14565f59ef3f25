"""The served path works like the store: the chapter's journey through `TrackingClient`, over a real socket.

The same calls made through the server and directly give the same records; artifacts
stream both ways in several chunks; tokens are stored hashed; a retention policy or gc
cannot point the server at storage of the caller's choosing; `mlinfra-lab track serve`
starts, prints its URL and answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.tracking import (
    Level,
    PermissionDenied,
    QueryError,
    RetentionPolicy,
    RetentionRule,
    TrackingError,
    TrackingStore,
    connect,
)
from mlinfra_lab.tracking.artifacts import CHUNK
from mlinfra_lab.tracking.server import TrackingClient, create_token, running_server
from mlinfra_lab.tracking.testing import available_backends, fresh_store, row_count

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]


@pytest.fixture(params=BACKENDS)
def served(request, tmp_path):
    with fresh_store(request.param, tmp_path, default_user="alice") as store:
        alice, bob = (create_token(store.engine, u, by="alice") for u in ("alice", "bob"))
        with running_server(store, cold_root=f"file://{tmp_path / 'cold'}") as url:
            yield store, url, alice.secret, bob.secret, tmp_path


def test_the_chapters_journey_through_the_server_matches_the_store(served):
    store, url, alice_token, bob_token, tmp_path = served
    big = os.urandom(3 * CHUNK + 12345)  # several chunks each way
    (tmp_path / "ckpt.bin").write_bytes(big)
    with TrackingClient(url, alice_token, batch_size=1000) as alice:
        alice.create_project("pipeline")
        ds = alice.register_dataset("pipeline", "corpus", "v1", "s3://data/corpus/v1")
        with alice.start_run(
            "pipeline",
            name="train",
            params={"lr": 1e-3, "optimizer": "adam"},
            inputs=[ds],
            code_commit="c0ffee",
        ) as run:
            for step in range(1500):
                run.log_metrics({"loss": 1 / (step + 1), "acc": step / 1500})
            run.set_tags({"team": "nlp"})
            run.log_params({"batch_size": 64})
            with open(tmp_path / "ckpt.bin", "rb") as f:
                art = run.log_artifact(f, "ckpt/final.pt", kind="checkpoint", step=1500)
            small = run.log_artifact(b"vocab", "tokenizer.json")
        assert run.flushes == 3 and run.ended, (
            "3000 points: 3 requests of 1000, nothing left for end"
        )
        assert art.sha256 == hashlib.sha256(big).hexdigest() and art.size == len(big)
        got = alice.get_run(run.id)
        assert got == store.get_run(run.id, user="alice"), (
            "the served record differs from the store's"
        )
        assert (
            got.status == "FINISHED"
            and got.tags == {"team": "nlp"}
            and got.params["batch_size"] == "64"
        )
        assert alice.metric_history(run.id, "loss") == store.metric_history(
            run.id, "loss", user="alice"
        )
        assert len(alice.metric_history(run.id, "acc")) == 1500
        q = "metrics.acc > 0.5 and params.optimizer = 'adam'"
        assert (
            alice.search_runs("pipeline", q)
            == store.search_runs("pipeline", q, user="alice")
            == [got]
        )
        assert alice.search_runs(["pipeline"], q, order_by="metrics.acc desc", limit=1) == [got]
        assert alice.explain_search("pipeline", q)
        with pytest.raises(QueryError) as err:
            alice.search_runs("pipeline", "metrics.acc >> 1")
        assert err.value.position == 13 and "^" in str(err.value)
        assert alice.list_artifacts(run.id) == store.list_artifacts(run.id, user="alice")
        assert alice.read_artifact(art.id) == big and alice.read_artifact(small.id) == b"vocab"
        assert alice.lineage(art, "backward") == store.lineage(art, "backward", user="alice")
        assert set(alice.lineage(ds, "forward").nodes) == {ds.node, run.node, art.node, small.node}
        alice.pin_artifact(small.id)
        alice.grant("pipeline", "bob", "VIEW")
        assert alice.level("pipeline", principal="bob") == Level.VIEW
        plan = alice.apply_retention(
            RetentionPolicy(
                (
                    RetentionRule(
                        "checkpoint", keep_all_days=0, keep_last_runs=0, delete_after_days=1
                    ),
                )
            ),
            now=time.time() + 10 * 86400,
        )
        assert plan.deletes == [art.id] and not plan.applied, (
            "a dry run: the final checkpoint is past 1 day"
        )
        assert alice.count("runs") == 1 and alice.gc(dry_run=True).dry_run
        assert [r["action"] for r in alice.audit_log("pipeline", limit=2)][0] == "grant VIEW"
    with TrackingClient(url, bob_token) as bob:
        assert bob.list_artifacts(run.id)[0].uri is None, "VIEW does not reveal blob URIs"
        with pytest.raises(PermissionDenied, match="READ_ARTIFACTS"):
            bob.read_artifact(art.id)
        assert bob.search_runs(None) == [got]


def test_connect_switches_by_url_and_the_cli_goes_through_the_server(served, capsys):
    store, url, alice_token, _, tmp_path = served
    store.start_run("proj", name="r0").end()
    with connect(url, alice_token) as client:
        assert isinstance(client, TrackingClient) and client.default_user == "alice"
        assert [r.name for r in client.search_runs("proj")] == ["r0"]
    with connect(
        store.db_url, artifact_root=str(tmp_path / "artifacts"), default_user="alice"
    ) as direct:
        assert isinstance(direct, TrackingStore) and [
            r.name for r in direct.search_runs("proj")
        ] == ["r0"]
    assert (
        main(["track", "runs", "search", "proj", "--json", "--server", url, "--token", alice_token])
        == 0
    )
    assert '"name": "r0"' in capsys.readouterr().out
    with pytest.raises(TrackingError, match="needs a token"):
        TrackingClient(url, "")


def test_tokens_are_stored_hashed_and_storage_locations_stay_the_servers(served):
    store, url, alice_token, _, tmp_path = served
    with store.engine.connect() as conn:
        dump = " ".join(
            str(v) for row in conn.exec_driver_sql("SELECT * FROM api_tokens") for v in row
        )
    assert alice_token not in dump and hashlib.sha256(alice_token.encode()).hexdigest() in dump
    with TrackingClient(url, alice_token) as alice:
        with alice.start_run("p") as run:
            run.log_artifact(b"x", "x.bin", kind="checkpoint")
        elsewhere = RetentionPolicy(
            (RetentionRule("checkpoint", cold_after_days=1),), f"file://{tmp_path / 'mine'}"
        )
        with pytest.raises(TrackingError, match="not this server's cold root"):
            alice.apply_retention(elsewhere, dry_run=False)
        with pytest.raises(TrackingError, match="not this server's cold root"):
            alice.gc(extra_roots=["file:///"])
        ok = RetentionPolicy(
            (RetentionRule("checkpoint", cold_after_days=1),), f"file://{tmp_path / 'cold'}"
        )
        assert alice.apply_retention(ok, now=time.time() + 5 * 86400).summary()["move_cold"] == 0, (
            "kept: recent run"
        )
    assert row_count(store, "artifacts") == 1


def test_track_serve_prints_its_url_and_serves(tmp_path):
    db, art = f"sqlite:///{tmp_path / 't.db'}", str(tmp_path / "art")
    with TrackingStore(db, art, default_user="admin") as store:
        token = create_token(store.engine, "carol", by="admin").secret
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlinfra_lab.cli",
            "track",
            "serve",
            "--db",
            db,
            "--artifacts",
            art,
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving on http://127.0.0.1:"), (
            line,
            proc.stderr.read() if proc.poll() else "",
        )
        with TrackingClient(line.split()[-1], token) as carol:
            assert carol.user == "carol"
            carol.start_run("carols").end()
            assert [r.project for r in carol.search_runs(None)] == ["carols"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bench_measures_the_served_path_and_says_why_mlflows_server_is_missing(tmp_path, capsys):
    from mlinfra_lab.tracking.server import bench as served

    if served.mlflow_server_command() is not None:
        pytest.skip("MLflow is installed here: the skip path cannot be seen")
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "bench",
                "tracking",
                "--scale",
                "0.0002",
                "--server-scale",
                "0.0002",
                "--repeats",
                "2",
                "--workdir",
                str(tmp_path),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert served.why_no_mlflow_server in printed and "served: " in printed
    res = json.loads(out.read_text())
    s = res["systems"]["served"]
    assert (
        s["log"]["points"] == 10 * 1000
        and s["create"]["runs"] == 20
        and s["search"]["db_runs"] == 20
    )
    assert "mlflow_server" not in res["systems"] and served.why_no_mlflow_server in res["notes"]
    assert "served_p99_search_under_50ms" in res["targets"]
