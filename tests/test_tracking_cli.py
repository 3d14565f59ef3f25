"""The command line (`mlinfra-lab track ...`, `bench tracking`) and the chapter's measurements."""

from __future__ import annotations

import json

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.tracking import RetentionPolicy, RetentionRule, TrackingStore, experiments

pytestmark = pytest.mark.tracking


@pytest.fixture
def db(tmp_path):
    url, art = f"sqlite:///{tmp_path / 't.db'}", str(tmp_path / "art")
    with TrackingStore(url, art, default_user="alice") as store:
        store.create_project("proj")
        ds = store.register_dataset("proj", "corpus", "v1", "s3://c/v1")
        for i, acc in enumerate([0.7, 0.95]):
            run = store.start_run(
                "proj", name=f"r{i}", params={"lr": 0.01}, inputs=[ds], start_time=1e9 + i
            )
            run.log_metrics({"acc": acc})
            run.log_artifact(f"ckpt {i}".encode(), "ckpt.pt", kind="checkpoint", step=1)
            run.end()
    return ["--db", url, "--artifacts", art, "--user", "alice"], ds


def test_runs_search_prints_matches_and_json(db, capsys):
    common, _ = db
    assert main(["track", "runs", "search", "proj", "metrics.acc > 0.9", *common]) == 0
    out = capsys.readouterr().out
    assert "r1" in out and " r0 " not in out and "1 run(s)" in out
    assert main(["track", "runs", "search", "*", "--json", *common]) == 0
    assert {r["name"] for r in json.loads(capsys.readouterr().out)} == {"r0", "r1"}


def test_bad_filter_and_missing_grant_are_one_line_errors(db, capsys):
    common, _ = db
    assert main(["track", "runs", "search", "proj", "metrics.acc >> 1", *common]) == 2
    err = capsys.readouterr().err
    assert "at character 13" in err and err.count("\n") == 1 and "Traceback" not in err
    assert main(["track", "runs", "search", "proj", *common[:-1], "mallory"]) == 2
    assert "needs grant VIEW" in capsys.readouterr().err


def test_grant_lineage_retention_gc(db, capsys):
    common, ds = db
    assert main(["track", "grant", "proj", "bob", "view", *common]) == 0
    assert main(["track", "grant", "proj", "bob", "view", "--kind", "team", *common]) == 2, (
        "bob is a user"
    )
    assert "is a user, not a team" in capsys.readouterr().err
    bob = [*common[:-1], "bob"]
    assert main(["track", "runs", "search", "proj", *bob]) == 0
    capsys.readouterr()
    assert main(["track", "lineage", ds.node, "--json", *common]) == 0
    graph = json.loads(capsys.readouterr().out)
    assert len([n for n in graph["nodes"] if n.startswith("run:")]) == 2
    assert (
        main(
            [
                "track",
                "retention",
                "plan",
                "--keep-days",
                "0",
                "--keep-runs",
                "0",
                "--delete-after",
                "1",
                *common,
            ]
        )
        == 0
    )
    assert "plan (dry run, nothing changed)" in capsys.readouterr().out
    assert (
        main(
            [
                "track",
                "retention",
                "apply",
                "--keep-days",
                "0",
                "--keep-runs",
                "0",
                "--delete-after",
                "1",
                *common,
            ]
        )
        == 0
    )
    assert '"delete": 2' in capsys.readouterr().out
    assert main(["track", "gc", "--grace", "0", *common]) == 0
    assert "deleted 2 unreferenced blob(s)" in capsys.readouterr().out


def test_bench_tracking_quick_run_without_mlflow(tmp_path, capsys):
    out = tmp_path / "results"
    assert (
        main(
            [
                "bench",
                "tracking",
                "--scale",
                "0.0002",
                "--repeats",
                "3",
                "--no-mlflow",
                "--workdir",
                str(tmp_path),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    (path,) = out.glob("cpu-tracking-*.json")
    res = json.loads(path.read_text())
    ours = res["systems"]["mlinfra"]
    assert ours["log"]["points"] == 10 * 1000 and ours["search"]["db_runs"] == 20
    assert len(ours["search"]["queries"]) == 5 and "mlflow" not in res["systems"]
    assert {"versions", "machine", "config", "date"} <= set(res)


def test_bench_tracking_takes_mlflow_async_scale_and_refuses_a_bad_one(tmp_path, capsys):
    out = tmp_path / "r.json"
    quick = ["bench", "tracking", "--scale", "0.0002", "--repeats", "2", "--no-mlflow"]
    quick += ["--no-server", "--workdir", str(tmp_path), "--out", str(out)]
    assert main([*quick, "--mlflow-scale", "0.0001", "--mlflow-async-scale", "0.5"]) == 0
    cfg = json.loads(out.read_text())["config"]
    assert (cfg["mlflow_scale"], cfg["mlflow_async_scale"]) == (0.0001, 0.5)
    capsys.readouterr()
    assert main([*quick, "--mlflow-async-scale", "0"]) != 0
    assert "--mlflow-async-scale" in capsys.readouterr().err


def test_chapter_measurements_small(tmp_path):
    ivr = experiments.inline_vs_reference(tmp_path, runs=10, blob_bytes=50_000, repeats=1)
    assert ivr["inline"]["db_bytes"] > 10 * 50_000 > ivr["reference"]["db_bytes"]
    rates = experiments.skewed_access_hit_rates([10] * 20, [10, 50, 100, 200], accesses=500)
    assert list(rates.values()) == sorted(rates.values()) and rates[200] > 0.9, (
        "all 20 fit: only cold misses"
    )
    policy = RetentionPolicy(
        (
            RetentionRule(
                keep_all_days=10, keep_last_runs=2, cold_after_days=30, delete_after_days=60
            ),
        ),
        cold_root="memory://c",
    )
    sim = experiments.simulate_retention(
        policy, days=90, runs_per_day=2, ckpts_per_run=3, ckpt_bytes=1
    )
    assert sim.unmanaged_bytes[-1] > sim.kept_bytes[-1] + sim.cold_bytes[-1]
    assert all(
        h + c <= u
        for h, c, u in zip(sim.kept_bytes, sim.cold_bytes, sim.unmanaged_bytes, strict=True)
    )


def test_params_and_history_in_json_against_columns_and_tables(tmp_path):
    """Same answer both ways; the promoted column is an index search, the JSON path a scan;
    appending to a JSON history rewrites the document (it grows), a table row does not."""
    res = experiments.hot_params_vs_json(tmp_path, runs=3000, history=(10, 2000), repeats=1)
    assert res["json"]["rows"] == res["promoted"]["rows"] > 0
    assert any("INDEX ix_runs_hot_lr" in step for step in res["promoted"]["plan"])
    assert any(step.startswith("SCAN runs") for step in res["json"]["plan"])
    assert [a["history"] for a in res["append"]] == [10, 2000]
    import sqlite3

    con = sqlite3.connect(tmp_path / "json_vs_columns.db")
    lengths = [n for (n,) in con.execute("SELECT json_array_length(metrics, '$.loss') FROM doc")]
    points = con.execute("SELECT count(*) FROM points").fetchone()[0]
    assert lengths == [10 + 2, 2000 + 2] and points == 10 + 2000 + 2 * 2  # warm-up + 1 timed
