"""Mitigations on the same straggler scenario: fewer updates to the target than plain Async."""

import numpy as np
import pytest

from mlinfra_lab import staleness as st

pytestmark = pytest.mark.staleness

# Two of eight workers are 10x slower (their updates are ~70 updates stale) and lr = 6 is
# high enough that those stale steps hurt logistic regression on the digits.
SEEDS = (0, 1, 2)
LR, TARGET, UPDATES = 6.0, 0.12, 300


def _mean_updates_to_target(policy):
    problem = st.logreg_problem()
    speeds = st.WorkerSpeeds.straggler(8, slow_factor=10, which=(0, 1))
    counts = []
    for seed in SEEDS:
        r = st.simulate(problem, speeds, policy, UPDATES, LR, seed, eval_every=5)
        k = st.updates_to_target(r, TARGET)
        counts.append(UPDATES * 2 if k is None else k)  # never reached: count as 2x the run
    return float(np.mean(counts))


@pytest.fixture(scope="module")
def async_updates():
    return _mean_updates_to_target(st.Async())


def test_staleness_aware_lr_needs_fewer_updates_than_async(async_updates):
    aware = _mean_updates_to_target(st.StalenessAwareLR())
    assert aware <= 0.75 * async_updates, (aware, async_updates)


def test_delay_compensation_needs_fewer_updates_than_async(async_updates):
    dc = _mean_updates_to_target(st.DelayCompensated(2.0))
    assert dc <= 0.9 * async_updates, (dc, async_updates)


def test_zhang_rule_and_power_family():
    zhang = st.StalenessAwareLR.zhang()
    assert [zhang.scale(s) for s in (0, 1, 4)] == [1.0, 1.0, 0.25]
    assert st.power_weight(0)(7) == 1.0 and st.power_weight(1)(9) == pytest.approx(0.1)
    with pytest.raises(st.StalenessConfigError):
        st.power_weight(-1)


def test_steeper_weighting_discards_more_straggler_compute():
    problem = st.logreg_problem()
    speeds = st.WorkerSpeeds.straggler(8, slow_factor=10, which=0)
    discarded = []
    for p in (0.0, 0.5, 1.0, 2.0):
        r = st.simulate(
            problem, speeds, st.StalenessAwareLR(st.power_weight(p)), 150, 1.0, 0, eval_every=50
        )
        discarded.append(r.discarded_fraction[0])
    assert discarded[0] == pytest.approx(0.0)
    assert np.all(np.diff(discarded) > 0) and discarded[-1] > 0.99


def test_momentum_corrected_for_asynchrony_beats_naive_momentum():
    # 8 workers add implicit momentum 1 - 1/8; explicit 0.9 on top overshoots.
    problem, speeds = st.logreg_problem(), st.WorkerSpeeds.lognormal(8, 0.3)
    mu = st.corrected_momentum(0.9, mean_staleness=7)

    def late_loss(momentum):  # mean loss over the last 100 updates, averaged over the seeds
        runs = [
            st.simulate(problem, speeds, st.Async(), 300, 0.5, s, momentum=momentum, eval_every=10)
            for s in SEEDS
        ]
        return float(np.mean([r.loss[-10:].mean() for r in runs]))

    assert late_loss(mu) <= 0.8 * late_loss(0.9)
