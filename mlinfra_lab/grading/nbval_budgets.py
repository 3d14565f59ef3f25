"""A pytest plugin, loaded into the nbval run, that enforces the per-notebook time limit and
the per-cell output cap (see `budgets`).

Contract: with ``-p mlinfra_lab.grading.nbval_budgets``:
- ``--mlinfra-notebook-timeout S``: before each cell of a notebook, if S seconds have passed
  since its first cell was set up (kernel start included), the cell fails at once with
  `budgets.notebook_timeout_message` instead of running.
- ``--mlinfra-output-cap N``: the output messages of one cell (streams, displays, results)
  are kept up to N bytes; past it their text is dropped as they arrive and one note
  replaces it; an error's traceback keeps its last `budgets.TRACEBACK_CAP` bytes. When a
  cell's output was cut, a ``{"outcome": "note"}`` line is appended to the
  ``--mlinfra-report`` file (see `nbval_report`), which the gradebook shows.
- After each cell, nbval's copy of the cell's outputs (``item.test_outputs``, kept on every
  item for the whole run) is released.

Design decisions:
- The time check sits between cells, not in a watchdog thread: nbval's own per-cell timeout
  already bounds the cell that is running, and a check between cells needs no thread that
  kills kernels under nbval's feet. The overrun is at most one cell timeout.
- The cap is applied where nbval reads each message (``IPyNbFile.get_kernel_message``), so
  nbval never accumulates more than the cap per cell; the message being read is already in
  memory (jupyter_client decodes whole messages), which this cannot avoid: one ``print`` of
  a huge string arrives whole (and is bounded by the address-space limit this process runs
  under, see `budgets`).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from mlinfra_lab.errors import MlinfraError

from .budgets import TRACEBACK_CAP, human_bytes, notebook_timeout_message


class NotebookTimeLimit(MlinfraError):
    """A cell not run because its notebook ran past ``--mlinfra-notebook-timeout``."""


_started: dict[str, float] = {}  # notebook path -> when its first cell was set up


class _OutputMeter:
    """Counts the output bytes of the cell being run and cuts them at the cap."""

    def __init__(self, cap: int) -> None:
        self.cap, self.used, self.dropped = cap, 0, 0

    def reset(self) -> None:
        """A new cell starts (pytest sets up its item)."""
        self.used, self.dropped = 0, 0

    def _note(self) -> str:
        return (f"\n[grading dropped this cell's output past {human_bytes(self.cap)} "
                "(the output cap)]\n")

    def _take(self, text: str) -> str:
        room = self.cap - self.used
        if len(text) <= room:
            self.used += len(text)
            return text
        first = not self.dropped
        self.dropped += len(text) - max(room, 0)
        self.used = self.cap
        return text[:max(room, 0)] + (self._note() if first else "")

    def clip(self, msg: dict[str, Any]) -> None:
        """Cut `msg` (an iopub message) in place to what the cap leaves for this cell."""
        kind, content = msg.get("msg_type"), msg.get("content") or {}
        if kind == "stream" and isinstance(content.get("text"), str):
            content["text"] = self._take(content["text"])
        elif kind in ("display_data", "execute_result", "update_display_data"):
            data = content.get("data") or {}
            size = sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in data.values())
            if self.used + size > self.cap:
                first = not self.dropped
                self.dropped += size
                self.used = self.cap
                content["data"] = {"text/plain": self._note().strip()} if first else {}
            else:
                self.used += size
        elif kind == "error":
            lines, kept, total = content.get("traceback") or [], [], 0
            for line in reversed(lines):  # the last lines name the exception
                total += len(line)
                if total > TRACEBACK_CAP:
                    break
                kept.append(line)
            content["traceback"] = kept[::-1]
            if isinstance(content.get("evalue"), str):
                content["evalue"] = content["evalue"][:TRACEBACK_CAP]


_meter: _OutputMeter | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mlinfra-notebook-timeout", type=float, default=None,
                     help="seconds a notebook may run; its later cells then fail at once")
    parser.addoption("--mlinfra-output-cap", type=int, default=None,
                     help="bytes of output kept per cell; the rest is dropped")


def pytest_configure(config: pytest.Config) -> None:
    global _meter
    cap = config.getoption("mlinfra_output_cap")
    if not cap:
        return
    from nbval.plugin import IPyNbFile

    meter = _meter = _OutputMeter(cap)
    read = IPyNbFile.get_kernel_message

    def get_kernel_message(self: Any, timeout: float | None = None,
                           stream: str = "iopub") -> dict:
        msg = read(self, timeout=timeout, stream=stream)
        if stream == "iopub":
            meter.clip(msg)
        return msg

    IPyNbFile.get_kernel_message = get_kernel_message


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if hasattr(item, "cell_num"):
        _started.setdefault(str(item.path), time.monotonic())
        if _meter is not None:
            _meter.reset()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    limit = item.config.getoption("mlinfra_notebook_timeout")
    if limit and hasattr(item, "cell_num"):
        if time.monotonic() - _started.get(str(item.path), time.monotonic()) > limit:
            raise NotebookTimeLimit(notebook_timeout_message(limit))


def pytest_runtest_teardown(item: pytest.Item) -> None:
    if not hasattr(item, "cell_num"):
        return
    if hasattr(item, "test_outputs"):
        item.test_outputs = []  # nbval keeps them on the item for the whole run otherwise
    report = item.config.getoption("mlinfra_report", default=None)
    if _meter is None or not _meter.dropped or not report:
        return
    cell = getattr(item, "cell", {}) or {}
    record = {"path": str(item.path), "cell_num": item.cell_num, "cell_id": cell.get("id"),
              "outcome": "note",
              "message": f"output truncated: code cell {item.cell_num} printed more than "
                         f"{human_bytes(_meter.cap)}; grading dropped the rest "
                         f"({human_bytes(_meter.dropped)})"}
    _meter.reset()
    with open(report, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
