"""A `torch.profiler` trace of the profiled steps, read back as a table of operators.

`op_table` is checked on a hand-written trace whose self times and shares are known, and on
a real 2-rank gloo run whose trace must hold exactly the timed step and its all-reduces.
"""

from __future__ import annotations

import json
import warnings

import pytest

from mlinfra_lab.scaling import (
    OversubscribedWarning,
    RunConfig,
    format_op_table,
    op_table,
    profile,
    summarise_trace,
)

pytestmark = pytest.mark.scaling


def _x(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_op_table_self_times_shares_and_kinds(tmp_path):
    events = [
        _x("ProfilerStep#3", 0, 1000, cat="user_annotation"),  # the step: 1 ms of wall time
        _x("DistributedDataParallel.forward", 10, 400, cat="user_annotation"),
        _x("aten::linear", 20, 300),
        _x("aten::addmm", 30, 250),  # nested in linear: linear's self is 50
        _x("aten::linear", 500, 100),  # a second call of the same operator
        _x("gloo:all_reduce", 200, 600, tid=2, cat="user_annotation"),  # gloo's own thread
        {"ph": "i", "name": "an instant event, ignored", "ts": 5, "pid": 1, "tid": 1},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    rows = {r.name: r for r in op_table(path, top=0)}
    assert "ProfilerStep#3" not in rows
    assert (rows["aten::linear"].calls, rows["aten::linear"].total_ms) == (2, pytest.approx(0.4))
    assert rows["aten::linear"].self_ms == pytest.approx(0.15)  # 50 + 100 us
    assert rows["DistributedDataParallel.forward"].self_ms == pytest.approx(0.1)  # 400 - 300
    comm = rows["gloo:all_reduce"]
    assert comm.kind == "communication" and rows["aten::addmm"].kind == "compute"
    assert comm.step_share == pytest.approx(0.6)
    top = op_table(path, top=2)
    assert [r.name for r in top] == ["gloo:all_reduce", "aten::addmm"]  # by self time
    table = format_op_table(top)
    assert table.count("\n") == 3 and "| `gloo:all_reduce` | communication | 1 |" in table


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not a readable Chrome trace"),
        ('{"traceEvents": 3}', "no traceEvents list"),
        ("[1, 2]", "no traceEvents list"),
    ],
)
def test_op_table_rejects_what_is_not_a_chrome_trace(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        op_table(path)
    with pytest.raises(ValueError, match="top must be"):
        op_table(tmp_path / "missing.json", top=-1)


def test_a_traced_two_rank_run_records_only_its_timed_step(tmp_path):
    config = RunConfig(steps=1, warmup=2, trace=True, timeout_s=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversubscribedWarning)
        run = profile(config, 2, out=tmp_path / "run.json", show_progress=False)
    path = tmp_path / "run.trace.json"
    events = json.loads(path.read_text())["traceEvents"]
    steps = [e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#2"], "the warm-up steps (bucket rebuild) must not be traced"
    rows = {r.name: r for r in op_table(path, top=0)}
    buckets = run.ranks()[0]["buckets"]
    assert (
        rows["gloo:all_reduce"].calls == buckets and rows["gloo:all_reduce"].kind == "communication"
    )
    assert "gloo:broadcast" not in rows  # DDP broadcasts the rebuilt buckets in warm-up only
    summary = run.ranks()[0]["trace"]
    assert summary == {**summarise_trace(path), "path": "run.trace.json"}
    assert 0 < summary["comm_share"] < 1
