"""A pytest plugin, loaded into the nbval run, that streams one JSON line per executed cell.

Contract: with ``-p mlinfra_lab.grading.nbval_report --mlinfra-report PATH``, every nbval
cell item appends ``{"path", "cell_num", "cell_id", "outcome", "message"}`` to PATH as soon
as it has run (or failed to set up), flushed, so a run that is killed midway still leaves
the outcomes of the cells it finished.

Design decisions:
- Streaming JSON lines rather than ``--junitxml``: the XML is written only when pytest
  exits, so a batch killed by the safety timeout would lose every result; a per-cell line
  also feeds the progress bar while the batch runs.
- The cell id is read from the nbval item itself (``item.cell``), not recomputed from the
  code-cell number, so the mapping to grader cells cannot drift.
- The message is the last exception line of the cell's traceback (ANSI colours removed),
  e.g. ``AssertionError: stable_softmax returned nan for ...``: what a student needs. A
  timed-out cell reports nbval's own "Timeout of N seconds exceeded" message.
- Teardown (stopping the kernel) is not a cell outcome and is not recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b")
MAX_MESSAGE = 500


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mlinfra-report", default=None,
                     help="append one JSON line per executed notebook cell to this file")


def cell_message(exc: BaseException | None) -> str:
    """A one-line (or few-line) explanation of why a cell failed."""
    if exc is None:
        return ""
    summary = str(exc.args[0]) if exc.args else type(exc).__name__
    if summary.startswith("Kernel dead"):
        return ("not run: the kernel was gone (it crashed, or nbval stopped it after an "
                "earlier cell hung and could not be interrupted)")
    inner = getattr(exc, "inner_traceback", None)  # nbval's NbCellError
    if not inner or summary.startswith("Timeout"):
        return summary[:MAX_MESSAGE]
    lines = [ln.rstrip() for ln in _ANSI.sub("", inner).splitlines() if ln.strip()]
    start = max((i for i, ln in enumerate(lines) if _EXC_LINE.match(ln)), default=len(lines) - 1)
    return "\n".join(lines[start:])[:MAX_MESSAGE] if lines else summary[:MAX_MESSAGE]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    path = item.config.getoption("mlinfra_report")
    if not path or call.when == "teardown" or not hasattr(item, "cell_num"):
        return
    if call.when == "setup" and report.passed:
        return  # the call phase will report this cell
    cell = getattr(item, "cell", {}) or {}
    record = {
        "path": str(item.path),
        "cell_num": item.cell_num,
        "cell_id": cell.get("id"),
        "outcome": report.outcome,  # "passed", "failed" or "skipped"
        "message": cell_message(call.excinfo.value if call.excinfo else None),
    }
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
