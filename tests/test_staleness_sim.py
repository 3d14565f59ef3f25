"""The discrete-event parameter server: real gradients, policies' guarantees, bad input."""

import math

import numpy as np
import pytest
import torch

from mlinfra_lab import staleness as st

pytestmark = pytest.mark.staleness


@pytest.mark.parametrize(
    "make",
    [
        lambda: st.quadratic_problem(5, 10.0, noise=1.0, batch_size=3),
        st.logreg_problem,
        st.mlp_problem,
    ],
)
def test_batched_grads_equal_separate_backward_passes(make):
    problem = make()
    gen = torch.Generator().manual_seed(0)
    params = problem.initial_params() + 0.1 * torch.randn(3, problem.num_params, generator=gen)
    idx = np.random.default_rng(0).integers(0, problem.num_examples, (3, problem.batch_size))
    grads, losses = problem.batched_grads(params, idx)
    for k in range(3):  # reference: load the parameters into the module, backward once
        module = problem.module
        with torch.no_grad():
            for p, v in zip(
                module.parameters(), problem.unflatten(params[k]).values(), strict=True
            ):
                p.copy_(v)
        module.zero_grad()
        loss = module(problem.inputs[idx[k]], problem.targets[idx[k]])
        loss.backward()
        ref = torch.cat([p.grad.reshape(-1) for p in module.parameters()])
        torch.testing.assert_close(grads[k], ref, rtol=1e-5, atol=1e-6)
        assert losses[k].item() == pytest.approx(loss.item(), rel=1e-5)


def _straggler():
    return st.WorkerSpeeds.straggler(6, slow_factor=8, which=0)


def test_same_seed_same_run_and_seeds_matter():
    p = st.logreg_problem()
    a = st.simulate(p, _straggler(), st.Async(), 120, 0.5, seed=3, eval_every=10)
    b = st.simulate(p, _straggler(), st.Async(), 120, 0.5, seed=3, eval_every=10)
    c = st.simulate(p, _straggler(), st.Async(), 120, 0.5, seed=4, eval_every=10)
    np.testing.assert_array_equal(a.loss, b.loss)
    np.testing.assert_array_equal(a.staleness, b.staleness)
    assert not np.array_equal(a.loss, c.loss)


def test_straggler_updates_are_the_stalest():
    r = st.simulate(st.logreg_problem(), _straggler(), st.Async(), 300, 0.5, 0, eval_every=20)
    slow = r.staleness[r.worker == 0]
    fast = r.staleness[r.worker != 0]
    assert slow.mean() > 5 * fast.mean()
    assert r.staleness[5:].mean() == pytest.approx(5, abs=0.6), "mean staleness is n - 1"


def test_sync_is_bounded_delay_zero_wait():
    p, speeds = st.logreg_problem(), _straggler()
    sync = st.simulate(p, speeds, st.Sync(), 40, 0.5, 0)
    delay0 = st.simulate(p, speeds, st.BoundedDelay(0, "wait"), 40, 0.5, 0)
    np.testing.assert_array_equal(sync.loss, delay0.loss)
    assert (sync.staleness == 0).all() and (sync.worker == -1).all()
    # every step waits for the straggler (8 s, jitter sigma 0.1)
    assert np.diff(sync.time).mean() == pytest.approx(8.0, rel=0.1)
    assert sync.idle_time[1:].min() > 0.5 * sync.wall_clock, "fast workers idle most of the time"


@pytest.mark.parametrize("bound", [2, 5, 12])
def test_bounded_wait_never_exceeds_the_bound(bound):
    r = st.simulate(
        st.logreg_problem(),
        _straggler(),
        st.BoundedDelay(bound, "wait"),
        200,
        0.5,
        0,
        eval_every=20,
    )
    assert r.updates == 200 and r.staleness.max() <= bound
    assert r.dropped_staleness.size == 0
    assert r.idle_time.sum() > 0, "the bound is enforced by waiting"


def test_bounded_drop_discards_only_too_stale_gradients():
    r = st.simulate(
        st.logreg_problem(),
        _straggler(),
        st.BoundedDelay(8, "drop"),
        200,
        0.5,
        0,
        eval_every=20,
    )
    assert r.staleness.max() <= 8
    assert r.dropped_staleness.size > 0 and r.dropped_staleness.min() > 8
    assert r.discarded_fraction[0] > 0.9, "the straggler's compute is all wasted"
    assert r.discarded_fraction[1:].max() < 0.1
    assert r.idle_time.sum() == 0


def test_server_momentum_is_heavy_ball():
    # one worker, exact gradients: the simulator must reproduce the heavy-ball recursion
    p = st.quadratic_problem(3, 5.0)
    r = st.simulate(p, st.WorkerSpeeds.homogeneous(1), st.Async(), 50, 0.3, 0, momentum=0.5)
    h = p.module.h.numpy().astype(np.float64)
    x, v = np.ones(3), np.zeros(3)
    for _ in range(50):
        v = 0.5 * v + h * x
        x = x - 0.3 * v
    np.testing.assert_allclose(r.final_params, x, rtol=1e-4, atol=1e-6)


def test_bursts_raise_and_lower_staleness():
    r = st.simulate(
        st.quadratic_problem(4, 4.0, noise=0.5),
        st.WorkerSpeeds.bursts(3, 6, 40, 0.3),
        st.Async(),
        600,
        0.05,
        0,
        eval_every=10,
    )
    in_burst = ((r.time % 40) < 12) & ((r.time % 40) > 3)
    out_burst = (r.time % 40) > 16
    assert r.staleness[in_burst].mean() > r.staleness[out_burst].mean() + 3


def test_bad_input_gives_clear_errors():
    p = st.quadratic_problem(2, 2.0)
    speeds = st.WorkerSpeeds.homogeneous(2)
    with pytest.raises(st.StalenessConfigError, match=">= 0"):
        st.BoundedDelay(-1)
    with pytest.raises(st.StalenessConfigError, match="int"):
        st.BoundedDelay(2.5)
    with pytest.raises(st.StalenessConfigError, match="mode"):
        st.BoundedDelay(2, "skip")
    with pytest.raises(st.StalenessConfigError, match="at least one worker"):
        st.WorkerSpeeds.homogeneous(0)
    with pytest.raises(st.StalenessConfigError, match="at least one worker"):
        st.WorkerSpeeds(())
    for lr in (math.nan, math.inf, -0.1, 0.0):
        with pytest.raises(st.StalenessConfigError, match="lr"):
            st.simulate(p, speeds, st.Async(), 10, lr, 0)
    with pytest.raises(st.StalenessConfigError, match="updates"):
        st.simulate(p, speeds, st.Async(), 0, 0.1, 0)
    with pytest.raises(st.StalenessConfigError, match="lam"):
        st.DelayCompensated(-1.0)
    with pytest.raises(st.StalenessConfigError, match="weight function"):
        st.simulate(p, speeds, st.StalenessAwareLR(lambda s: math.nan), 10, 0.1, 0)


def test_diverging_run_is_marked_not_hung():
    p = st.quadratic_problem(2, 2.0)
    r = st.simulate(p, st.WorkerSpeeds.homogeneous(4), st.Async(), 10_000, 1.5, 0)
    assert r.diverged and r.updates < 10_000
    # loss overflows to inf
    r = st.simulate(
        p, st.WorkerSpeeds.homogeneous(2), st.Async(), 10_000, 1e30, 0, diverge_factor=math.inf
    )
    assert r.diverged and not math.isfinite(r.final_loss) and r.updates < 10_000


def test_event_budget_stops_a_run_that_cannot_finish():
    with pytest.raises(st.SimulationStalledError, match="max_events"):
        st.simulate(
            st.quadratic_problem(2, 2.0),
            _straggler(),
            st.BoundedDelay(0, "drop"),
            1000,
            0.1,
            0,
            max_events=50,
        )


@pytest.mark.parametrize("policy", [st.Async(), st.Sync(), st.StalenessAwareLR()])
def test_a_time_budget_keeps_exactly_the_updates_within_it(policy):
    quad, speeds = st.quadratic_problem(4, 5.0), st.WorkerSpeeds.lognormal(4, 1.0)
    full = st.simulate(quad, speeds, policy, 60, 0.3, seed=2, eval_every=1)
    budget = float(full.time[len(full.time) // 2]) + 1e-9  # halfway through the full run
    kept = int(np.sum(full.time <= budget))
    cut = st.simulate(quad, speeds, policy, 10_000, 0.3, seed=2, eval_every=7, until=budget)
    assert cut.updates == kept and cut.time[-1] <= budget
    np.testing.assert_array_equal(cut.staleness, full.staleness[:kept])
    assert cut.loss_at[-1] == kept  # the loss is measured where the budget stopped the run
    assert cut.final_loss == pytest.approx(full.loss[kept], rel=1e-6)
    assert cut.config.until == budget


def test_at_equal_time_sync_applies_fewer_updates_than_async():
    quad, speeds = st.quadratic_problem(4, 5.0), st.WorkerSpeeds.homogeneous(4)
    sync = st.simulate(quad, speeds, st.Sync(), 10_000, 0.5, seed=0, until=10.0)
    async_ = st.simulate(quad, speeds, st.Async(), 10_000, 0.5, seed=0, until=10.0)
    assert (sync.updates, async_.updates) == (10, 40)  # one round per second against 4 gradients


@pytest.mark.parametrize("until", [0.0, -1.0, math.inf, math.nan, "10"])
def test_a_bad_time_budget_is_refused(until):
    with pytest.raises(st.StalenessConfigError, match="until"):
        st.simulate(st.quadratic_problem(2), st.WorkerSpeeds.homogeneous(2), st.Async(), 5, 0.1, 0,
                    until=until)  # fmt: skip
