"""The cost model and the all-reduce fit: hand-computed cases, synthetic timings, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlinfra_lab.scaling import (
    StepModel,
    fit_alpha_beta,
    ring_allreduce_time,
    tree_allreduce_time,
    worked_example,
)

pytestmark = pytest.mark.scaling


def test_ring_allreduce_matches_hand_computed_case():
    # 4 ranks, 100 MB, 10 us per step, 10 GB/s per link:
    # 2*(4-1)*10e-6 + 2*(4-1)/4 * 100e6 / 10e9 = 60e-6 + 0.015 = 0.01506 s
    assert ring_allreduce_time(100e6, 4, 10e-6, 1 / 10e9) == pytest.approx(0.01506, rel=1e-12)
    assert ring_allreduce_time(1e9, 1, 1e-5, 1e-9) == 0.0  # one rank sends nothing


def test_tree_has_logarithmic_latency_and_ring_beats_it_on_bandwidth():
    # 8 ranks, 1 byte: 2*log2(8)=6 latency steps for the tree vs 2*(8-1)=14 for the ring
    assert tree_allreduce_time(0, 8, 1.0, 0.0) == pytest.approx(6.0)
    assert ring_allreduce_time(0, 8, 1.0, 0.0) == pytest.approx(14.0)
    big = 1e9
    assert ring_allreduce_time(big, 8, 1e-6, 1e-10) < tree_allreduce_time(big, 8, 1e-6, 1e-10)


@pytest.mark.parametrize("bad", [dict(p=0), dict(p=2.5), dict(nbytes=-1), dict(alpha=-1e-6)])
def test_allreduce_time_rejects_bad_input(bad):
    args = dict(nbytes=1e6, p=4, alpha=1e-6, beta=1e-9) | bad
    with pytest.raises(ValueError):
        ring_allreduce_time(**args)


@pytest.mark.parametrize("p", [2, 8])
def test_fit_alpha_beta_recovers_parameters_within_5_percent(p):
    rng = np.random.default_rng(0)
    alpha, beta = 25e-6, 1 / 40e9
    sizes = [8 * 4**k for k in range(14)]  # 8 B .. 537 MB
    rows = [
        {
            "bytes": n,
            "time_s": ring_allreduce_time(n, p, alpha, beta) * (1 + 0.02 * rng.standard_normal()),
            "world_size": p,
        }
        for n in sizes
    ]
    fit = fit_alpha_beta(rows)
    assert fit.alpha == pytest.approx(alpha, rel=0.05), fit
    assert fit.beta == pytest.approx(beta, rel=0.05), fit
    assert fit.bus_bandwidth == pytest.approx(40e9, rel=0.05)


def test_fit_alpha_beta_never_returns_a_negative_cost():
    # Latency-bound timings whose noise slopes downward (the CI failure this guards):
    # an unconstrained line would report a negative per-byte cost.
    rows = [
        {"bytes": n, "time_s": t, "world_size": 2}
        for n, t in [(1024, 3.7e-3), (64 * 1024, 3.6e-3), (1024 * 1024, 1.3e-3)]
    ]
    fit = fit_alpha_beta(rows)
    assert fit.latency_s >= 0 and fit.per_byte_s >= 0, fit
    # Pure bandwidth timings (no latency) pin the latency at zero, not below it.
    rows = [{"bytes": n, "time_s": n * 1e-9 * (0.9 if n == 8 else 1.0)} for n in (8, 800, 8e6)]
    fit = fit_alpha_beta(rows, world_size=2)
    assert fit.latency_s >= 0 and fit.per_byte_s == pytest.approx(1e-9, rel=0.15), fit


def test_fit_alpha_beta_rejects_unusable_timings():
    with pytest.raises(ValueError, match="two different"):
        fit_alpha_beta([{"bytes": 8, "time_s": 1e-5}, {"bytes": 8, "time_s": 2e-5}])
    with pytest.raises(ValueError, match="positive"):
        fit_alpha_beta([{"bytes": 8, "time_s": 0.0}, {"bytes": 16, "time_s": 1e-5}])
    with pytest.raises(ValueError, match="bytes"):
        fit_alpha_beta([{"size": 8}])


def test_worked_example_reproduces_course_numbers():
    _, pred = worked_example()  # on the two-level cluster (test_scaling_topology.py: why)
    assert pred["8"].comm_share == pytest.approx(0.10, abs=0.02)
    assert pred["64"].comm_share == pytest.approx(0.60, abs=0.05)
    assert pred["64"].speedup == pytest.approx(2.0, abs=0.25)
    assert pred["64"].efficiency == pytest.approx(0.25, abs=0.035)


def test_step_model_weak_scaling_overlap_and_buckets():
    m = StepModel(
        compute_s=0.1, grad_bytes=100e6, alpha=1e-5, beta=1 / 10e9, overlap=0.0, bucket_bytes=25e6
    )
    p8 = m.predict(8)
    comm = 4 * ring_allreduce_time(25e6, 8, 1e-5, 1 / 10e9)
    assert p8.comm_s == pytest.approx(comm)
    assert p8.step_s == pytest.approx(0.1 + comm)
    assert p8.efficiency == pytest.approx(0.1 / (0.1 + comm))  # vs comm-free world size 1
    hidden = m.with_(overlap=1.0).predict(8)
    assert hidden.exposed_comm_s == pytest.approx(comm / 4)  # only the last bucket shows
    assert math.isclose(m.predict(1).efficiency, 1.0)


def test_step_model_rejects_bad_parameters():
    with pytest.raises(ValueError, match="overlap"):
        StepModel(compute_s=1, grad_bytes=1, alpha=0, beta=0, overlap=1.5)
    with pytest.raises(ValueError, match="algorithm"):
        StepModel(compute_s=1, grad_bytes=1, alpha=0, beta=0, algorithm="butterfly")
