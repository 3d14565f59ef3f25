"""The per-bucket overlap timeline, read from committed runs of the harness."""

from __future__ import annotations

import copy
from itertools import pairwise

import pytest

from mlinfra_lab.scaling import TimelineError, load_run, step_timeline
from mlinfra_lab.scaling.data import example_path

pytestmark = pytest.mark.scaling


def test_phases_are_consecutive_and_add_up_to_the_recorded_phases():
    run = load_run(example_path("cpu-w4-clean.json"))
    tl = step_timeline(run, rank=0, step=0)
    record = run.ranks()[0]["steps"][0]
    assert [p.name for p in tl.phases] == [
        "data_wait", "forward", "backward", "exposed_comm", "optimizer",
    ]  # fmt: skip
    assert all(a.end == pytest.approx(b.start) for a, b in pairwise(tl.phases))
    assert tl.phases[2].duration == pytest.approx(record["backward"])
    assert len(tl.buckets) == len(record["buckets_s"])


def test_with_overlap_only_the_last_bucket_is_exposed():
    tl = step_timeline(example_path("cpu-w4-clean.json"), step=0)
    *early, last = tl.buckets
    assert all(b.exposed_s == pytest.approx(0.0, abs=1e-9) for b in early)
    assert all(b.hidden_s == pytest.approx(b.end - b.start) for b in early)
    exposed_phase = next(p for p in tl.phases if p.name == "exposed_comm").duration
    assert last.exposed_s == pytest.approx(exposed_phase, rel=0.1)


def test_one_bucket_after_backward_is_mostly_exposed():
    clean = step_timeline(example_path("cpu-w4-clean.json"))
    single = step_timeline(example_path("cpu-w4-no_overlap.json"))
    assert len(single.buckets) == 1
    assert single.hidden_share() < 0.2 < 0.5 < clean.hidden_share()


def test_default_step_is_the_median_by_wall_time():
    run = load_run(example_path("cpu-w2-clean.json"))
    steps = run.ranks()[0]["steps"]
    tl = step_timeline(run)
    walls = sorted(s["step"] for s in steps)
    assert steps[tl.step]["step"] == walls[len(walls) // 2]


def test_bad_requests_say_what_to_do():
    run = load_run(example_path("cpu-w2-clean.json"))
    with pytest.raises(TimelineError, match="rank 5"):
        step_timeline(run, rank=5)
    with pytest.raises(TimelineError, match="step 99"):
        step_timeline(run, step=99)
    data = copy.deepcopy(run.data)
    for s in data["ranks"][0]["steps"]:
        del s["buckets_s"]
    with pytest.raises(TimelineError, match="profile it again"):
        step_timeline(data)
