"""Stale synchronous parallel: a clock bound, not an update bound (Ho et al. 2013)."""

import numpy as np
import pytest

from mlinfra_lab import staleness as st

pytestmark = pytest.mark.staleness


def _straggler(n=6):
    return st.WorkerSpeeds.straggler(n, slow_factor=8, which=0)


def test_gate_holds_a_worker_ahead_by_more_than_the_bound():
    gate = st.ClockGate(3, bound=1)
    assert gate.finish(0) == [0]  # clocks [1, 0, 0]: one ahead, within the bound
    assert gate.finish(0) == []  # clocks [2, 0, 0]: two ahead of the slowest, it waits
    assert gate.waiting == [0] and not gate.may_start(0)
    assert gate.finish(1) == [1]  # [2, 1, 0]: the slowest is still at 0, worker 0 waits on
    assert gate.waiting == [0]
    assert gate.finish(2) == [2, 0]  # [2, 1, 1]: the slowest reached 1, worker 0 is released
    assert gate.waiting == [] and gate.clock == [2, 1, 1]
    assert gate.finish(0) == []  # [3, 1, 1]: two ahead again, waits
    with pytest.raises(st.StalenessConfigError, match="waiting"):
        gate.finish(0)  # a waiting worker computes nothing, so it cannot finish


def test_gate_with_bound_zero_is_bulk_synchronous():
    gate = st.ClockGate(3, bound=0)
    assert gate.finish(1) == [] and gate.finish(0) == []  # nobody starts clock 1 early
    assert sorted(gate.finish(2)) == [0, 1, 2]  # the last one of the round releases all


def test_simulated_workers_never_run_more_than_s_clocks_ahead():
    for s in (0, 1, 3):
        r = st.simulate(st.logreg_problem(), _straggler(), st.SSP(s), 150, 0.5, 0)
        assert r.clock_gap.max() == s, "the fast workers reach the bound and stop there"
        assert r.idle_time[1:].min() > 0, "a fast worker ahead by more than s clocks waits"
        assert r.idle_time[0] == 0, "the slowest worker never waits"
        assert r.staleness.max() <= st.update_staleness_bound(6, s)
        assert r.dropped_staleness.size == 0 and (r.weight == 1.0).all()


def test_ssp_zero_is_bsp():
    # BSP with additive updates: each round applies n gradients computed at the same
    # parameters, so SSP(0) at lr is Sync (the average) at n * lr, round for round.
    n, rounds, lr = 6, 20, 0.1
    p = st.logreg_problem()
    bsp = st.simulate(p, _straggler(n), st.SSP(0), n * rounds, lr, 0, eval_every=n)
    sync = st.simulate(p, _straggler(n), st.Sync(), rounds, n * lr, 0, eval_every=1)
    np.testing.assert_allclose(bsp.final_params, sync.final_params, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(bsp.loss, sync.loss, rtol=1e-4)
    np.testing.assert_allclose(bsp.time[n - 1 :: n], sync.time)  # a round ends together
    assert (bsp.clock_gap == 0).all()
    assert bsp.staleness.max() == n - 1  # in updates: the last of a round misses n - 1


def test_large_bound_is_fully_asynchronous():
    p, speeds = st.logreg_problem(), _straggler()
    loose = st.simulate(p, speeds, st.SSP(10_000), 200, 0.5, 0)
    free = st.simulate(p, speeds, st.Async(), 200, 0.5, 0)
    np.testing.assert_array_equal(loose.final_params, free.final_params)
    np.testing.assert_array_equal(loose.staleness, free.staleness)
    assert loose.idle_time.sum() == 0
    assert free.clock_gap.max() > 3, "without SSP the straggler falls many clocks behind"


def test_delay_bound_counts_updates_not_clocks():
    # the two bounds are different quantities. A delay bound at least n - 1 caps staleness
    # in updates, but the straggler's clock falls further behind every iteration; SSP caps
    # the clock gap and lets a gradient miss up to (n - 1)(2s + 1) updates
    p, speeds = st.logreg_problem(), _straggler()
    delay = st.simulate(p, speeds, st.BoundedDelay(8, "wait"), 200, 0.5, 0)
    ssp = st.simulate(p, speeds, st.SSP(1), 200, 0.5, 0)
    assert delay.staleness.max() <= 8 < delay.clock_gap.max()
    assert ssp.clock_gap.max() <= 1 < 8 < ssp.staleness.max() <= st.update_staleness_bound(6, 1)


def test_ssp_config_errors_and_deprecated_names():
    with pytest.raises(st.StalenessConfigError, match="clocks"):
        st.SSP(-1)
    with pytest.raises(st.StalenessConfigError, match="clocks"):
        st.SSP(1.5)
    with pytest.raises(st.StalenessConfigError, match="elastic"):
        st.simulate(
            st.quadratic_problem(2, 2.0),
            st.WorkerSpeeds.bursts(2, 2, 10, 0.5),
            st.SSP(1),
            10,
            0.1,
            0,
        )
    with pytest.warns(DeprecationWarning, match="BoundedDelay"):
        old = st.BoundedStaleness(4, "drop")
    assert old == st.BoundedDelay(4, "drop")
    with pytest.warns(DeprecationWarning, match="delay_wait_group"):
        assert st.ssp_wait_group(13, [5, 5, 9], [2, 1, 0], 8) == [0, 1]
