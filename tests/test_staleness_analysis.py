"""The empirical method: staleness logged beside the loss, tested for a real effect."""

import numpy as np
import pytest

from mlinfra_lab import staleness as st

pytestmark = pytest.mark.staleness

# A noisy quadratic at lr 0.3: stable with ~2-stale updates (bound 0.62), unstable with
# ~8-stale ones (bound 0.18). Three workers always run; in the bursty scenario six more join
# for 30% of every 40 s, so staleness rises in bursts. In the other, three workers with
# log-normal speeds: staleness varies, but as stationary noise.
PROBLEM = dict(dim=10, condition=10.0, noise=1.0, batch_size=4)


def _run(speeds):
    return st.simulate(
        st.quadratic_problem(**PROBLEM), speeds, st.Async(), 1500, 0.3, seed=0, eval_every=1
    )


def test_correlation_finds_staleness_injected_in_bursts():
    r = _run(st.WorkerSpeeds.bursts(3, 6, period=40, duty=0.3))
    c = st.staleness_loss_correlation(r, window=20)
    assert c.rho > 0.2 and c.significant(0.01), (c.rho, c.p_value)
    v = st.staleness_loss_correlation(r, window=20, effect="variance")
    assert v.rho > 0.2 and v.significant(0.01), (v.rho, v.p_value)


def test_correlation_finds_nothing_in_constant_noise_staleness():
    r = _run(st.WorkerSpeeds.lognormal(3, sigma=0.5))
    assert r.staleness.std() > 0.5, "staleness does vary"
    for effect in ("change", "variance"):  # same significance level as the bursts test
        c = st.staleness_loss_correlation(r, window=20, effect=effect)
        assert not c.significant(0.01), (effect, c.rho, c.p_value)


def test_histogram_and_bad_windows():
    r = st.simulate(
        st.quadratic_problem(2, 2.0),
        st.WorkerSpeeds.lognormal(4, 0.5),
        st.Async(),
        200,
        0.05,
        0,
        eval_every=5,
    )
    values, counts = st.staleness_histogram(r)
    assert counts.sum() == r.updates and values[-1] == r.staleness.max()
    with pytest.raises(st.StalenessConfigError, match="eval_every"):
        st.staleness_loss_correlation(r, window=2)
    with pytest.raises(st.StalenessConfigError, match="windows"):
        st.staleness_loss_correlation(r, window=100)
    with pytest.raises(st.StalenessConfigError, match="effect"):
        st.staleness_loss_correlation(r, window=10, effect="vibes")


def test_rank_correlation_averages_ties():
    from mlinfra_lab.staleness.analysis import _ranks

    np.testing.assert_array_equal(_ranks(np.array([2.0, 1.0, 2.0, 2.0])), [2.0, 0.0, 2.0, 2.0])


def test_throughput_of_equal_workers():
    r = st.simulate(
        st.quadratic_problem(2, 2.0),
        st.WorkerSpeeds.homogeneous(4),
        st.Async(),
        400,
        0.05,
        0,
        eval_every=50,
    )
    assert r.updates_per_second == pytest.approx(4.0, rel=0.02), "4 workers x 1 update/s"


def test_sync_wins_on_updates_async_on_time():
    problem = st.logreg_problem()
    speeds = st.WorkerSpeeds.straggler(8, slow_factor=10, which=0)
    sync = st.simulate(problem, speeds, st.Sync(), 60, 1.0, 0)
    asyn = st.simulate(problem, speeds, st.Async(), 400, 1.0, 0, eval_every=2)
    target = 0.2
    assert st.updates_to_target(sync, target) < st.updates_to_target(asyn, target)
    assert st.time_to_target(asyn, target) < st.time_to_target(sync, target)
    assert st.updates_to_target(asyn, 1e-9) is None and st.time_to_target(asyn, 1e-9) is None
