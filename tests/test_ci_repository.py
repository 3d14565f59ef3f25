"""Chapter 3 / Lab 3: the small training repository that Lab 3's CI gate is graded on.

The lab's hidden tests rest on three facts checked here on a few specs: seeded runs repeat
bit for bit (and a flaky spec does not), every legitimate change stays within a few times
the run's own rounding error (its distance from the float64 run), and every bug moves the
curve far beyond it (in mixed precision, the bugs the lab asks a gate to catch).
"""

import pytest

from mlinfra_lab.ci import BUGS, LEGITIMATE_CHANGES, RepoSpec, make_repository, seed_everything

pytestmark = pytest.mark.ci

SPECS = {
    "float32": RepoSpec(steps=24),
    "float32, small loss units": RepoSpec(steps=24, lr=0.04, loss_units=1e-3, hidden=16),
    "mixed precision": RepoSpec(steps=24, mixed_precision=True, loss_units=300.0),
}
# What Lab 3's hidden tests ask a gate to reject in mixed precision (the rest drown there).
MIXED_PRECISION_BUGS = ("momentum-0.8", "same-order")


def _run(train, seed=3, **knobs):
    seed_everything(seed)
    return train(**knobs)


def _distance(a, b):
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_seeded_runs_repeat_and_a_flaky_repository_does_not():
    train = make_repository(RepoSpec(steps=12))
    assert _run(train) == _run(train)
    assert _run(train, seed=4) != _run(train)
    flaky = make_repository(RepoSpec(steps=12, flaky=True))
    assert _run(flaky) != _run(flaky), "the unseeded jitter must make seeded runs disagree"


def test_loss_units_scale_the_reported_loss_only():
    plain = _run(make_repository(RepoSpec(steps=12)))
    scaled = _run(make_repository(RepoSpec(steps=12, loss_units=1000.0)))
    assert scaled == [1000.0 * v for v in plain]


def test_threads_are_restored():
    import torch

    saved = torch.get_num_threads()
    _run(make_repository(RepoSpec(steps=3), "runner-threads"), threads=2)
    assert torch.get_num_threads() == saved


@pytest.mark.parametrize("name", list(SPECS))
def test_legitimate_changes_stay_near_the_rounding_error_and_bugs_leave_it(name):
    spec = SPECS[name]
    base = _run(make_repository(spec))
    rounding = _distance(_run(make_repository(spec), dtype="float64"), base)
    assert rounding > 0.0
    for change in LEGITIMATE_CHANGES:
        moved = _distance(_run(make_repository(spec, change)), base)
        assert moved <= 3.0 * rounding, f"{change}: {moved:.3g} vs rounding {rounding:.3g}"
    bugs = MIXED_PRECISION_BUGS if spec.mixed_precision else tuple(BUGS)
    for bug in bugs:
        moved = _distance(_run(make_repository(spec, bug)), base)
        assert moved >= 25.0 * rounding, f"{bug}: {moved:.3g} vs rounding {rounding:.3g}"


def test_bad_arguments_say_what_is_known():
    with pytest.raises(ValueError, match="known: micro-batches"):
        make_repository(change="typo")
    with pytest.raises(ValueError, match="dtype must be"):
        make_repository(RepoSpec(steps=2))(dtype="float16")
    with pytest.raises(ValueError, match="batch >= 2"):
        RepoSpec(batch=1)
