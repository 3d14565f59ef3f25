"""Profile without Kineto's progress lines: `quiet_kineto()` drops them and keeps the rest.

Contract: inside ``with quiet_kineto():`` whatever native code writes to the process's standard
error (file descriptor 2) is held back, and when the block ends every line of it is written
to ``sys.stderr`` except Kineto's progress lines (``USDT:... profiler_start``,
``STAGE:... Completed Stage: Collection``), which torch's profilers print at every start and
stop and which carry no information for a reader.

Design decisions:
- Why not Kineto's own switch: its ``KINETO_LOG_LEVEL`` is read once, when the library
  starts, and ranks the progress lines (``USDT``) above ``ERROR``, so the level that hides
  them hides Kineto's errors too. Filtering by line keeps errors and warnings, from Kineto
  or anything else native, and drops exactly the two progress formats (`NOISE`).
- The lines are caught at the file descriptor, because Kineto writes to it from C++; a
  Python-level redirect (``contextlib.redirect_stderr``) would not see them. Python's own
  ``sys.stderr`` writes inside the block are not caught (in Jupyter they do not go through
  descriptor 2 at all, and a terminal's are flushed before the swap).
- Whatever was held back is written after the block, in order; a line is never lost, only
  delayed. The swap covers the whole process, so keep the block short (one profiled call).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["NOISE", "quiet_kineto"]

# "USDT:2026-12-05 16:08:44 26270:26270 SyncActivityProfilerHandler.cpp:52] profiler_start"
NOISE = re.compile(r"^(?:USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+\.cpp:\d+\] ")


@contextmanager
def quiet_kineto() -> Iterator[None]:
    """Hold back native stderr during the block; re-emit all of it but Kineto's progress."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode(errors="replace")
            kept = [line for line in text.splitlines(keepends=True) if not NOISE.match(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
