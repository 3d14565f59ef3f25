"""Seed sweeps and tuned baselines: the comparisons chapter 5 makes, over seeds."""

import math

import numpy as np
import pytest

from mlinfra_lab import staleness as st

pytestmark = pytest.mark.staleness

# Chapter 5's straggler scenario: two of eight workers 10x slower, logistic regression on the
# digits, target loss 0.12 within 300 updates.
SEEDS = (0, 1, 2, 3, 4)
LR, TARGET, UPDATES = 6.0, 0.12, 300


@pytest.fixture(scope="module")
def scenario():
    return st.logreg_problem(), st.WorkerSpeeds.straggler(8, slow_factor=10, which=(0, 1))


@pytest.fixture(scope="module")
def async_grid(scenario):
    problem, speeds = scenario
    return st.lr_sweep(
        problem, speeds, st.Async(), (0.5, 1.0, 2.0, 4.0, LR), SEEDS, UPDATES, TARGET,
        eval_every=5, progress=False,
    )  # fmt: skip


def test_spread_median_range_and_never():
    s = st.Spread.of([3.0, 1.0, 2.0, math.inf, 5.0])
    assert (s.median, s.low, s.high, s.n) == (3.0, 1.0, math.inf, 5)
    assert s.text() == "3 (1 to never)"
    assert st.Spread.of([math.inf] * 3).text() == "never (never to never)"
    with pytest.raises(st.StalenessConfigError, match="NaN"):
        st.Spread.of([1.0, float("nan")])


def test_matched_lr_and_its_errors():
    assert st.matched_lr(6.0, 5.0) == pytest.approx(1.0)
    assert st.matched_lr(2.0, 0.0) == 2.0
    with pytest.raises(st.StalenessConfigError, match="mean_staleness"):
        st.matched_lr(1.0, -1.0)
    with pytest.raises(st.StalenessConfigError, match="lr"):
        st.matched_lr(0.0, 3.0)


def test_bad_arguments_are_refused(scenario):
    problem, speeds = scenario
    for seeds in ((), (0, 0), (0.5,)):
        with pytest.raises(st.StalenessConfigError, match="seeds"):
            st.seed_sweep(problem, speeds, st.Async(), 1.0, seeds, 10, TARGET, progress=False)
    with pytest.raises(st.StalenessConfigError, match="target"):
        st.seed_sweep(problem, speeds, st.Async(), 1.0, (0,), 10, -1.0, progress=False)
    with pytest.raises(st.StalenessConfigError, match="lrs"):
        st.lr_sweep(problem, speeds, st.Async(), (1.0, 1.0), (0,), 10, TARGET, progress=False)
    with pytest.raises(st.StalenessConfigError, match="Policy"):
        st.compare_policies(problem, speeds, {"x": 3}, 1.0, (0,), 10, TARGET, progress=False)


def test_a_sweep_is_deterministic_and_seeds_differ(scenario):
    problem, speeds = scenario
    a, b = (
        st.seed_sweep(problem, speeds, st.Async(), 2.0, (0, 1, 2), 60, 1.0, progress=False)
        for _ in range(2)
    )
    assert a.seeds == [0, 1, 2]
    for x, y in zip(a.results, b.results, strict=True):
        np.testing.assert_array_equal(x.loss, y.loss)
        np.testing.assert_array_equal(x.staleness, y.staleness)
    assert len({float(r.final_loss) for r in a.results}) == 3  # three seeds, three draws


def test_loss_band_brackets_the_median(scenario):
    problem, speeds = scenario
    sw = st.seed_sweep(problem, speeds, st.Async(), 2.0, (0, 1, 2), 60, 1.0, progress=False)
    grid, med, lo, hi = sw.loss_band()
    assert grid.shape == med.shape == lo.shape == hi.shape == sw.results[0].loss_at.shape
    assert np.all(lo <= med) and np.all(med <= hi) and np.any(lo < hi)
    with pytest.raises(st.StalenessConfigError, match="quantity"):
        sw.spread("loss")


def test_a_diverged_run_counts_as_never_and_infinite_loss():
    quad = st.quadratic_problem(dim=2, condition=2.0)
    sw = st.seed_sweep(
        quad, st.WorkerSpeeds.homogeneous(5), st.Async(), 1.5 * st.stability_bound(4),
        (0, 1), 400, 1e-12, eval_every=10, progress=False,
    )  # fmt: skip
    assert all(r.diverged for r in sw.results)
    assert np.all(np.isinf(sw.final_loss)) and np.all(np.isinf(sw.updates_to_target))
    _, med, _, _ = sw.loss_band()
    assert med[-1] > 1e2 * med[0]  # the band shows the blow-up where the runs stopped


def test_the_tuned_rate_is_the_best_of_its_grid(async_grid):
    best = async_grid.best
    key = (best.spread("updates").median, best.spread("final_loss").median)
    for sw in async_grid.sweeps:
        assert key <= (sw.spread("updates").median, sw.spread("final_loss").median), sw.label
    assert async_grid.lrs == [0.5, 1.0, 2.0, 4.0, LR]
    assert not async_grid.best_at_edge, f"best lr {best.lr} sits at the grid's edge"


def test_tuned_async_beats_async_at_the_chapters_rate(async_grid):
    """The chapter's confounder: at lr = 6 Async is far from its best rate."""
    at_6 = next(s for s in async_grid.sweeps if s.lr == LR).updates_to_target
    tuned = async_grid.best.updates_to_target
    assert np.median(tuned) <= 0.6 * np.median(at_6), (tuned, at_6)
    assert tuned.max() < at_6.min(), "the ranking should hold on every seed, not only the median"


def test_down_weighting_buys_nothing_beyond_a_tuned_or_matched_rate(scenario, async_grid):
    """What the chapter concludes on its scenario (same grids, same seeds): 1/(1+s) needs more
    updates than Async at the tuned rate and than Async at lr / (1 + mean staleness), at lr = 6
    and at its own best base rate."""
    problem, speeds = scenario
    aware = st.lr_sweep(
        problem, speeds, st.StalenessAwareLR(), (1.5, 3.0, LR, 12.0), SEEDS, UPDATES, TARGET,
        eval_every=5, progress=False,
    )  # fmt: skip
    at_6 = next(s for s in aware.sweeps if s.lr == LR)
    mean_s = float(np.median(async_grid.sweeps[-1].mean_staleness))
    matched = st.seed_sweep(
        problem, speeds, st.Async(), st.matched_lr(LR, mean_s), SEEDS, UPDATES, TARGET,
        eval_every=5, progress=False,
    )  # fmt: skip
    assert 5.0 < mean_s < 8.0  # n - 1 = 7, pulled below by the warm-up
    tuned = np.median(async_grid.best.updates_to_target)
    for rule in (at_6, aware.best):
        assert tuned < np.median(rule.updates_to_target), rule.label
        assert np.median(matched.updates_to_target) < np.median(rule.updates_to_target), rule.label
    # the rule's average step is larger than the matched one (Jensen: E[1/(1+s)] >= 1/(1+E[s]))
    assert np.all(at_6.mean_weight * LR > st.matched_lr(LR, mean_s))


def test_loss_at_budget_is_the_loss_when_the_budget_runs_out():
    quad, speeds = st.quadratic_problem(4, 5.0), st.WorkerSpeeds.straggler(4, 10.0)
    for policy in (st.Sync(), st.Async(), st.StalenessAwareLR()):
        run = st.simulate(quad, speeds, policy, 10_000, 0.4, seed=1, until=8.0)
        assert st.loss_at_budget(quad, speeds, policy, 0.4, 1, 8.0) == pytest.approx(run.final_loss)
    # A step far past the stability bound diverges: its loss at the budget is inf, not a number.
    unstable = 1.5 * st.stability_bound(3)
    homogeneous = st.WorkerSpeeds.homogeneous(4)
    assert st.loss_at_budget(quad, homogeneous, st.Async(), unstable, 0, 200.0) == math.inf
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(st.StalenessConfigError, match="budget"):
            st.loss_at_budget(quad, speeds, st.Async(), 0.4, 1, bad)
