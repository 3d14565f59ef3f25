"""Chapter 3: flake hunting in fresh processes, and bisecting the unseeded random source.

Fresh processes cost about 5 s each here (importing torch), so these tests use few runs.
"""

import functools
import random
import textwrap

import pytest

from mlinfra_lab.ci import TrainConfig, detect_flaky, find_unseeded_source, train_tiny_final_loss

pytestmark = pytest.mark.ci
pytest_plugins = ["pytester"]


def test_augmentation_bug_varies_across_fresh_processes_is_bisected_and_the_fix_is_stable():
    # One bisection in fresh processes (2 runs per trial, 3 trials): its first trial is
    # detect_flaky on the unpinned bug, so it also proves the step-20 loss varies.
    report = find_unseeded_source(TrainConfig(augment_seed=None), runs=2, confirm=False)
    baseline = report.trials[0]
    assert baseline.pinned == () and baseline.report.flaky, str(baseline.report)
    assert baseline.report.outcomes_agree and baseline.report.spread > 0.0
    assert report.culprit == "augment", str(report)
    assert len(report.trials) == 3  # 4 sources: baseline + 2 bisection rounds
    fixed = detect_flaky(functools.partial(train_tiny_final_loss, TrainConfig()), runs=2)
    assert not fixed.flaky and fixed.spread == 0.0, str(fixed)


def test_find_unseeded_source_in_process_confirms_and_reports_stable_runs():
    report = find_unseeded_source(TrainConfig(augment_seed=None), fresh_processes=False)
    assert (report.culprit, report.confirmed) == ("augment", True), str(report)
    stable = find_unseeded_source(TrainConfig(), fresh_processes=False)
    assert stable.culprit is None and len(stable.trials) == 1


@pytest.mark.parametrize("culprit", ["a", "b", "c", "d", "e"])
def test_bisection_finds_any_single_culprit_among_five_sources(culprit):
    entropy = random.Random()  # deliberately unseeded: this plays the bug

    def run(pinned):
        value = 0.0
        for source in "abcde":
            rng = random.Random(1) if source != culprit or source in pinned else entropy
            value += rng.random()
        return value

    report = find_unseeded_source(run, "abcde", fresh_processes=False)
    assert report.culprit == culprit and report.confirmed, str(report)


def test_detect_flaky_runs_a_pytest_node_id_in_fresh_processes(pytester):
    # test_alternating claims a run number atomically (O_EXCL) and fails on odd ones: a
    # flaky test whose flakiness is itself deterministic, so this test cannot flake.
    pytester.makepyfile(
        test_alternating=textwrap.dedent(
            """
            import os

            def test_alternating():
                n = 0
                while True:
                    try:
                        os.close(os.open(f"run{n}", os.O_CREAT | os.O_EXCL))
                        break
                    except FileExistsError:
                        n += 1
                assert n % 2 == 0
            """
        )
    )
    alternating = detect_flaky("test_alternating.py::test_alternating", runs=2, cwd=pytester.path)
    assert alternating.flaky and not alternating.outcomes_agree, str(alternating)
    assert "FLAKY (1/2 runs passed)" in str(alternating)


def test_detect_flaky_needs_two_runs():
    with pytest.raises(ValueError, match="at least 2 runs"):
        detect_flaky(lambda: 1.0, runs=1, fresh_processes=False)
