"""The communication roofline: the compute-rate fit and the critical per-GPU batch."""

from __future__ import annotations

import numpy as np
import pytest

from mlinfra_lab.results import results_dir
from mlinfra_lab.scaling import (
    ComputeRate,
    RooflineError,
    critical_batch,
    h100_cluster,
    worked_example,
)

pytestmark = pytest.mark.scaling


def test_fit_recovers_a_line_within_5_percent():
    rng = np.random.default_rng(0)
    fixed, per_sample = 4e-3, 20e-6
    points = [
        (b, (fixed + per_sample * b) * (1 + 0.01 * rng.standard_normal()))
        for b in (8, 32, 128, 512, 2048)
    ]
    rate = ComputeRate.fit(points)
    assert rate.fixed_s == pytest.approx(fixed, rel=0.05)
    assert rate.per_sample_s == pytest.approx(per_sample, rel=0.05)


def test_critical_batch_is_where_compute_meets_the_all_reduce():
    rate = ComputeRate(fixed_s=2e-3, per_sample_s=10e-6)
    assert critical_batch(rate, 12e-3) == pytest.approx(1000)  # 2 ms + 1000 * 10 us = 12 ms
    assert rate.time(critical_batch(rate, 12e-3)) == pytest.approx(12e-3)
    assert critical_batch(rate, 12e-3, window=0.5) == pytest.approx(2200)  # backward only
    assert critical_batch(rate, 1e-3) == 0.0  # the fixed cost alone covers it


def test_crossing_the_node_boundary_moves_the_critical_batch_up():
    rate = ComputeRate(fixed_s=2e-3, per_sample_s=10e-6)
    cluster = h100_cluster(2)
    inside = critical_batch(rate, cluster.allreduce(500e6, 8).total)
    across = critical_batch(rate, cluster.allreduce(500e6, 64).total)
    assert across > 3 * inside


def test_worked_example_is_compute_bound_at_8_and_communication_bound_at_64():
    model, pred = worked_example()
    rate = ComputeRate(
        fixed_s=model.compute_time(8)
        - 256 * (model.compute_time(8) - model.compute_time(64)) / 224,
        per_sample_s=(model.compute_time(8) - model.compute_time(64)) / 224,
    )
    assert rate.time(32) == pytest.approx(model.compute_time(64))
    assert pred["8"].rank_batch > critical_batch(rate, model.comm_time(8))
    assert pred["64"].rank_batch < critical_batch(rate, model.comm_time(64))


def test_fit_on_the_committed_gpu_runs():
    runs = sorted(results_dir().glob("h200-scaling-1gpu-b*.json"))
    if len(runs) < 2:
        pytest.skip("no committed GPU runs under benchmarks/results/")
    rate = ComputeRate.from_runs(runs)
    assert rate.per_sample_s > 0 and rate.fixed_s >= 0
    assert "H200" in rate.source


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ComputeRate.fit([(8, 1e-3), (8, 2e-3)]), "two different"),
        (lambda: ComputeRate.fit([(8, 1e-3), (0, 2e-3)]), "positive"),
        (lambda: ComputeRate.fit([(8, 2e-3), (64, 1e-3)]), "does not grow"),
        (lambda: ComputeRate(1e-3, 0.0), "per_sample_s > 0"),
        (lambda: critical_batch(ComputeRate(1e-3, 1e-6), -1.0), "comm_s"),
        (lambda: critical_batch(ComputeRate(1e-3, 1e-6), 1.0, window=0), "window"),
    ],
)
def test_bad_input_is_refused_with_what_to_do(call, message):
    with pytest.raises(RooflineError, match=message):
        call()
