"""The two tiers counted: no storage call in a search, bytes per reference row, cold reads and hits.

Each zero is checked beside a non-zero counted by the same spy, so a spy that saw nothing
could not pass.
"""

from __future__ import annotations

import fsspec.core
import pytest

from mlinfra_lab.tracking import TrackingError, experiments
from mlinfra_lab.tracking.search_cost import BENCH_QUERIES, build_search_db, search_phases
from mlinfra_lab.tracking.spy import CountingFileSystem, spy_storage
from mlinfra_lab.tracking.testing import fresh_store
from mlinfra_lab.tracking.tiers import cold_and_cached_reads, reference_row_bytes

pytestmark = pytest.mark.tracking


@pytest.fixture
def store(tmp_path):
    with fresh_store("sqlite", tmp_path, cache_dir=tmp_path / "cache", cache_bytes=1 << 20) as s:
        yield s


def test_a_search_makes_no_storage_call_and_a_download_does(store):
    experiments.populate_demo(store, "demo", runs=20, metrics=2, steps=3, seed=1)
    run = store.start_run("demo", name="with-artifact")
    art = run.log_artifact(b"weights" * 100, "ckpt.pt", kind="checkpoint")
    run.end()
    with spy_storage(store) as search:
        found = store.search_runs("demo", "metrics.val_acc > 0.1 and params.lr > 0")
        store.get_run(art.run_id)
    with spy_storage(store) as miss:
        assert store.read_artifact(art.id) == b"weights" * 100
    with spy_storage(store) as hit:
        store.read_artifact(art.id)
    assert found, "the search must match runs, or its zero says nothing"
    assert search.total_calls == 0 and search.bytes_read == 0, search.as_dict()
    assert miss.calls["open"] == 1 and miss.bytes_read == art.size, miss.as_dict()
    assert hit.total_calls == 0 and hit.bytes_read == 0, "a cache hit must not reach storage"


def test_the_spy_counts_an_upload_and_puts_everything_back(store):
    own_fs, resolve = store.blobs.fs, fsspec.core.url_to_fs
    run = store.start_run("p", name="r")
    with pytest.raises(RuntimeError), spy_storage(store) as spy:
        assert isinstance(store.blobs.fs, CountingFileSystem)
        run.log_artifact(b"x" * 1234, "a.bin")
        raise RuntimeError("leave the block by an exception")
    assert spy.bytes_written == 1234 and spy.calls["open"] == 1 and spy.calls["mv"] == 1
    assert store.blobs.fs is own_fs and fsspec.core.url_to_fs is resolve


def _row_bytes(tmp_path, root_name: str) -> dict:
    tmp_path.mkdir()
    with fresh_store("sqlite", tmp_path, artifact_root=str(tmp_path / root_name)) as s:
        run = s.start_run("p", name="r")
        for i in range(20):
            run.log_artifact(f"blob {i}".encode(), f"ckpt/{i:02d}.pt", kind="checkpoint", step=i)
        run.end()
        return reference_row_bytes(s)


def test_a_reference_row_is_its_uri_and_hash_not_its_bytes(tmp_path):
    short = _row_bytes(tmp_path / "a", "r")
    longer = _row_bytes(tmp_path / "b", "r" + "o" * 100)
    assert short["rows"] == 20 and short["column_chars"]["sha256"] == 64
    assert short["payload_per_row"] > short["column_chars"]["uri"] + 64
    # the URI is stored twice: in the row and in the index on uri
    grew = longer["payload_per_row"] - short["payload_per_row"]
    assert 195 <= grew <= 205, f"100 more URI characters added {grew} bytes per row, not ~200"


def test_reference_row_bytes_needs_a_row(store):
    with pytest.raises(TrackingError, match="log an artifact first"):
        reference_row_bytes(store)


def test_a_cold_read_moves_the_blob_and_a_hit_moves_nothing(store):
    rows = cold_and_cached_reads(store, sizes=(1000, 300_000), repeats=2, seed=3)
    assert [r["size"] for r in rows] == [1000, 300_000]
    for r in rows:
        assert r["cold_bytes"] == r["size"] and r["cold_calls"] >= 1, r
        assert r["hit_bytes"] == 0 and r["hit_calls"] == 0, r
    assert store.cache_stats().misses == 4 and store.cache_stats().hits == 4


def test_cold_and_cached_reads_needs_a_cache_that_holds_the_blob(tmp_path):
    with fresh_store("sqlite", tmp_path) as s, pytest.raises(TrackingError, match="cache_dir"):
        cold_and_cached_reads(s, sizes=(100,), repeats=1)


def test_search_phases_run_the_stores_search(store):
    build_search_db(store, "bench", 3000, seed=2)
    phases = search_phases(store, "bench", repeats=1)
    assert [p["name"] for p in phases] == [name for name, _ in BENCH_QUERIES]
    for p, (_, text) in zip(phases, BENCH_QUERIES, strict=True):
        assert p["results"] == len(store.search_runs("bench", text)), p["name"]
        assert all(c in ("in", "exists") for c in p["choices"].values())
        assert set(p["choices"]) <= {
            "metrics.val_acc",
            "metrics.val_loss",
            "params.optimizer",
            "params.model",
            "tags.team",
        }


def test_committed_search_tails_reads_each_result_with_our_search(tmp_path):
    import json

    from mlinfra_lab.tracking.search_cost import committed_search_tails

    def result(date: str, p99s: list[float]) -> dict:
        queries = [{"name": f"q{i}", "p50_ms": p / 2, "p99_ms": p} for i, p in enumerate(p99s)]
        search = {"db_runs": 10, "p50_ms": 1.0, "p99_ms": max(p99s), "queries": queries}
        return {
            "date": date,
            "machine": {"loadavg_before": [3.5, 1, 1], "cpu_count": 2},
            "config": {"search_repeats": 30},
            "systems": {"mlinfra": {"search": search}},
        }

    (tmp_path / "cpu-tracking-b.json").write_text(json.dumps(result("2026-01-02", [5.0, 60.0])))
    (tmp_path / "cpu-tracking-a.json").write_text(json.dumps(result("2026-01-03", [7.0, 2.0])))
    (tmp_path / "cpu-tracking-none.json").write_text(json.dumps({"systems": {}}))
    rows = committed_search_tails(tmp_path)
    assert [(r["file"], r["worst"], r["worst_p99_ms"]) for r in rows] == [
        ("cpu-tracking-b.json", "q1", 60.0),
        ("cpu-tracking-a.json", "q0", 7.0),
    ]
    assert rows[0]["load"] == 3.5 and rows[0]["repeats"] == 30
