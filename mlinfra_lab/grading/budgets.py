"""Grading budgets: what one submission may cost before and while it runs.

Contract: the limits live in `ExecutionConfig` (``grade`` sets them from its flags); this
module holds their defaults, the checks made before a notebook runs (`file_too_large`,
`too_many_cells`), and the one-line messages the gradebook shows for each overrun
(`memory_message` and the rest). It imports nothing heavy: the grading process and the
sandbox that starts the kernels (`sandbox`, `kernel_runner`) both use it.

The budgets, and what an overrun does (the batch always goes on):
- file size (`DEFAULT_MAX_BYTES`) and cell count (`DEFAULT_MAX_CELLS`): checked before
  anything runs; the submission is not graded, with one line saying which limit and flag.
  Between the two, the JSON's shape (`json_budget`: values and depth) is checked before
  the grading process parses the file.
- memory (`DEFAULT_MEMORY_LIMIT`): ``RLIMIT_AS`` (address space) set on each kernel as the
  sandbox starts it, and inherited by every process it starts. An allocation past it raises
  ``MemoryError`` in the student's cell, which then fails like any error; the kernel lives
  on, so the next cells run. Address space, not resident memory:
  a kernel that imports torch and triton reserves about 1.7 GB here (2 cores) before it
  computes anything, so the limit must leave room for that (see book/grading.md).
- wall time per notebook (`DEFAULT_NOTEBOOK_TIMEOUT`): checked by `kernel_runner` before
  each cell; once a notebook has run longer, its remaining cells fail at once with
  `notebook_timeout_message`. The cell running when the time is up is bounded by the
  per-cell timeout, so a notebook stops within one cell timeout of its limit.
- memory and processes of a sandbox together: a control group per sandbox
  (`cgroups`: resident memory, memfd and tmpfs pages of all its processes; ``pids.max``
  tasks, `DEFAULT_MAX_PROCS`) where the machine lets this process make one; where it
  does not, memory is held by a watch in the grading process that samples the sandbox's
  processes, memory files and tmpfs and kills the sandbox past the budget
  (`memory_watch`), and processes by ``RLIMIT_NPROC`` on the sandbox's throwaway user
  (grading as root: the user is the sandbox's alone, so the limit counts its tasks only; a
  refused fork or thread fails the student's cell, `procs_message`). The cell that runs into a cap fails with `overrun_message`, the
  sandbox is stopped and the later cells are not run (0 for what it did not finish).
  ``grade`` says once, before it starts, which budget it cannot enforce here
  (`Sandbox.limits_missing`).
- disk (`DEFAULT_DISK_LIMIT`): the kernel's home, ``/tmp`` and ``/dev/shm`` are tmpfs of
  that size (bubblewrap's ``--size``, counted in the memory cap too), and its working
  folder on the host is sealed once its sockets exist (`Sandbox.seal`, as root): a write
  past the budget fails with "No space left on device" in the student's cell.
- output (`DEFAULT_OUTPUT_CAP` bytes per cell): grading does not keep the notebooks'
  outputs; `kernel_runner` counts what a cell prints and drops it as the messages arrive
  (the gradebook notes how much past the cap), so the grader holds at most one message
  (capped at 16 MiB by the socket) at a time.

Design decisions:
- A limit of ``None`` (or 0 on the command line) switches that budget off. `ExecutionConfig`
  leaves memory and notebook time unlimited (``validate`` runs the instructor's own labs
  so); ``mlinfra-lab grade`` sets every budget from its flags, with these defaults.
- ``RLIMIT_AS`` rather than a cgroup: it needs no privileges and no systemd, works in any
  container, and is inherited by every process the kernel starts. Its cost is that it
  counts reserved, not used, memory (thread stacks and per-thread buffers, which grow with
  the core count; CUDA's address-space reservations, not measured here);
  ``--memory-limit 0`` switches it off where that matters (see book/grading.md).
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_CELLS",
    "DEFAULT_DISK_LIMIT",
    "DEFAULT_MAX_PROCS",
    "DEFAULT_MEMORY_LIMIT",
    "default_memory_limit",
    "gpu_present",
    "DEFAULT_NOTEBOOK_TIMEOUT",
    "DEFAULT_OUTPUT_CAP",
    "file_too_large",
    "human_bytes",
    "memory_message",
    "procs_message",
    "notebook_timeout_message",
    "overrun_message",
    "overrun_rest_message",
    "too_many_cells",
]

DEFAULT_MAX_BYTES = 20 * 10**6  # a released lab is ~50 kB; outputs are cleared at grading
DEFAULT_MAX_CELLS = 500  # the labs have ~30 cells
DEFAULT_MEMORY_LIMIT = 4 << 30  # bytes of address space (a torch+triton kernel: ~1.7 GB)


def gpu_present() -> bool:
    """True where an NVIDIA driver is loaded: CUDA then reserves tens of GB of address space
    at start-up (unified memory), so an ``RLIMIT_AS`` budget would stop every GPU kernel."""
    import os
    import shutil

    return os.path.exists("/proc/driver/nvidia") or shutil.which("nvidia-smi") is not None


def default_memory_limit() -> int | None:
    """`DEFAULT_MEMORY_LIMIT` on a machine without an NVIDIA GPU, no limit on one with it."""
    return None if gpu_present() else DEFAULT_MEMORY_LIMIT


DEFAULT_MAX_PROCS = 512  # tasks (processes and threads) of one sandbox together
DEFAULT_DISK_LIMIT = 1 << 30  # bytes of each of the sandbox's tmpfs (home, /tmp, /dev/shm)
DEFAULT_NOTEBOOK_TIMEOUT = 600.0  # seconds (the labs grade in under a minute on 2 cores)
DEFAULT_OUTPUT_CAP = 1 << 20  # bytes of output kept per cell, the rest dropped
TRACEBACK_CAP = 64 << 10  # bytes of an error's traceback kept (its last lines matter)

_MEMORY_SIGNS = ("MemoryError", "can't allocate memory", "Cannot allocate memory", "std::bad_alloc")


def human_bytes(n: float) -> str:
    """``20 MB``, ``4 GiB``, ``1 MiB``: decimal for file sizes given in MB, binary else."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size:g} {unit}"
    if n >= 10**6:
        return f"{n / 10**6:.1f} MB".replace(".0 MB", " MB")
    return f"{n:g} bytes"


def file_too_large(size: int, limit: int | None) -> str | None:
    """Why a file of `size` bytes is not graded, or None when it is within `limit`."""
    if limit is None or size <= limit:
        return None
    return f"the file is {size:,} bytes, over the limit of {human_bytes(limit)} (--max-size)"


def too_many_cells(count: int, limit: int | None) -> str | None:
    """Why a notebook of `count` cells is not graded, or None when within `limit`."""
    if limit is None or count <= limit:
        return None
    return f"the notebook has {count} cells, over the limit of {limit} (--max-cells)"


def notebook_timeout_message(limit: float) -> str:
    """The message of every cell not run because its notebook ran out of time."""
    return f"not run: the notebook ran past its time limit of {limit:g} s (--notebook-timeout)"


def overrun_message(kind: str, limit: int | float | None, detail: str | None = None) -> str:
    """The message of the cell that ran a sandbox into its `kind` cap ("memory",
    "processes"); the cells after it are not run (see `kernel_runner`). `detail` is what
    the memory watch measured (`memory_watch.Usage.describe`), where it held the budget."""
    if kind == "memory" and detail:
        return (
            f"stopped: memory budget of {human_bytes(limit or 0)} exceeded by the notebook's "
            f"processes together (--memory-limit): {detail}; this cell was running, the "
            "cells after it were not run"
        )
    if kind == "memory":
        what = f"{human_bytes(limit or 0)} of memory for all its processes (--memory-limit)"
    else:
        what = f"{limit} processes and threads (--max-procs)"
    return (
        f"stopped: this cell took the notebook past its budget of {what}; the cells after "
        "it were not run"
    )


def overrun_rest_message(kind: str) -> str:
    """The message of every cell after the one that ran the sandbox into its cap."""
    return f"not run: the notebook was stopped at its {kind} budget"


def memory_message(message: str, limit: int | None) -> str:
    """`message` of a failed cell, plus the memory limit when it ran out of memory."""
    if limit is None or not any(sign in message for sign in _MEMORY_SIGNS):
        return message
    return (
        f"{message} [the grading memory limit is {human_bytes(limit)} of address "
        "space (--memory-limit)]"
    )


_PROCS_SIGNS = ("Resource temporarily unavailable", "BlockingIOError", "can't start new thread")


def procs_message(message: str, limit: int | None) -> str:
    """`message` of a failed cell, plus the process budget when a fork or a new thread was
    refused (``RLIMIT_NPROC``, the fallback where no control group counts the sandbox's
    tasks: `sandbox._limits`)."""
    if limit is None or not any(sign in message for sign in _PROCS_SIGNS):
        return message
    return (
        f"{message} [the grading budget is {limit} processes and threads per notebook "
        "(--max-procs)]"
    )
