"""A stack dump of every rank, and the hung rank named from them.

Contract: inside a rank, `StackDumper(path, rank, after_s)` writes every Python thread's
stack to `path` when the process receives SIGUSR1 (``kill -USR1 PID``, as ``py-spy dump
--pid PID`` would print it) and, once armed with `arm()` at a step's start, when that step
outlasts `after_s` seconds. After a hang, `read_stack_dumps(directory, world_size)` reads
one file per rank (``rank<R>.stacks``: this module's dumps or ``py-spy dump`` output) and
`name_hung_rank(stacks)` returns a `HangVerdict`: which ranks wait inside a collective,
which rank is stuck outside one, and where.

Design decisions:
- `faulthandler` does the dumping: its handlers are C code that writes the stacks without
  the interpreter's help, so a rank blocked inside a C call (a lock, a socket, gloo's or
  NCCL's wait) still dumps, which a Python-level signal handler would not until the call
  returned. Dumps append, so the last one of the main thread is the rank's latest state.
- A hang looks the same from every healthy rank: each is blocked in a collective whose
  peer never arrives. So a rank is *waiting* when the frame it is executing is a
  collective's (``torch.distributed``), DDP's forward synchronisation, or the end of a DDP
  backward pass, which blocks on the gradient buckets' all-reduce; any other frame means
  the rank is *stuck* somewhere of its own, and that is the rank to look at. The report
  names the frame it executes and the innermost frame of the job's own code that called it.
- The timeout that ends the job (the process group's, NCCL's watchdog) raises on the
  healthy ranks, not on the hung one: their errors arrive first and name a victim. The
  dumps must be taken before that timeout, which is why `after_s` is shorter than it.

Caveats: one snapshot cannot tell a hang from a straggler (a slow rank also computes while
the others wait); whether the steps still advance can. "Stuck" means outside a collective,
so a rank blocked inside a CUDA call that is not a collective reads as stuck, as it should.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "Frame",
    "HangVerdict",
    "NoStackDumpsError",
    "RankStack",
    "StackDumper",
    "name_hung_rank",
    "parse_stack_dump",
    "read_stack_dumps",
]

DUMP_SIGNAL = signal.SIGUSR1
# (path fragment, function or None for any, what the rank waits for): frames that block on
# the other ranks.
_WAITS: tuple[tuple[str, str | None, str], ...] = (
    ("torch/distributed/", None, "a collective ({func})"),
    ("torch/nn/parallel/distributed.py", None, "DDP's synchronisation ({func})"),
    ("torch/autograd/graph.py", "_engine_run_backward", "DDP's gradient all-reduce (backward)"),
)
_HEADER = re.compile(r"^# mlinfra stack dumps: rank (\d+), pid (\d+), main thread (0x[0-9a-f]+)")
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')
_PYSPY_THREAD = re.compile(r'^Thread (\S+) \(\w+\)(?:: "(.+)")?')
_PYSPY_FRAME = re.compile(r"^\s+(\S.*) \((.+):(\d+)\)$")


class NoStackDumpsError(MlinfraError, FileNotFoundError):
    """No rank left a stack dump to read."""


@dataclass(frozen=True)
class Frame:
    """One frame of a stack: file, line and function."""

    file: str
    line: int
    func: str

    def __str__(self) -> str:
        return f"{self.func} ({Path(self.file).name}:{self.line})"

    @property
    def library(self) -> bool:
        """Is this frame PyTorch's or the standard library's, not the job's own code?"""
        path = self.file.replace("\\", "/")
        stdlib = re.search(r"/lib/python3\.\d+/", path) and "-packages/" not in path
        return "/torch/" in path or bool(stdlib)


@dataclass(frozen=True)
class RankStack:
    """The main thread's stack in a rank's latest dump, innermost frame first."""

    rank: int
    frames: tuple[Frame, ...]
    text: str  # the dump as written, every thread

    @property
    def waiting_for(self) -> str | None:
        """What the rank waits for on its peers, or None when it is not in a collective."""
        if not self.frames:
            return None
        top = self.frames[0]
        path = top.file.replace("\\", "/")
        for fragment, func, what in _WAITS:
            if fragment in path and func in (None, top.func):
                return what.format(func=top.func)
        return None

    @property
    def job_frame(self) -> Frame | None:
        """The innermost frame of the job's own code (not PyTorch's, not the stdlib's)."""
        return next((f for f in self.frames if not f.library), None)

    def where(self) -> str:
        """Where the rank is, in words: the frame it executes and the job's caller."""
        if not self.frames:
            return "no Python frame"
        top, job = self.frames[0], self.job_frame
        if job is None or job == top:
            return str(top)
        return f"{top}, called from {job}"


@dataclass(frozen=True)
class HangVerdict:
    """Which ranks wait in a collective, which are stuck outside one, and the message."""

    stuck: tuple[int, ...]
    waiting: dict[int, str]
    missing: tuple[int, ...]
    stacks: dict[int, RankStack] = field(repr=False)
    message: str

    def report(self) -> str:
        """The message, then one line per rank."""
        lines = [self.message, ""]
        for rank in sorted([*self.stacks, *self.missing]):
            if rank in self.missing:
                lines.append(f"  rank {rank}: no stack dump")
                continue
            stack = self.stacks[rank]
            state = "waits in" if rank in self.waiting else "STUCK in"
            lines.append(f"  rank {rank}: {state} {stack.where()}")
        return "\n".join(lines)


class StackDumper:
    """Dump this rank's stacks to `path` on SIGUSR1, and when an armed step outlasts `after_s`.

    Use it in the rank's main thread: `arm()` at each step's start, `disarm()` at its end,
    `close()` (or ``with``) when the rank is done. `after_s` 0 keeps only the signal.
    """

    def __init__(self, path: str | Path, rank: int, after_s: float = 0.0) -> None:
        if after_s < 0:
            raise ValueError(f"after_s must be non-negative, got {after_s}")
        self.path, self.after_s = Path(path), after_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = open(self.path, "a")  # noqa: SIM115 (faulthandler keeps the fd)
        faulthandler.register(DUMP_SIGNAL, file=self._fh, all_threads=True, chain=False)
        # Written once the handler is in place: a non-empty file means a signal is safe.
        main = threading.main_thread().ident or 0
        self._fh.write(
            f"# mlinfra stack dumps: rank {rank}, pid {os.getpid()}, main thread 0x{main:016x}\n"
        )
        self._fh.flush()

    def arm(self) -> None:
        """Dump once if the step now starting lasts longer than `after_s`."""
        if self.after_s > 0:
            faulthandler.dump_traceback_later(self.after_s, repeat=False, file=self._fh)

    def disarm(self) -> None:
        """The step ended in time: no dump."""
        if self.after_s > 0:
            faulthandler.cancel_dump_traceback_later()

    def close(self) -> None:
        self.disarm()
        faulthandler.unregister(DUMP_SIGNAL)
        self._fh.close()

    def __enter__(self) -> StackDumper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _blocks(text: str) -> list[tuple[str, bool, list[Frame]]]:
    """Every thread block of a dump file: (thread id or name, is it the main thread, frames
    innermost first), in the order written. Reads faulthandler's and py-spy's formats."""
    blocks: list[tuple[str, bool, list[Frame]]] = []
    header = _HEADER.search(text)
    main_id = header.group(3) if header else None
    for line in text.splitlines():
        if m := _FH_THREAD.match(line):
            is_main = m.group(2) == main_id if main_id else m.group(1) == "Current thread"
            blocks.append((m.group(2), is_main, []))
        elif m := _FH_FRAME.match(line):
            if blocks:
                blocks[-1][2].append(Frame(m.group(1), int(m.group(2)), m.group(3)))
        elif m := _PYSPY_THREAD.match(line):
            blocks.append((m.group(1), m.group(2) == "MainThread", []))
        elif m := _PYSPY_FRAME.match(line):
            if blocks:
                blocks[-1][2].append(Frame(m.group(2), int(m.group(3)), m.group(1)))
    return blocks


def parse_stack_dump(text: str, rank: int) -> RankStack | None:
    """The main thread's latest stack in one rank's dump file, or None if it holds none."""
    blocks = [b for b in _blocks(text) if b[2]]
    if not blocks:
        return None
    main = [b for b in blocks if b[1]] or blocks  # no main thread marked: the last thread
    return RankStack(rank, tuple(main[-1][2]), text)


def read_stack_dumps(directory: str | Path, world_size: int) -> dict[int, RankStack | None]:
    """Each rank's latest stack from ``directory/rank<R>.stacks`` (None: no dump there)."""
    directory = Path(directory)
    stacks: dict[int, RankStack | None] = {}
    for rank in range(world_size):
        path = directory / f"rank{rank}.stacks"
        text = path.read_text(errors="replace") if path.exists() else ""
        stacks[rank] = parse_stack_dump(text, rank)
    if all(s is None for s in stacks.values()):
        raise NoStackDumpsError(
            f"no stack dump in {directory} for any of {world_size} ranks: arm them before the "
            "hang (RunConfig(stack_dump_s=...) shorter than the process group's timeout), or "
            "run `py-spy dump --pid PID > rank<R>.stacks` for each rank while it hangs"
        )
    return stacks


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def name_hung_rank(stacks: dict[int, RankStack | None]) -> HangVerdict:
    """Name the rank(s) stuck outside a collective while the others wait in one."""
    present = {r: s for r, s in stacks.items() if s is not None}
    if not present:
        raise NoStackDumpsError("no rank has a stack dump: nothing to name")
    missing = tuple(sorted(r for r, s in stacks.items() if s is None))
    waiting = {r: w for r, s in present.items() if (w := s.waiting_for) is not None}
    stuck = tuple(sorted(r for r in present if r not in waiting))
    if stuck:
        if len(stuck) == 1:
            message = (
                f"rank {stuck[0]} is stuck outside any collective, in {present[stuck[0]].where()}"
            )
        else:
            where = "; ".join(f"rank {r} in {present[r].where()}" for r in stuck)
            message = f"{_ranks(list(stuck))} are stuck outside any collective ({where})"
        if waiting:
            kinds = " / ".join(sorted(set(waiting.values())))
            message += f", while {_ranks(sorted(waiting))} wait for {kinds}"
    else:
        message = (
            f"every dumped rank waits in a collective ({_ranks(sorted(waiting))}) and none is "
            "stuck outside one: the ranks wait on each other, e.g. mismatched collectives "
            "(rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL) or a network that stopped delivering"
        )
    if missing:
        message += f" ({_ranks(list(missing))} left no dump)"
    return HangVerdict(stuck, waiting, missing, present, message)
