"""Mitigations on the same straggler scenario: fewer updates to the target than plain Async."""

import numpy as np
import pytest
import torch

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


def test_adaptive_delay_compensation_needs_fewer_updates_than_async(async_updates):
    dca = _mean_updates_to_target(st.DelayCompensated(0.1, adaptive=True, momentum=0.95))
    assert dca <= 0.9 * async_updates, (dca, async_updates)


def test_adaptive_delay_compensation_formula():
    # DC-ASGD-a: m_t = mom * m_{t-1} + (1 - mom) * g^2 from m_0 = 0,
    # corrected g = g + lam0 / sqrt(m_t + eps) * g^2 * (theta_now - theta_pulled).
    lam0, mom, eps = 0.5, 0.9, 1e-7
    correct = st.DelayCompensated(lam0, adaptive=True, momentum=mom, eps=eps).make_corrector()
    g1, g2 = torch.tensor([1.0, -2.0, 0.0]), torch.tensor([3.0, 1.0, 0.5])
    now, pulled = torch.tensor([0.5, 1.0, -1.0]), torch.tensor([0.0, 2.0, 1.0])
    delta = now - pulled
    m1 = (1 - mom) * g1**2
    expected1 = g1 + lam0 / torch.sqrt(m1 + eps) * g1**2 * delta
    torch.testing.assert_close(correct(g1, now, pulled), expected1)
    m2 = mom * m1 + (1 - mom) * g2**2  # the state carries over to the next gradient
    expected2 = g2 + lam0 / torch.sqrt(m2 + eps) * g2**2 * delta
    torch.testing.assert_close(correct(g2, now, pulled), expected2)
    # a fresh corrector starts from m_0 = 0 again (the policy itself holds no state)
    fresh = st.DelayCompensated(lam0, adaptive=True, momentum=mom, eps=eps).make_corrector()
    torch.testing.assert_close(fresh(g1, now, pulled), expected1)
    # non-adaptive: the plain DC-ASGD correction with a constant lambda
    plain = st.DelayCompensated(lam0).make_corrector()
    torch.testing.assert_close(plain(g1, now, pulled), g1 + lam0 * g1**2 * delta)
    for bad in (dict(momentum=1.0), dict(momentum=-0.1), dict(eps=0.0)):
        with pytest.raises(st.StalenessConfigError):
            st.DelayCompensated(0.1, adaptive=True, **bad)


def test_adaptive_runs_are_reproducible():
    problem, speeds = st.logreg_problem(), st.WorkerSpeeds.straggler(4, slow_factor=5, which=0)
    policy = st.DelayCompensated(0.1, adaptive=True)
    a, b = (st.simulate(problem, speeds, policy, 40, 2.0, 0, eval_every=10) for _ in range(2))
    np.testing.assert_allclose(a.loss, b.loss)  # no state leaks from one run into the next


def test_delay_wait_group_rule():
    assert st.delay_wait_group(10, [5, 9, 9], [1], 8) == [1]  # nobody at the bound
    assert st.delay_wait_group(13, [5, 9, 9], [1, 2], 8) == []  # worker 0 at the bound, absent
    assert st.delay_wait_group(13, [5, 5, 9], [2, 1, 0], 8) == [0, 1]  # the whole limit group
    assert st.delay_wait_group(10, [9, 7, 7], [2, 1], 8) == [2]  # oldest held, first arrived
    assert st.delay_wait_group(4, [4, 4, 4], [1, 2, 0], 0) == [0, 1, 2]  # bound 0 is Sync


def test_custom_wait_rule_is_used():
    problem, speeds = st.logreg_problem(), st.WorkerSpeeds.straggler(4, slow_factor=5, which=0)
    calls = []

    def rule(version, pulled, held, bound):
        calls.append(bound)
        return st.delay_wait_group(version, pulled, held, bound)

    mine = st.simulate(problem, speeds, st.BoundedDelay(2, "wait", wait_rule=rule), 30, 1.0, 0)
    ref = st.simulate(problem, speeds, st.BoundedDelay(2, "wait"), 30, 1.0, 0)
    assert calls and set(calls) == {2}
    np.testing.assert_array_equal(mine.staleness, ref.staleness)
    assert mine.staleness.max() <= 2


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
