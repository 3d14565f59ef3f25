"""Run a gradient-synchronisation hook of your own on N real gloo ranks, over the emulated link.

Contract: `run_grad_sync(attach, world_size, bucket_bytes)` forks `world_size` processes on
this machine, joins them in a gloo process group, and on each builds the same seeded MLP
(`sync_model`), calls ``finish = attach(model, bucket_bytes)`` once, then trains `steps`
steps: forward, ``loss.backward()``, ``finish()``. It returns one `RankSync` per rank, in
rank order, made of plain values: every step's gradients as each rank holds them after
``finish()``, the step's events in the order they happened (each parameter's gradient ready,
each all-reduce launched or waited for, backward's end, ``finish()``'s end), and the
seconds of backward and of exposed communication (``finish()``). `reference_grads` is what
the gradients must be: the mean over ranks of each rank's local gradient, computed in this
process without any communication. A rank that raises or hangs ends the run with
`GradSyncError` naming it (a ``NotImplementedError``, an exercise not yet written, stays one).

What ``attach`` may do: register hooks on the model's parameters
(``register_post_accumulate_grad_hook``) and call ``dist.all_reduce(tensor, async_op=True)``
on flat buffers, keeping the handle it returns and calling ``handle.wait()`` later. Inside
the ranks ``torch.distributed.all_reduce`` is the emulated link: the real gloo all-reduce,
plus a delay so that each call occupies one shared link for ``alpha_ms`` plus its ring
traffic at ``link_mbps`` (the harness's emulated link, plus a latency per call), buckets
queueing one after another. A call and every ``wait()`` are recorded as events.

Design decisions:
- *fork*, not the harness's forkserver: ``attach`` is usually a function defined in a
  notebook, which a fresh process could not import; a forked rank inherits it. The ranks
  use one intra-op thread each and never touch the parent's kernel (results come back
  through a pipe), so forking a kernel is safe here on Linux (Colab included). On macOS a
  forked child of a process with threads can crash (why Python spawns there by default):
  run the lab on Linux.
- Events are ordered, not only timed: a check that "bucket k was launched before backward
  ended and before the next gradient was ready" reads the order of events on one thread
  (the autograd engine runs the hooks synchronously on CPU), so it holds however loaded the
  machine is. The times are for measuring and drawing, never for pass/fail.
- The model's backward is slowed by a sleep per layer (``compute_ms``): a stand-in for a
  GPU's backward, long enough that a bucket's all-reduce can hide under it. Our own hooks
  are registered before ``attach`` runs, so each "ready" event precedes every hook of yours
  on the same parameter.
- The rendezvous store is served by the calling process on a port the system assigns, so
  runs side by side (other notebooks, other tests) never race for a port.
- Each rank's data are drawn from (seed, rank, step): ranks see different batches, so an
  average over the wrong number of ranks, or a missing gradient, changes the result.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "GradSyncError",
    "RankSync",
    "reference_grads",
    "run_grad_sync",
    "sync_after_backward",
    "sync_model",
]

DEFAULT_WIDTHS = (64, 96, 96, 96, 96, 8)  # an MLP of five layers: input 64, output 8
BATCH = 16
REFERENCE_TIMEOUT_S = 60.0  # the reference takes well under a second; a hang becomes an error


class GradSyncError(MlinfraError, RuntimeError):
    """A rank raised or stopped making progress; the message names it and what it raised."""


@dataclass(frozen=True)
class RankSync:
    """What one rank saw: its gradients after ``finish()`` and the events of each step.

    ``events[s]`` is step s's list of ``(kind, value, t)`` in the order they happened, t in
    seconds from the step's start: ``("ready", i, t)`` parameter i's gradient was accumulated;
    ``("launch", numel, t)`` an ``all_reduce(async_op=True)`` of `numel` elements;
    ``("launch_blocking", numel, t)`` one without ``async_op``; ``("wait", k, t)`` the step's
    k-th launch was waited for; ``("backward_end", 0, t)``; ``("synced", 0, t)`` finish()
    returned. ``links[s]`` holds each launch's (launch, leaves the link, bytes) times.
    """

    rank: int
    world_size: int
    grads: list[list[np.ndarray]]  # [step][parameter], in model.parameters() order
    events: list[list[tuple[str, int, float]]]
    links: list[list[tuple[float, float, int]]]
    backward_s: list[float]
    exposed_s: list[float]  # finish()'s seconds: the communication backward did not hide


def sync_model(
    widths: Sequence[int] = DEFAULT_WIDTHS, seed: int = 0, compute_ms: float = 0.0
) -> Any:
    """The seeded MLP every rank builds (Linear, then Tanh, between each pair of widths).

    With `compute_ms` > 0 each layer's backward first sleeps that long: the emulated compute.
    """
    import torch
    from torch import nn

    class _Sleep(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            time.sleep(compute_ms / 1e3)
            return grad

    class _Slow(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _Sleep.apply(x) if compute_ms > 0 else x

    if len(widths) < 2:
        raise ValueError(f"widths needs an input and an output width at least, got {widths}")
    gen = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (w_in, w_out) in enumerate(zip(widths[:-1], widths[1:], strict=False)):
        linear = nn.Linear(w_in, w_out)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(w_out, w_in, generator=gen) / w_in**0.5)
            linear.bias.copy_(torch.randn(w_out, generator=gen) * 0.1)
        layers += [linear, _Slow()]
        if i < len(widths) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def _batch(widths: Sequence[int], seed: int, rank: int, step: int) -> tuple[Any, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank * 1_009 + step)
    return torch.randn(BATCH, widths[0], generator=gen), torch.randn(
        BATCH, widths[-1], generator=gen
    )


def _loss(model: Any, widths: Sequence[int], seed: int, rank: int, step: int) -> Any:
    x, y = _batch(widths, seed, rank, step)
    return ((model(x) - y) ** 2).mean()


def _reference_grads(
    world_size: int, widths: Sequence[int], seed: int, steps: int
) -> list[list[np.ndarray]]:
    model = sync_model(widths, seed)
    out = []
    for step in range(steps):
        total = [np.zeros(tuple(p.shape)) for p in model.parameters()]
        for rank in range(world_size):
            model.zero_grad(set_to_none=True)
            _loss(model, widths, seed, rank, step).backward()
            for acc, p in zip(total, model.parameters(), strict=True):
                acc += p.grad.double().numpy()
        out.append([acc / world_size for acc in total])
    return out


def _reference_child(args: tuple, conn: Any) -> None:
    try:
        import torch

        # A forked child inherits the parent's OpenMP team state but not its threads: a
        # parallel region here would wait for them forever. One thread never forms a team.
        torch.set_num_threads(1)
        conn.send(("ok", _reference_grads(*args)))
    except BaseException as err:  # noqa: BLE001  the parent raises it, with its text
        conn.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


def reference_grads(
    world_size: int, widths: Sequence[int] = DEFAULT_WIDTHS, seed: int = 0, steps: int = 2
) -> list[list[np.ndarray]]:
    """[step][parameter]: the mean over ranks of each rank's local gradient (float64).

    Computed in a forked process, as the ranks are: a backward pass in this process would
    start PyTorch's autograd threads on a machine with a GPU, and no rank forked after that
    can run a backward (`AUTOGRAD_FORK_HINT`)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_reference_child, args=((world_size, tuple(widths), seed, steps), send)
    )
    proc.start()
    send.close()
    try:
        if recv.poll(REFERENCE_TIMEOUT_S):
            status, value = recv.recv()
        else:
            status, value = "error", f"no result within {REFERENCE_TIMEOUT_S:g} s"
    except EOFError:
        status, value = "error", f"exited with code {proc.exitcode} and no result"
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    if status != "ok":
        raise GradSyncError(f"the reference run failed: {_explain(value)}")
    return value


AUTOGRAD_FORK_HINT = (
    "this kernel ran a backward pass before forking the ranks, and on a machine with a GPU "
    "that starts PyTorch's autograd threads, which a forked process cannot use; restart the "
    "kernel and run the cells in order, with no backward pass outside run_grad_sync (or hide "
    "the GPU: CUDA_VISIBLE_DEVICES= before the kernel starts)"
)


def _explain(text: str) -> str:
    """A rank's error text, with the autograd-and-fork failure explained."""
    if "autograd's threading in combination with fork" in text:
        return f"{text.splitlines()[0][:120]}... : {AUTOGRAD_FORK_HINT}"
    return text


def sync_after_backward(model: Any, bucket_bytes: int) -> Callable[[], None]:
    """The baseline: nothing during backward; after it, one blocking all-reduce per gradient."""
    import torch.distributed as dist

    def finish() -> None:
        world = dist.get_world_size()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(world)

    return finish


class _Link:
    """The emulated link of one rank, and the event log its calls write to."""

    def __init__(self, world_size: int, link_mbps: float, alpha_ms: float) -> None:
        self.world_size, self.rate, self.alpha = world_size, link_mbps * 1e6 / 8, alpha_ms / 1e3
        self.events: list[tuple[str, int, float]] = []
        self.links: list[tuple[float, float, int]] = []
        self.free_at, self.t0 = 0.0, time.perf_counter()

    def new_step(self) -> None:
        self.events, self.links, self.t0 = [], [], time.perf_counter()
        self.free_at = 0.0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def mark(self, kind: str, value: int = 0) -> None:
        self.events.append((kind, int(value), self.now()))

    def occupy(self, nbytes: int) -> float:
        """When a transfer launched now leaves the link (seconds from the step's start)."""
        n = self.world_size
        wire = nbytes * 2 * (n - 1) / n / self.rate if n > 1 else 0.0
        launched = self.now()
        self.free_at = max(self.free_at, launched) + self.alpha + wire
        self.links.append((launched, self.free_at, nbytes))
        return self.free_at


class _Handle:
    """What the emulated ``dist.all_reduce(..., async_op=True)`` returns."""

    def __init__(self, link: _Link, work: Any, done_at: float, index: int) -> None:
        self._link, self._work, self._done_at, self._index = link, work, done_at, index

    def wait(self, timeout: Any = None) -> bool:
        self._link.mark("wait", self._index)
        self._work.wait()
        delay = self._done_at - self._link.now()
        if delay > 0:
            time.sleep(delay)
        return True

    def is_completed(self) -> bool:
        return self._work.is_completed() and self._link.now() >= self._done_at

    def get_future(self) -> Any:
        raise NotImplementedError(
            "on the emulated link, keep the handle dist.all_reduce returned and call handle.wait()"
        )


def _install_link(link: _Link) -> None:
    """Make ``torch.distributed.all_reduce`` go through `link` in this (forked) rank."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    real = c10d.all_reduce

    def all_reduce(
        tensor: Any, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False
    ):
        index = sum(1 for e in link.events if e[0].startswith("launch"))
        link.mark("launch" if async_op else "launch_blocking", tensor.numel())
        done_at = link.occupy(tensor.numel() * tensor.element_size())
        work = real(tensor, op=op, group=group, async_op=True)
        handle = _Handle(link, work, done_at, index)
        if async_op:
            return handle
        handle.wait()
        return None

    dist.all_reduce = all_reduce
    c10d.all_reduce = all_reduce


def _rank_main(rank: int, world: int, port: int, args: dict[str, Any], conn: Any) -> None:
    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, world, is_master=False)
        dist.init_process_group(
            "gloo",
            store=store,
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=args["timeout_s"] + 30),
        )
        widths, seed = args["widths"], args["seed"]
        model = sync_model(widths, seed, args["compute_ms"])
        link = _Link(world, args["link_mbps"], args["alpha_ms"])
        for i, p in enumerate(model.parameters()):
            p.register_post_accumulate_grad_hook(lambda _p, i=i: link.mark("ready", i))
        _install_link(link)
        finish = args["attach"](model, args["bucket_bytes"])
        if not callable(finish):
            raise TypeError(f"attach(model, bucket_bytes) must return finish(), got {finish!r}")
        out: dict[str, Any] = {
            "grads": [],
            "events": [],
            "links": [],
            "backward_s": [],
            "exposed_s": [],
        }
        for step in range(args["steps"]):
            model.zero_grad(set_to_none=True)
            link.new_step()
            loss = _loss(model, widths, seed, rank, step)
            begin = time.perf_counter()
            loss.backward()
            link.mark("backward_end")
            mid = time.perf_counter()
            finish()
            end = time.perf_counter()
            link.mark("synced")
            missing = [i for i, p in enumerate(model.parameters()) if p.grad is None]
            if missing:
                raise ValueError(f"after finish() parameters {missing} have no gradient")
            out["grads"].append([p.grad.detach().numpy().copy() for p in model.parameters()])
            out["events"].append(list(link.events))
            out["links"].append(list(link.links))
            out["backward_s"].append(mid - begin)
            out["exposed_s"].append(end - mid)
        dist.barrier()
        dist.destroy_process_group()
        conn.send(("ok", out))
    except BaseException as err:  # noqa: BLE001 - the parent reports it, naming the rank
        lines = traceback.format_exception_only(type(err), err)
        with contextlib.suppress(Exception):
            conn.send(("error", type(err).__name__, "".join(lines).strip()[-600:], time.time()))
    finally:
        conn.close()


def _collect(pipes: list[Any], procs: list[Any], timeout_s: float) -> dict[int, Any]:
    """Every rank's reply; on a failure, the rank that failed first (its peers fail after it)."""
    world_size = len(pipes)
    replies: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    while len(replies) < world_size:
        waiting = [r for r in range(world_size) if r not in replies]
        for r in waiting:
            if pipes[r].poll(0.02):
                try:
                    replies[r] = pipes[r].recv()
                except EOFError:
                    code = procs[r].exitcode
                    replies[r] = (
                        "error",
                        "",
                        f"exited with code {code} and no result",
                        time.time(),
                    )
                if replies[r][0] == "error":  # let the others report, briefly, then stop
                    deadline = min(deadline, time.monotonic() + 1.0)
        failed = sorted((reply[3], r) for r, reply in replies.items() if reply[0] == "error")
        if failed and (time.monotonic() > deadline or len(replies) == world_size):
            r = failed[0][1]
            _, kind, text, _ = replies[r]
            if kind == "NotImplementedError":  # an exercise not written yet
                raise NotImplementedError(f"rank {r}: {text}")
            raise GradSyncError(f"rank {r} of {world_size} failed: {_explain(text)}")
        if time.monotonic() > deadline:
            raise GradSyncError(
                f"ranks {waiting} of {world_size} returned nothing within {timeout_s:g} s (a rank "
                "stuck in a collective holds up the others at the next one): a hook "
                "that waits for an all-reduce the other ranks never launch (a different bucket "
                "order on each rank?), or a launch with no wait()"
            )
    return replies


def run_grad_sync(
    attach: Callable[[Any, int], Callable[[], None]],
    world_size: int,
    bucket_bytes: int,
    widths: Sequence[int] = DEFAULT_WIDTHS,
    seed: int = 0,
    steps: int = 2,
    compute_ms: float = 4.0,
    link_mbps: float = 50.0,
    alpha_ms: float = 2.0,
    timeout_s: float = 30.0,  # under a grading cell's 60 s, so this message is the one shown
) -> list[RankSync]:
    """Train `steps` steps on `world_size` forked gloo ranks with ``attach``'s hooks (see above)."""
    import multiprocessing as mp

    if not 1 <= world_size <= 8:
        raise ValueError(f"world_size must be 1 to 8 local ranks, got {world_size}")
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    args = {
        "attach": attach,
        "bucket_bytes": int(bucket_bytes),
        "widths": tuple(int(w) for w in widths),
        "seed": int(seed),
        "steps": int(steps),
        "compute_ms": float(compute_ms),
        "link_mbps": float(link_mbps),
        "alpha_ms": float(alpha_ms),
        "timeout_s": float(timeout_s),
    }
    ctx = mp.get_context("fork")
    import torch.distributed as dist

    # The rendezvous lives here, on a port the system picked: no port to race for.
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False)
    port = store.port
    pipes = [ctx.Pipe(duplex=False) for _ in range(world_size)]
    procs = [
        ctx.Process(target=_rank_main, args=(r, world_size, port, args, pipes[r][1]), daemon=True)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    for _, send in pipes:
        send.close()
    try:
        replies = _collect([recv for recv, _ in pipes], procs, timeout_s)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)
        del store
    return [
        RankSync(
            rank=r,
            world_size=world_size,
            grads=replies[r][1]["grads"],
            events=[
                [(str(k), int(v), float(t)) for k, v, t in ev] for ev in replies[r][1]["events"]
            ],
            links=[
                [(float(a), float(b), int(n)) for a, b, n in ls] for ls in replies[r][1]["links"]
            ],
            backward_s=replies[r][1]["backward_s"],
            exposed_s=replies[r][1]["exposed_s"],
        )
        for r in range(world_size)
    ]
