"""The stale synchronous parallel (SSP) clock rule: which workers may start their next iteration.

Contract: a `ClockGate(n, bound)` holds every worker's clock (the number of iterations it has
completed) and the workers that wait. ``finish(w)`` records that worker w completed an
iteration and returns the workers that may start one now (w itself, if it is within the
bound, and any waiting worker the move released); ``may_start(w)`` is the rule itself:
a worker at clock c proceeds only if the slowest worker's clock is at least c - bound.

This is the consistency model of Ho et al. 2013 ("More Effective Distributed ML via a Stale
Synchronous Parallel Parameter Server", NeurIPS): the fastest and the slowest worker are never
more than `bound` clocks apart, the fastest waits otherwise. ``bound = 0`` is bulk-synchronous
parallel (BSP): every worker waits for all the others at the end of every iteration. A bound
at least as large as the run is fully asynchronous: nobody ever waits.

Design decisions:
- The rule counts *clocks* (iterations of each worker), not updates of the server. It is
  the clock analogue of the simulator's update-count bound (`BoundedDelay`), and the two
  bound each other only through the number of workers n: under SSP with bound s, a
  gradient misses at most (n - 1)(2s + 1) other workers' updates (`update_staleness_bound`).
- Pure bookkeeping, no time and no tensors: the simulator owns time and decides what a
  waiting worker costs (idle time); a test drives the gate directly.
- The slowest worker never waits (its clock minus the minimum is 0), so the gate cannot
  deadlock: somebody is always computing.
- Waiting workers are released in the order they started waiting (a fair queue).

Caveats: in Ho et al.'s system a worker's reads may come from a cache up to `bound` clocks
old; the simulator's pull always reads the server's current parameters (every update applied
so far, the freshest read SSP allows), so it models SSP's waiting, not its cache.
"""

from __future__ import annotations

from mlinfra_lab.staleness.errors import StalenessConfigError

__all__ = ["ClockGate", "update_staleness_bound"]


def update_staleness_bound(workers: int, bound: int) -> int:
    """The most updates a gradient can miss under SSP with `bound`: (n - 1)(2 bound + 1).

    While worker w computes the iteration at its clock c, every other worker started at a
    clock >= c - bound and can finish iterations up to clock c + bound + 1 (the slowest clock
    is at most c until w pushes), so it pushes at most 2 bound + 1 updates meanwhile.
    """
    if workers < 1 or bound < 0:
        raise StalenessConfigError(f"need workers >= 1 and bound >= 0, got {workers}, {bound}")
    return (workers - 1) * (2 * bound + 1)


class ClockGate:
    """Clocks of n workers under the SSP rule with a clock bound (see the module docstring)."""

    def __init__(self, workers: int, bound: int) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise StalenessConfigError(f"workers must be an int >= 1, got {workers!r}")
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
            raise StalenessConfigError(
                f"the SSP clock bound must be an int >= 0 (0 is bulk-synchronous), got {bound!r}"
            )
        self.bound = bound
        self.clock = [0] * workers  # iterations each worker has completed
        self.waiting: list[int] = []  # workers held at the bound, in the order they arrived

    @property
    def slowest(self) -> int:
        """The smallest clock of any worker."""
        return min(self.clock)

    def gap(self, w: int) -> int:
        """How many clocks worker w is ahead of the slowest worker."""
        return self.clock[w] - self.slowest

    def may_start(self, w: int) -> bool:
        """SSP: a worker at clock c may start its next iteration iff slowest >= c - bound."""
        return self.gap(w) <= self.bound

    def finish(self, w: int) -> list[int]:
        """Worker w completed an iteration: the workers that may start one now, w first."""
        if w in self.waiting:
            raise StalenessConfigError(f"worker {w} is waiting at the bound; it cannot finish")
        self.clock[w] += 1
        start = [w] if self.may_start(w) else []
        if not start:
            self.waiting.append(w)
        released = [u for u in self.waiting if self.may_start(u)]
        if released:
            self.waiting = [u for u in self.waiting if u not in released]
        return start + released
