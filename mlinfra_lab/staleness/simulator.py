"""A discrete-event parameter server whose workers compute real gradients of real models.

Contract: ``simulate(problem, speeds, policy, updates, lr, seed, momentum=0.0)`` runs until
`updates` updates have been applied (or the loss diverges, or, with ``until=T``, simulated
time would pass T seconds) and returns a `SimResult`: the
staleness, weight, time and worker of every applied update, the training-loss trace, the
dropped gradients and each worker's busy, useful and idle time.

How it works: each worker pulls the server's parameters (version v), draws its own
minibatch, and finishes computing ``speeds``' duration later; an event queue delivers the
finished gradients in simulated-time order. An update applied at version v' with a gradient
pulled at v has staleness s = v' - v: the number of updates applied while it was computed.
The server then asks the `Policy` what to do: wait (bounded delay / sync), drop, scale
the step, or correct the gradient (DC-ASGD), and applies
``theta <- theta - lr * scale * correct(g)`` (through server-side momentum if given).
Every worker also has a *clock*, the number of iterations (gradients) it has finished; each
applied update records its clock gap, the gradient's iteration minus the slowest worker's
clock when it arrived, which is what stale synchronous parallel (`SSP`) bounds.

Design decisions:
- Gradients are real: ``Problem.batched_grads`` runs the PyTorch model at the worker's
  pulled parameters on its own minibatch. They are computed *lazily and in batches*: a
  gradient depends only on (pulled parameters, minibatch), both fixed at pull time, so when
  the server first needs one it computes every outstanding worker's gradient in a single
  vmapped call. The trajectory is identical to computing each at its own time; the Python
  overhead drops by about the number of workers. This is what makes 64 workers x 20,000
  updates run in a few seconds on a laptop CPU (``mlinfra-lab bench staleness``).
- The "wait" rule (bounded delay, measured in updates): the server never applies
  an update that would leave a pending gradient staler than ``max_staleness``. Workers whose
  pending gradient has reached the bound form the "limit group" (they all pulled the same
  version); nobody else's gradient is applied until the whole group has arrived, and then
  the group's gradients are averaged into one update. With ``max_staleness=0`` this is
  exactly synchronous data parallelism; it never deadlocks, and waiting is idle time.
- The "clock" rule (`SSP`, Ho et al. 2013, measured in iterations): each gradient is applied
  alone as it arrives; then its worker starts its next iteration only if it is at most
  ``clock_bound`` clocks ahead of the slowest worker, else it waits until the slowest catches
  up (`clocks.ClockGate`). The slowest worker never waits, so this cannot deadlock either.
  Elastic workers (``WorkerSpeeds.bursts``) are refused: an absent worker's clock stops.
- Torch runs single-threaded during a simulation (restored afterwards): with tensors this
  small, intra-op threads cost more than they save, badly so on a shared 2-core machine.
- Randomness: every worker owns a seeded stream for its minibatches and another for its
  durations; ties in time are broken by the order events were scheduled. Same seed, same run.
- A time budget (``until``) compares policies at equal simulated time, which is what a cluster
  pays for: the run applies every update that lands at or before ``until`` and stops at the
  first later event, measuring the loss there (the final loss is the loss at the budget). A
  policy that waits (`Sync`) gets fewer, better updates in that time; `Async` more, staler ones.
- Never a hang: a run whose loss becomes non-finite or grows past ``diverge_factor`` times its
  start is stopped and marked ``diverged``; a run that burns ``max_events`` gradient arrivals
  without finishing (e.g. "drop" with a bound no worker can meet) raises
  `SimulationStalledError`.

Caveats: communication time is folded into the compute time; the server applies updates
instantly. Loss is measured on the full training set every ``eval_every`` updates.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from mlinfra_lab.staleness.clocks import ClockGate
from mlinfra_lab.staleness.errors import SimulationStalledError, StalenessConfigError
from mlinfra_lab.staleness.policies import Policy
from mlinfra_lab.staleness.problems import Problem, single_thread
from mlinfra_lab.staleness.speeds import WorkerSpeeds

__all__ = ["SimConfig", "SimResult", "simulate"]

ABSENT = 1 << 62  # pulled version of a worker that is away (elastic speeds)


@dataclass(frozen=True)
class SimConfig:
    """Everything that determines a run; saved with its result."""

    problem: str
    speeds: str
    workers: int
    policy: str
    updates: int  # requested number of applied updates
    lr: float
    seed: int
    momentum: float  # server-side heavy-ball momentum (0: plain SGD)
    eval_every: int  # full training loss measured every this many updates
    diverge_factor: float  # loss above this times the initial loss marks divergence
    max_events: int  # gradient arrivals allowed before the run counts as stalled
    until: float | None = None  # simulated seconds: no update applied after this (None: no limit)


@dataclass(frozen=True, eq=False)
class SimResult:
    """One simulated run: per-update records, the loss trace and per-worker accounting."""

    config: SimConfig
    staleness: np.ndarray  # (U,) int, staleness of each applied update (max over a group)
    weight: np.ndarray  # (U,) the policy's factor on lr for that update
    worker: np.ndarray  # (U,) worker that pushed it; -1 for an averaged group (sync)
    clock_gap: np.ndarray  # (U,) int, its iteration minus the slowest clock at arrival (max)
    time: np.ndarray  # (U,) simulated seconds when it was applied
    minibatch_loss: np.ndarray  # (U,) loss of its minibatch(es) at the pulled parameters
    loss_at: np.ndarray  # (E,) number of updates applied when the loss was measured
    loss: np.ndarray  # (E,) full training loss at those points (loss_at[0] == 0)
    dropped_staleness: np.ndarray  # (D,) staleness of every dropped gradient
    compute_time: np.ndarray  # (n,) seconds each worker spent computing finished gradients
    useful_compute: np.ndarray  # (n,) the same weighted by the scale its gradients got
    idle_time: np.ndarray  # (n,) seconds each worker waited for the server (wait mode)
    diverged: bool
    final_params: np.ndarray  # (P,)

    @property
    def updates(self) -> int:
        return int(self.staleness.shape[0])

    @property
    def wall_clock(self) -> float:
        """Simulated seconds until the last applied update."""
        return float(self.time[-1]) if self.updates else 0.0

    @property
    def updates_per_second(self) -> float:
        return self.updates / self.wall_clock if self.wall_clock > 0 else 0.0

    @property
    def final_loss(self) -> float:
        return float(self.loss[-1])

    @property
    def discarded_fraction(self) -> np.ndarray:
        """(n,) share of each worker's compute that the policy discarded (dropped or scaled);
        NaN for a worker that finished no gradient."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(
                self.compute_time > 0, 1.0 - self.useful_compute / self.compute_time, np.nan
            )

    def summary(self) -> dict:
        """JSON-ready summary: the config and the headline numbers."""
        return {
            "config": asdict(self.config),
            "updates": self.updates,
            "diverged": self.diverged,
            "final_loss": self.final_loss,
            "wall_clock": self.wall_clock,
            "updates_per_second": self.updates_per_second,
            "mean_staleness": float(self.staleness.mean()) if self.updates else 0.0,
            "max_staleness": int(self.staleness.max()) if self.updates else 0,
            "max_clock_gap": int(self.clock_gap.max()) if self.updates else 0,
            "dropped": int(self.dropped_staleness.shape[0]),
        }


def _validate(
    problem: Problem,
    speeds: WorkerSpeeds,
    policy: Policy,
    updates: int,
    lr: float,
    seed: int,
    momentum: float,
) -> None:
    """Raise `StalenessConfigError` where `simulate`'s arguments are not what it declares."""
    if not isinstance(problem, Problem):
        raise StalenessConfigError(
            f"problem must be a Problem (quadratic_problem(), logreg_problem(), mlp_problem()), "
            f"got {type(problem).__name__}"
        )
    if not isinstance(speeds, WorkerSpeeds):
        raise StalenessConfigError(
            f"speeds must be a WorkerSpeeds (e.g. WorkerSpeeds.homogeneous(8)), got {speeds!r}"
        )
    if not isinstance(policy, Policy):
        raise StalenessConfigError(f"policy must be a Policy such as Async(), got {policy!r}")
    if isinstance(updates, bool) or not isinstance(updates, int) or updates < 1:
        raise StalenessConfigError(f"updates must be an int >= 1, got {updates!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise StalenessConfigError(f"lr must be a finite number > 0, got {lr!r}")
    if not (math.isfinite(momentum) and -1.0 < momentum < 1.0):
        raise StalenessConfigError(f"momentum must lie in (-1, 1), got {momentum!r}")
    if not isinstance(seed, int):
        raise StalenessConfigError(f"seed must be an int, got {seed!r}")
    if policy.mode == "clock" and speeds.presence:
        raise StalenessConfigError(
            f"{policy.label} counts clocks, and an elastic worker's clock stops while it is "
            "away (it would hold everyone back); use SSP with fixed workers, or Async / "
            "BoundedDelay with WorkerSpeeds.bursts"
        )


def simulate(
    problem: Problem,
    speeds: WorkerSpeeds,
    policy: Policy,
    updates: int,
    lr: float,
    seed: int,
    momentum: float = 0.0,
    *,
    eval_every: int | None = None,
    diverge_factor: float = 1e6,
    max_events: int | None = None,
    until: float | None = None,
    progress: bool = False,
) -> SimResult:
    """Run the asynchronous parameter server; see the module docstring."""
    _validate(problem, speeds, policy, updates, lr, seed, momentum)
    if until is not None and not (
        isinstance(until, (int, float)) and math.isfinite(until) and until > 0
    ):
        raise StalenessConfigError(
            f"until is a time budget in simulated seconds, finite and > 0, got {until!r}"
        )
    config = SimConfig(
        problem=problem.name,
        speeds=speeds.name,
        workers=speeds.n,
        policy=policy.label,
        updates=updates,
        lr=float(lr),
        seed=seed,
        momentum=float(momentum),
        eval_every=eval_every or max(1, updates // 500),
        diverge_factor=float(diverge_factor),
        max_events=max_events or 100 * updates + 10 * speeds.n,
        until=None if until is None else float(until),
    )
    with single_thread():
        return _run(problem, speeds, policy, config, progress)


def _run(
    problem: Problem, speeds: WorkerSpeeds, policy: Policy, config: SimConfig, progress: bool
) -> SimResult:
    # -- the policy's machinery and the run's random sources (seeded from config.seed) --------
    n, updates, lr, momentum = speeds.n, config.updates, config.lr, config.momentum
    seed, eval_every, max_events = config.seed, config.eval_every, config.max_events
    until = math.inf if config.until is None else config.until
    wait_bound = policy.max_staleness if policy.mode == "wait" else None
    gate = ClockGate(n, policy.clock_bound or 0) if policy.mode == "clock" else None
    clock = gate.clock if gate is not None else [0] * n  # iterations each worker finished
    gap = [0] * n  # clock gap of each worker's last arrived gradient
    corrector = policy.make_corrector()  # per run: may hold state (DC-ASGD-a)
    durations = speeds.sampler(seed)
    batch_rngs = [np.random.default_rng(s) for s in np.random.SeedSequence([seed, 0xBA7C]).spawn(n)]
    n_examples, batch = problem.num_examples, problem.batch_size

    # -- the server's state, each worker's state, and what the result records ----------------
    theta = problem.initial_params()
    velocity = torch.zeros_like(theta) if momentum else None
    version = 0
    pulled_v = [0] * n  # version each worker's pending gradient was computed at
    pulled = [theta] * n  # the parameters it pulled (tensors are never modified in place)
    idx: list[np.ndarray] = [np.empty(0)] * n
    grads: list[torch.Tensor | None] = [None] * n
    mb_loss = [0.0] * n
    started = [0.0] * n
    arrived = [0.0] * n
    pending: dict[int, None] = {}  # workers whose gradient is not computed yet
    held: list[int] = []  # arrived gradients waiting for the bound (wait mode)
    compute, useful, idle = np.zeros(n), np.zeros(n), np.zeros(n)
    heap: list[tuple[float, int, int, bool]] = []  # (time, order, worker, is_a_return)
    has_presence = bool(speeds.presence)
    seq = 0
    rec_s, rec_w, rec_worker, rec_t, rec_mb, rec_gap = [], [], [], [], [], []
    dropped: list[int] = []
    loss0 = problem.full_loss(theta)
    loss_at, losses = [0], [loss0]
    limit = config.diverge_factor * max(abs(loss0), 1e-12)
    diverged = not math.isfinite(loss0)

    # -- the four steps of the event loop: a worker pulls, computes, and the server applies ---
    def pull(w: int, now: float) -> None:
        nonlocal seq
        if has_presence and (delay := durations.start_delay(w, now)) > 0:
            pulled_v[w], grads[w] = ABSENT, None  # away: neither pending nor limiting
            pending.pop(w, None)
            heapq.heappush(heap, (now + delay, seq, w, True))
            seq += 1
            return
        pulled_v[w], pulled[w], grads[w] = version, theta, None
        idx[w] = batch_rngs[w].integers(0, n_examples, batch)
        pending[w] = None
        started[w] = now
        heapq.heappush(heap, (now + durations.draw(w, now), seq, w, False))
        seq += 1

    def compute_pending() -> None:
        ws = list(pending)
        g, lo = problem.batched_grads(
            torch.stack([pulled[w] for w in ws]), np.stack([idx[w] for w in ws])
        )
        for k, w in enumerate(ws):
            grads[w], mb_loss[w] = g[k], float(lo[k])
        pending.clear()

    def gradient(w: int) -> torch.Tensor:
        """Worker `w`'s gradient as applied now (corrected, under a policy with a corrector)."""
        g = grads[w]
        assert g is not None, "apply() computes every pending gradient before reading one"
        return corrector(g, theta, pulled[w]) if corrector is not None else g

    def apply(ws: list[int], scales: list[float], now: float, restart: bool = True) -> None:
        nonlocal theta, velocity, version, diverged
        if any(grads[w] is None for w in ws):
            compute_pending()
        if len(ws) == 1:
            w, sc = ws[0], scales[0]
            g = gradient(w)
        else:
            total = sum(sc * gradient(w) for w, sc in zip(ws, scales, strict=True))
            assert isinstance(total, torch.Tensor), "sum() is 0 only over no workers"
            g = total / len(ws)
            sc = 1.0
        if velocity is not None:
            velocity = velocity.mul(momentum).add_(g, alpha=sc)
            theta = theta.add(velocity, alpha=-lr)
        else:
            theta = theta.add(g, alpha=-lr * sc)
        rec_s.append(max(version - pulled_v[w] for w in ws))
        rec_w.append(sum(scales) / len(ws))
        rec_worker.append(ws[0] if len(ws) == 1 else -1)
        rec_gap.append(max(gap[w] for w in ws))
        rec_t.append(now)
        rec_mb.append(sum(mb_loss[w] for w in ws) / len(ws))
        version += 1
        for w, s in zip(ws, scales, strict=True):
            useful[w] += s * (arrived[w] - started[w])
            idle[w] += now - arrived[w]
            if restart:
                pull(w, now)
        if version % eval_every == 0 or version == updates:
            loss = problem.full_loss(theta)
            loss_at.append(version)
            losses.append(loss)
            if not math.isfinite(loss) or loss > limit:
                diverged = True

    # -- the event loop: the next gradient to arrive, until the updates or the time run out ---
    for w in range(n):
        pull(w, 0.0)
    bar = None
    if progress:
        from mlinfra_lab.progress import progress_bar

        bar = progress_bar(
            total=updates, desc=f"simulate {policy.label}", unit="update", leave=False
        )
    events = 0
    while version < updates and not diverged:
        if heap[0][0] > until:  # the next event lands after the time budget
            break
        if events >= max_events:
            raise SimulationStalledError(
                f"{events} gradients arrived but only {version} of {updates} updates were "
                f"applied with {policy.label} and {n} workers; loosen the staleness bound, "
                "use mode='wait', or pass a larger max_events"
            )
        now, _, w, returning = heapq.heappop(heap)
        if returning:  # an elastic worker comes back and pulls
            pull(w, now)
            continue
        events += 1
        arrived[w] = now
        compute[w] += now - started[w]
        gap[w] = clock[w] - min(clock)
        if gate is not None:  # SSP: apply now, then start whoever the clock bound lets start
            apply([w], [policy.scale(version - pulled_v[w])], now, restart=False)
            for u in gate.finish(w):
                idle[u] += now - arrived[u]  # 0 for w; a released worker waited since then
                pull(u, now)
        elif wait_bound is None:
            clock[w] += 1
            s = version - pulled_v[w]
            sc = policy.scale(s)
            if sc == 0.0:  # dropped: the compute is wasted, the worker starts afresh
                dropped.append(s)
                pull(w, now)
            else:
                apply([w], [sc], now)
        else:
            clock[w] += 1
            held.append(w)
            while held and version < updates and not diverged:
                group = policy.wait_group(version, pulled_v, held)  # delay_wait_group
                if not group:  # the limit group has not all arrived: wait
                    break
                for u in group:
                    held.remove(u)
                apply(group, [policy.scale(version - pulled_v[u]) for u in group], now)
        if bar is not None and version - bar.n >= 200:
            bar.update(version - bar.n)
    # -- the last evaluation and the result ---------------------------------------------------
    if loss_at[-1] != version and not diverged:  # stopped by the budget between two evals
        loss_at.append(version)
        losses.append(problem.full_loss(theta))
        diverged = not math.isfinite(losses[-1]) or losses[-1] > limit
    if bar is not None:
        bar.update(version - bar.n)
        bar.close()

    return SimResult(
        config=config,
        staleness=np.asarray(rec_s, dtype=np.int64),
        weight=np.asarray(rec_w, dtype=np.float64),
        worker=np.asarray(rec_worker, dtype=np.int64),
        clock_gap=np.asarray(rec_gap, dtype=np.int64),
        time=np.asarray(rec_t, dtype=np.float64),
        minibatch_loss=np.asarray(rec_mb, dtype=np.float64),
        loss_at=np.asarray(loss_at, dtype=np.int64),
        loss=np.asarray(losses, dtype=np.float64),
        dropped_staleness=np.asarray(dropped, dtype=np.int64),
        compute_time=compute,
        useful_compute=useful,
        idle_time=idle,
        diverged=diverged,
        final_params=theta.detach().numpy().copy(),
    )
