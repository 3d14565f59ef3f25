"""Synthetic runs (the lab's fresh mysteries): shaped like measured ones, diagnosed as their faults."""

from __future__ import annotations

import json

import pytest

from mlinfra_lab.scaling import diagnose, load_run, mystery_set, synthesize_run
from mlinfra_lab.scaling.data import example_path
from mlinfra_lab.scaling.synthetic import FAULT_CAUSE, causes_of

SMALL = example_path("cpu-w2-clean.json")


@pytest.mark.parametrize(
    ("faults", "cause"),
    [
        ((), "none"),
        (("no_overlap",), "communication"),
        (("slow_data:ms=40",), "data_loading"),
        (("slow_transport:mbps=40",), "transport"),
        (("small_batch:global=8",), "small_batch"),
        (("straggler:rank=3,ms=150",), "straggler"),
    ],
)
def test_one_fault_is_diagnosed_as_that_fault(faults, cause):
    for world in (4, 8):
        run = synthesize_run(world, faults, seed=world)
        assert diagnose(SMALL, run).primary_cause == cause, (world, faults)


def test_close_to_the_measured_runs():
    for name, faults in [
        ("clean", ()),
        ("straggler", ("straggler:rank=2,ms=150",)),
        ("slow_transport", ("slow_transport:mbps=40",)),
    ]:
        measured = load_run(example_path(f"cpu-w4-{name}.json"))
        made = synthesize_run(4, faults, seed=0)
        assert made.step_time() == pytest.approx(measured.step_time(), rel=0.15), name
        assert made.busbw() == pytest.approx(measured.busbw(), rel=0.15), name


def test_seeded_serialisable_and_the_straggler_rank_is_the_slow_one():
    a = synthesize_run(8, ("straggler:rank=5,ms=100",), seed=3)
    assert a.data == synthesize_run(8, ("straggler:rank=5,ms=100",), seed=3).data
    assert a.data != synthesize_run(8, ("straggler:rank=5,ms=100",), seed=4).data
    scores = a.straggler_scores()
    assert max(range(8), key=scores.__getitem__) == 5
    assert load_run(json.loads(a.to_json())).step_time() == a.step_time()
    assert a.faults == ["straggler:ms=100,rank=5"]


def test_mystery_set_has_a_healthy_run_three_single_faults_and_one_pair_with_faults_hidden():
    for seed in range(20):
        ms = mystery_set(seed)
        assert [m.name for m in ms] == list("abcde")
        sizes = sorted(len(m.faults) for m in ms)
        assert sizes == [0, 1, 1, 1, 2], seed
        assert all(m.run.faults == [] and m.run.world_size in (4, 8) for m in ms)
        pair = next(m for m in ms if len(m.faults) == 2)
        assert len(pair.causes) == 2 and "communication" not in pair.causes
    assert [m.run.data for m in mystery_set(7)] == [m.run.data for m in mystery_set(7)]
    assert causes_of(()) == {"none"} and set(FAULT_CAUSE.values()) < set(
        diagnose.__globals__["CAUSES"]
    )


def test_bad_world_size_is_refused():
    with pytest.raises(ValueError, match="positive integer"):
        synthesize_run(0)


def test_a_handed_out_run_names_no_fault_anywhere():
    """Hostile code under test reads the answer off the run object instead of its timings:
    a mystery's (and any run put through hide_faults) source, config and environment must
    not name a fault or the seed that would let one search for it."""
    from mlinfra_lab.scaling import hide_faults

    measured = hide_faults(load_run(example_path("cpu-w4-straggler.json")))
    for seed in (1, 2, 3):
        for m in [*mystery_set(seed), type(mystery_set(1)[0])("x", measured, ("straggler",))]:
            run = m.run
            text = run.source + json.dumps(run.data["config"]) + json.dumps(run.data["environment"])
            assert run.faults == [] and "seed" not in run.data["environment"], (seed, m.name)
            for kind in FAULT_CAUSE:
                assert kind not in text, (seed, m.name, kind, text[:200])
