"""Theory against simulation: the fixed-delay stability bound, the worked example, momentum."""

import math

import numpy as np
import pytest

from mlinfra_lab import staleness as st

pytestmark = pytest.mark.staleness


@pytest.mark.parametrize("tau", range(0, 11))
def test_stability_bound_is_where_the_delay_recursion_turns_unstable(tau):
    bound = st.stability_bound(tau)
    assert st.delay_spectral_radius(0.99 * bound, tau) < 1.0, "below the bound must be stable"
    assert st.delay_spectral_radius(1.01 * bound, tau) > 1.0, "above the bound must be unstable"


def test_stability_bound_known_values():
    assert st.stability_bound(0) == pytest.approx(2.0)  # plain gradient descent
    assert st.stability_bound(1) == pytest.approx(1.0)
    assert st.stability_bound(100) == pytest.approx(math.pi / (2 * 100), rel=0.01)


@pytest.mark.parametrize("tau", range(1, 11))
def test_simulator_converges_below_and_diverges_above_the_bound(tau):
    problem = st.quadratic_problem(dim=2, condition=2.0)  # exact gradients, top curvature 1
    speeds = st.WorkerSpeeds.homogeneous(tau + 1)  # every update is exactly tau stale
    updates = 300 + 100 * tau  # > 3.5 / (1 - spectral radius) at 0.95x: room to converge
    bound = st.stability_bound(tau)
    ok = st.simulate(
        problem,
        speeds,
        st.Async(),
        updates,
        0.95 * bound,
        seed=0,
        eval_every=10,
        diverge_factor=1e2,
    )
    assert set(ok.staleness[2 * tau + 2 :].tolist()) == {tau}, "homogeneous workers: fixed delay"
    assert not ok.diverged and ok.updates == updates
    assert ok.final_loss < 1e-3 * ok.loss[0], f"tau={tau}: 0.95x the bound should converge"
    bad = st.simulate(
        problem,
        speeds,
        st.Async(),
        updates,
        1.05 * bound,
        seed=0,
        eval_every=10,
        diverge_factor=1e2,
    )
    assert bad.diverged, f"tau={tau}: 1.05x the bound should diverge"
    assert bad.updates < updates, "a diverged run stops early"


def test_delayed_gd_agrees_with_spectral_radius():
    stable = st.delayed_gd(0.9 * st.stability_bound(3), 3, 3000)
    unstable = st.delayed_gd(1.1 * st.stability_bound(3), 3, 3000)
    assert abs(stable[-1]) < 1e-3 and abs(unstable[-1]) > 1e3


def test_worked_example_weights():
    policy = st.StalenessAwareLR()  # 1 / (1 + s)
    assert policy.scale(10) == pytest.approx(0.09, abs=0.005)  # "about 9%"
    assert policy.scale(1) == pytest.approx(0.5)  # "about 50%"
    assert policy.scale(0) == pytest.approx(1.0)


def test_worked_example_in_simulation_applies_the_weights():
    # 11 equal workers: after warm-up every update is 10 stale and must apply 1/11 of lr.
    r = st.simulate(
        st.quadratic_problem(4, 4.0),
        st.WorkerSpeeds.homogeneous(11),
        st.StalenessAwareLR(),
        60,
        lr=0.01,
        seed=0,
    )
    np.testing.assert_allclose(r.weight, 1.0 / (1.0 + r.staleness))
    assert r.staleness[0] == 0 and r.staleness[1] == 1 and r.weight[1] == pytest.approx(0.5)
    assert (r.staleness[20:] == 10).all() and r.weight[-1] == pytest.approx(1 / 11)


def test_first_order_bias_grows_with_staleness_and_lr():
    problem = st.logreg_problem()
    small = st.gradient_staleness_error(problem, 0.1, [1, 2, 4, 8], steps=8)
    large = st.gradient_staleness_error(problem, 0.2, [1, 2, 4, 8], steps=8)
    assert np.all(np.diff(small) > 0), "the gradient error must grow with staleness"
    assert np.all(large > small), "and with the learning rate"
    assert small[3] / small[0] == pytest.approx(8, rel=0.35), "roughly linearly in s"


def test_implicit_momentum_and_its_correction():
    assert st.implicit_momentum(7) == pytest.approx(1 - 1 / 8)  # M = 8, exponential times
    assert st.corrected_momentum(0.9, 7) == pytest.approx(0.2)  # (0.9 - .875) / .125
    assert st.corrected_momentum(0.5, 7) == 0.0
    assert st.corrected_momentum(0.5, 7, allow_negative=True) < 0
    with pytest.raises(st.StalenessConfigError):
        st.stability_bound(-1)
