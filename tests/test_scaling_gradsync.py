"""`run_grad_sync`: a student's gradient synchronisation on forked gloo ranks, judged by plain values.

Lab 2's exercise 3 grades a bucketed all-reduce from the gradients and the order of the events
these runs return; here the plain all-reduce and a hand-written bucketed one must give the
reference gradients, the events must say when each all-reduce was launched and waited for,
and a rank that fails must be named. Nothing here reads a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

from mlinfra_lab.scaling import (
    GradSyncError,
    RankSync,
    reference_grads,
    run_grad_sync,
    sync_after_backward,
)

WIDTHS = (7, 11, 5)  # two layers: parameters 0-3 are w1, b1, w2, b2


def one_bucket_in_hooks(model: Any, bucket_bytes: int) -> Any:
    """All gradients in one bucket, launched from the hook of the last one to be ready."""
    params = list(model.parameters())
    ready: list[Any] = []
    pending: list[Any] = []

    def on_ready(p: torch.Tensor) -> None:
        ready.append(p)
        if len(ready) == len(params):
            flat = torch.cat([q.grad.reshape(-1) for q in params])
            pending.append((dist.all_reduce(flat, async_op=True), flat))

    for p in params:
        p.register_post_accumulate_grad_hook(on_ready)

    def finish() -> None:
        for handle, flat in pending:
            handle.wait()
            flat.div_(dist.get_world_size())
            torch.nn.utils.vector_to_parameters(flat, [q.grad for q in params])
        pending.clear()
        ready.clear()

    return finish


def failing(model: Any, bucket_bytes: int) -> Any:
    if dist.get_rank() == 1:
        raise ValueError("rank one's hook is broken")
    return lambda: None


def waits_alone(model: Any, bucket_bytes: int) -> Any:
    """Rank 1 waits for an all-reduce that rank 0 never launches: the job hangs."""

    def finish() -> None:
        if dist.get_rank() == 1:
            dist.all_reduce(torch.ones(1), async_op=True).wait()

    return finish


def unwritten(model: Any, bucket_bytes: int) -> Any:
    raise NotImplementedError("bucketed_allreduce: write your solution here")


def _assert_reference(ranks: list[RankSync], world_size: int, seed: int) -> None:
    want = reference_grads(world_size, WIDTHS, seed, steps=2)
    assert [r.rank for r in ranks] == list(range(world_size))
    for r in ranks:
        for got, exp in zip(r.grads, want, strict=True):
            for g, e in zip(got, exp, strict=True):
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("attach", [sync_after_backward, one_bucket_in_hooks])
def test_both_syncs_give_the_mean_of_the_local_gradients(attach: Any) -> None:
    _assert_reference(run_grad_sync(attach, 3, 1, widths=WIDTHS, seed=5, compute_ms=0), 3, 5)


def test_one_rank_without_communication_keeps_its_local_gradient() -> None:
    _assert_reference(run_grad_sync(sync_after_backward, 1, 1, widths=WIDTHS, compute_ms=0), 1, 0)


def test_the_events_say_when_each_all_reduce_went_out() -> None:
    base, hooked = (
        run_grad_sync(attach, 2, 1, widths=WIDTHS, compute_ms=0)[0]
        for attach in (sync_after_backward, one_bucket_in_hooks)
    )
    for events in base.events:
        kinds = [k for k, _, _ in events]
        end = kinds.index("backward_end")
        assert sorted(v for k, v, _ in events[:end] if k == "ready") == [0, 1, 2, 3]
        assert kinds[end + 1 :] == ["launch_blocking", "wait"] * 4 + ["synced"]
    for events in hooked.events:
        kinds = [k for k, _, _ in events]
        assert kinds[4:] == ["launch", "backward_end", "wait", "synced"]
        assert events[4][1] == 7 * 11 + 11 + 11 * 5 + 5  # every element, in one launch
    assert all(len(links) == 1 for links in hooked.links)


def test_the_ranks_see_different_batches() -> None:
    one, two = reference_grads(1, WIDTHS), reference_grads(2, WIDTHS)
    assert not np.allclose(one[0][0], two[0][0])


def test_a_failing_rank_is_named() -> None:
    with pytest.raises(GradSyncError, match="rank 1 of 2 failed: ValueError: rank one's hook"):
        run_grad_sync(failing, 2, 1, widths=WIDTHS, compute_ms=0, timeout_s=30)


def test_a_hang_ends_with_a_message_naming_the_ranks_without_a_result() -> None:
    with pytest.raises(GradSyncError, match=r"ranks \[0, 1\] of 2 returned nothing within 3 s"):
        run_grad_sync(waits_alone, 2, 1, widths=WIDTHS, compute_ms=0, timeout_s=3)


def test_an_unwritten_exercise_stays_not_implemented() -> None:
    with pytest.raises(
        NotImplementedError, match=r"rank [01]: NotImplementedError: bucketed_allreduce"
    ):
        run_grad_sync(unwritten, 2, 1, widths=WIDTHS, compute_ms=0, timeout_s=30)


@pytest.mark.parametrize(("world_size", "bucket_bytes"), [(0, 1), (9, 1), (2, 0)])
def test_bad_arguments_are_refused_before_any_rank_starts(
    world_size: int, bucket_bytes: int
) -> None:
    with pytest.raises(ValueError, match="must be"):
        run_grad_sync(sync_after_backward, world_size, bucket_bytes)


def test_the_reference_runs_its_backward_in_another_process(monkeypatch):
    """A backward pass in the notebook's own process would start PyTorch's autograd threads
    on a GPU machine, and every rank forked after it would fail: the reference forks too."""
    import os

    from mlinfra_lab.scaling import gradsync

    pids: list[int] = []
    real = gradsync._reference_grads

    def spy(*args):
        pids.append(os.getpid())  # appended in the child: this process's list stays empty
        return real(*args)

    monkeypatch.setattr(gradsync, "_reference_grads", spy)
    grads = gradsync.reference_grads(world_size=2, steps=1)
    assert pids == []
    assert len(grads) == 1 and all(g.dtype.kind == "f" for g in grads[0])


def test_the_autograd_fork_failure_is_explained():
    from mlinfra_lab.scaling import gradsync

    text = (
        "RuntimeError: Unable to handle autograd's threading in combination with fork-based "
        "multiprocessing. See https://github.com/pytorch/pytorch/wiki/Autograd-and-Fork"
    )
    assert "restart the kernel" in gradsync._explain(text)
    assert gradsync._explain("ValueError: other") == "ValueError: other"


def test_the_reference_fork_survives_a_parent_that_used_openmp():
    """A parent whose OpenMP team has run (any large torch op on 2 threads) must not hang
    the forked reference: its child runs single-threaded."""
    import torch

    from mlinfra_lab.scaling import gradsync

    torch.tanh(torch.randn(2_000_000))  # starts the parent's OpenMP/MKL team
    grads = gradsync.reference_grads(world_size=2, steps=1)
    assert len(grads) == 1
