"""The distributed CI tier: the tiny model trained by real DDP ranks on the CPU, checked against one process.

Contract: ``ddp_check(world_size=2, steps=5, seed=0)`` starts `world_size` processes with
``torch.multiprocessing``, joins them in a gloo process group, trains the tiny model under
``DistributedDataParallel`` with each rank on its shard of every batch, trains the same
model in this process on the whole batches, and returns a `DdpReport`: whether every rank
ended with bit-identical parameters, and how far those are from the single process's.

Design decisions:
- What it proves: DDP averages the ranks' gradients, so with the mean loss and equal shards
  the ranks take exactly the single process's steps, up to the order of the gradient sums.
  Hence two checks of different kinds: ranks agree *exactly* (one all-reduce gives every
  rank the same bits), and DDP matches one process *within a band* (the sum is reordered).
  A bug in the distributed path (a rank on the wrong shard, a gradient summed rather than
  averaged, a rank that skips the broadcast of the initial weights) breaks one or the other;
  ``regression="sum-hook"`` injects the second, a comm hook that forgets to divide.
- Cheap on purpose: dropout 0 and no augmentation (so nothing random differs between the
  ranks and the single run), a fixed batch order, a few steps, one intra-op thread per rank.
  The cost is the processes' start-up (torch's import), a few seconds on 2 cores.
- Launch: ``torch.multiprocessing.start_processes`` with the ``spawn`` start method (what
  ``mp.spawn`` does, and the only method on every platform); a forked child of a process
  that already ran OpenMP kernels can hang in its first parallel region. The ranks meet
  through a rendezvous *file* in a temporary folder, not a TCP port: two CI jobs on one
  host cannot collide on a port picked at random. ``torchrun --standalone --nproc_per_node=2``
  would launch the same rank function through environment variables instead.
- ``world_size=1`` runs one rank through the same code (the size-1 path of every
  distributed wrapper); ``gloo_unavailable()`` gives the reason to skip where torch was
  built without distributed support or gloo.

Reference: PyTorch's DDP notes (gradient averaging by all-reduce, the initial broadcast).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = ["DDP_REGRESSIONS", "DdpCheckError", "DdpReport", "ddp_check", "gloo_unavailable"]

_BATCH = 10  # examples per step, split evenly over the ranks
# Bugs ddp_check(regression=...) can inject into the distributed path, to show the tier fail.
DDP_REGRESSIONS: dict[str, str] = {
    "sum-hook": "a custom comm hook that all-reduces the gradients and forgets to divide",
}


class DdpCheckError(MlinfraError, RuntimeError):
    """A rank failed or the request cannot run; the message says which and what to do."""


@dataclass(frozen=True)
class DdpReport:
    """What the distributed tier measured: rank agreement and distance to one process."""

    world_size: int
    steps: int
    losses: tuple[float, ...]  # mean over the ranks of each step's shard loss
    single_losses: tuple[float, ...]  # the same steps in one process, whole batches
    ranks_identical: bool  # every rank's final parameters bit-identical to rank 0's
    max_param_diff: float  # max |DDP rank 0 - single process| over all parameters

    def __str__(self) -> str:
        return (
            f"DDP on {self.world_size} gloo rank(s), {self.steps} steps: ranks "
            f"{'bit-identical' if self.ranks_identical else 'DIFFER'}; max |DDP - one process| "
            f"over the parameters {self.max_param_diff:.3g}"
        )


def gloo_unavailable() -> str | None:
    """Why the distributed tier cannot run here (a reason for ``pytest.skip``), or None."""
    import torch.distributed as dist

    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if not dist.is_gloo_available():
        return "this torch build has no gloo backend"
    return None


def _sum_hook(state, bucket):  # noqa: ANN001 (DDP rejects string annotations)
    """The injected bug: DDP's all-reduce hook without the division by the world size."""
    import torch.distributed as dist

    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _train(
    steps: int, seed: int, rank: int, world: int, regression: str | None = None
) -> tuple[list[float], list[float]]:
    """Train the tiny model on this rank's shard of each batch; DDP when a group exists."""
    import torch
    import torch.distributed as dist

    from mlinfra_lab.ci.seeding import seed_everything
    from mlinfra_lab.ci.train import TrainConfig, build_tiny_model, make_dataset, regression_loss

    seed_everything(seed)
    config = TrainConfig(dropout=0.0)  # nothing random may differ between the ranks
    x, y = make_dataset(config.examples, config.features)  # (N, F), (N, 1): same on every rank
    model = build_tiny_model(config)
    if dist.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
        if regression == "sum-hook":
            model.register_comm_hook(None, _sum_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9)
    losses = []
    for step in range(steps):
        batch = [(step * _BATCH + i) % config.examples for i in range(_BATCH)]
        shard = batch[rank::world]  # (B / world,) examples of this rank
        loss = regression_loss(model(torch.from_numpy(x[shard])), torch.from_numpy(y[shard]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP: all-reduces and averages the gradients here
        optimizer.step()
        losses.append(float(loss.item()))
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return losses, params.tolist()


def _rank(
    rank: int,
    world: int,
    rendezvous: str,
    steps: int,
    seed: int,
    outdir: str,
    regression: str | None,
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # N ranks on a few cores must not each start a thread pool
    dist.init_process_group(
        "gloo",
        init_method=f"file://{rendezvous}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    try:
        losses, params = _train(steps, seed, rank, world, regression)
        Path(outdir, f"rank{rank}.json").write_text(json.dumps([losses, params]))
    finally:
        dist.destroy_process_group()


def ddp_check(
    world_size: int = 2, steps: int = 5, seed: int = 0, regression: str | None = None
) -> DdpReport:
    """Run the tiny model on `world_size` gloo ranks and on one process; compare them.

    `regression` injects one bug of `DDP_REGRESSIONS` into the ranks (never into the single
    process), so a test can show that the check fails when the distributed path is wrong.
    """
    import torch.multiprocessing as mp

    if world_size < 1 or _BATCH % world_size:
        raise DdpCheckError(
            f"world_size must divide the batch of {_BATCH} examples (1, 2, 5 or 10), "
            f"got {world_size}"
        )
    if steps < 1:
        raise DdpCheckError(f"steps must be >= 1, got {steps}")
    if regression is not None and regression not in DDP_REGRESSIONS:
        raise DdpCheckError(
            f"unknown regression {regression!r}; known: {', '.join(DDP_REGRESSIONS)}"
        )
    reason = gloo_unavailable()
    if reason is not None:
        raise DdpCheckError(f"{reason}: the distributed tier cannot run here; skip it")
    with tempfile.TemporaryDirectory(prefix="mlinfra-ddp-") as tmp:
        try:
            mp.start_processes(
                _rank,
                args=(world_size, str(Path(tmp, "rendezvous")), steps, seed, tmp, regression),
                nprocs=world_size,
                start_method="spawn",
            )
        except Exception as err:  # torch wraps a rank's exception with its traceback
            raise DdpCheckError(f"a DDP rank failed: {err}") from err
        ranks: list[Any] = [
            json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world_size)
        ]
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks: a thread count changes the last bits (spread.py)
    try:
        single_losses, single_params = _train(steps, seed, rank=0, world=1)
    finally:
        torch.set_num_threads(saved)
    params0 = ranks[0][1]
    mean_losses = tuple(sum(r[0][s] for r in ranks) / world_size for s in range(steps))
    return DdpReport(
        world_size=world_size,
        steps=steps,
        losses=mean_losses,
        single_losses=tuple(single_losses),
        ranks_identical=all(r[1] == params0 for r in ranks),
        max_param_diff=max(abs(a - b) for a, b in zip(params0, single_params, strict=True)),
    )
