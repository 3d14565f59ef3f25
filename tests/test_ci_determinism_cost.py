"""The determinism-cost measurement: both protocols, every variant, settings restored."""

import pytest
import torch
import torch.utils.deterministic

from mlinfra_lab import ci

pytestmark = pytest.mark.ci


def test_both_protocols_and_every_variant_are_reported():
    threads = torch.get_num_threads()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    r = ci.measure_determinism_cost(steps=3, rounds=3, threads=(1,), repeats=3, sequential_trials=2)
    row = r["interleaved"]["threads=1"]
    for variant in ("default", "deterministic", "deterministic, no fill"):
        s = row[variant]
        assert 0 < s["min_ms"] <= s["q1_ms"] <= s["median_ms"] <= s["q3_ms"] <= s["max_ms"]
    assert row["ratio_deterministic"] == pytest.approx(
        row["deterministic"]["median_ms"] / row["default"]["median_ms"]
    )
    seq = r["sequential"][f"threads={threads}"]
    assert len(seq["trials"]) == len(seq["ratios"]) == 2
    assert seq["ratios"][0] == pytest.approx(
        seq["trials"][0]["deterministic"]["median_ms"] / seq["trials"][0]["default"]["median_ms"]
    )
    assert r["same_losses"] is True  # on a CPU the flag changes no bit of train_tiny's losses
    # the measurement leaves the process as it found it
    assert torch.get_num_threads() == threads
    assert torch.utils.deterministic.fill_uninitialized_memory == fill
    assert not torch.are_deterministic_algorithms_enabled()


def test_no_sequential_trials_and_bad_arguments():
    r = ci.measure_determinism_cost(steps=2, rounds=3, threads=(1,), repeats=3, sequential_trials=0)
    assert r["sequential"] == {}
    for bad in (dict(rounds=2), dict(repeats=1), dict(threads=()), dict(sequential_trials=-1)):
        with pytest.raises(ValueError, match=">="):
            ci.measure_determinism_cost(steps=2, **bad)
