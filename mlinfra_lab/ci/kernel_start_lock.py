"""pytest plugin: nbval's Jupyter kernels start one at a time across processes.

Contract: loaded with ``-p mlinfra_lab.ci.kernel_start_lock`` and given a lock file in the
environment variable ``MLINFRA_KERNEL_START_LOCK``, it makes ``nbval.kernel.start_new_kernel``
hold an exclusive `fcntl.flock` on that file from the moment the kernel's ports are picked
until the kernel answers (``wait_for_ready``). Without the variable it changes nothing.

Why: jupyter_client picks five free TCP ports, closes them, and the kernel binds them a
moment later. Two kernels starting at once in separate processes can pick the same port;
the loser dies before it replies ("Kernel died before replying to kernel_info"), failing every
cell of its notebook. `notebook_record --jobs 4` failed that way once on the H200 (chapter 4,
all 24 cells, 2026-12-04; nbval discards the kernel's stderr, so the port collision is our
reading of a known jupyter_client race, not a captured message). Holding one lock across the
pick-and-bind window removes the race between our own kernels; the notebooks still run in
parallel once started.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from typing import Any

ENV = "MLINFRA_KERNEL_START_LOCK"

__all__ = ["ENV", "locked", "pytest_configure"]


def locked(start: Callable[..., Any], path: str) -> Callable[..., Any]:
    """`start` wrapped so that it runs holding an exclusive lock on the file `path`."""

    def start_one_at_a_time(*args: Any, **kwargs: Any) -> Any:
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                return start(*args, **kwargs)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    return start_one_at_a_time


def pytest_configure(config: Any) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    import nbval.kernel

    nbval.kernel.start_new_kernel = locked(nbval.kernel.start_new_kernel, path)
