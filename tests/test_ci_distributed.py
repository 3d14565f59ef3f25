"""Chapter 3's distributed tier: two real gloo ranks train the tiny model under DDP.

Skip rules: the whole module is skipped where torch has no distributed package or no gloo
backend (``gloo_unavailable`` says which); select it with ``-m distributed``, leave it out
with ``-m "not distributed"``. It costs the ranks' start-up, a few seconds.
"""

import pytest

from mlinfra_lab.ci import DDP_REGRESSIONS, DdpCheckError, ddp_check, gloo_unavailable

_reason = gloo_unavailable()
pytestmark = [
    pytest.mark.ci,
    pytest.mark.distributed,
    pytest.mark.skipif(_reason is not None, reason=_reason or ""),
]


def test_two_gloo_ranks_agree_exactly_and_match_one_process():
    report = ddp_check(world_size=2, steps=5, seed=0)
    # One all-reduce hands every rank the same averaged gradient: equality is right here.
    assert report.ranks_identical
    # Against one process the gradient sum is reordered (two halves, then the average): a
    # few float32 roundings per step, far below what a wrong shard or a summed gradient moves.
    assert report.max_param_diff < 1e-6
    assert report.losses == pytest.approx(report.single_losses, rel=1e-5)


@pytest.mark.parametrize("bug", sorted(DDP_REGRESSIONS))
def test_an_injected_bug_in_the_distributed_path_fails_the_check(bug):
    report = ddp_check(world_size=2, steps=5, seed=0, regression=bug)
    # The ranks still agree (they all got the same wrong gradient); one process disagrees.
    assert report.ranks_identical
    assert report.max_param_diff > 1e-4


def test_a_world_size_that_does_not_split_the_batch_is_refused_before_any_process_starts():
    with pytest.raises(DdpCheckError, match="must divide the batch of 10 examples"):
        ddp_check(world_size=3)
    with pytest.raises(DdpCheckError, match="steps must be >= 1"):
        ddp_check(steps=0)
    with pytest.raises(DdpCheckError, match="unknown regression 'typo'; known: sum-hook"):
        ddp_check(regression="typo")
