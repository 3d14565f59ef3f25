"""Execute notebooks with nbval in a subprocess and return each code cell's outcome.

Contract: `run_notebooks(paths, config)` runs ``pytest --nbval-lax`` once over all `paths`
(one fresh kernel per notebook, in the notebook's folder) and returns, per notebook, a dict
``cell_id -> CellOutcome``; a cell that raised, timed out or never ran is reported, never
raised, so one bad notebook cannot stop a batch.

Design decisions:
- nbval is the executor the course promises (`make test` runs the same plugin). A cell that
  raises fails its item and nbval goes on with the next cell in the same kernel; a cell
  running past ``config.cell_timeout`` is interrupted (KeyboardInterrupt), and if the kernel
  does not respond nbval stops it, so the remaining cells fail and the batch moves on.
- One pytest process for the whole batch: pytest and nbval start once, each notebook still
  gets its own kernel. On 2 cores, notebooks run one after the other: kernels started in
  parallel would fight for the same cores and make per-cell timeouts unreliable.
- Isolation from the caller's pytest set-up: plugin autoloading is off (only nbval and our
  reporter are loaded), the run uses an empty ini file in a private folder, and
  ``--nbval-current-env`` runs the kernel in this Python environment whatever kernelspec the
  notebook names.
- Outcomes stream in through `nbval_report` (JSON lines), which also drives the progress
  bar; a whole-batch safety timeout (per-cell timeout x cells, plus kernel start-ups) kills
  the process group if nbval itself ever hangs, keeping the outcomes already written.

Caveat: notebooks run arbitrary student code with your permissions; grade in a container or
throw-away account when submissions are untrusted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import ExecutionError

__all__ = ["CellOutcome", "ExecutionConfig", "run_notebooks"]


@dataclass(frozen=True)
class ExecutionConfig:
    """How notebooks are executed (saved with every gradebook)."""

    cell_timeout: float = 60.0  # seconds one cell may run before it is interrupted
    startup_timeout: float = 60.0  # seconds a kernel may take to start
    env: tuple[tuple[str, str], ...] = (("MPLBACKEND", "Agg"),)  # extra kernel environment


@dataclass(frozen=True)
class CellOutcome:
    """What happened to one code cell."""

    cell_id: str | None
    cell_num: int  # index among the notebook's code cells (nbval's "Cell N")
    outcome: str  # "passed", "failed", "skipped"
    message: str  # last exception line when failed, else ""

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


def _command(paths: Sequence[Path], report: Path, ini: Path, config: ExecutionConfig) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "-q", "--no-header", "-rN",
        "-c", str(ini), "--rootdir", str(ini.parent),
        "-p", "nbval.plugin", "-p", "mlinfra_lab.grading.nbval_report",
        "-p", "no:cacheprovider", "--continue-on-collection-errors",
        "--mlinfra-report", str(report),
        "--nbval-lax", "--nbval-current-env",
        f"--nbval-cell-timeout={config.cell_timeout:g}",
        f"--nbval-kernel-startup-timeout={config.startup_timeout:g}",
        *[str(p) for p in paths],
    ]


def _read_records(report: Path, offset: int) -> tuple[list[dict], int]:
    """New complete JSON lines of `report` from byte `offset`; returns (records, new offset)."""
    if not report.exists():
        return [], offset
    with open(report, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1
    lines = data[:end].decode("utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()], offset + end


def run_notebooks(
    paths: Sequence[Path | str],
    config: ExecutionConfig | None = None,
    on_cell: Callable[[Path, CellOutcome], None] | None = None,
    total_cells: int = 0,
) -> dict[Path, dict[str, CellOutcome]]:
    """Run every notebook of `paths` under nbval; outcomes keyed by resolved path, then cell id.

    `on_cell` is called as each cell finishes (for a progress bar). `total_cells`, the number
    of code cells of the batch, sizes the safety timeout; 0 counts them here.
    """
    config = config or ExecutionConfig()
    paths = [Path(p).resolve() for p in paths]
    results: dict[Path, dict[str, CellOutcome]] = {p: {} for p in paths}
    if not paths:
        return results
    if not total_cells:
        total_cells = sum(_count_code_cells(p) for p in paths)
    budget = (len(paths) * (config.startup_timeout + 15)
              + total_cells * (config.cell_timeout + 10) + 60)
    with tempfile.TemporaryDirectory(prefix="mlinfra-nbval-") as tmp:
        ini, report, log = Path(tmp) / "pytest.ini", Path(tmp) / "cells.jsonl", Path(tmp) / "log"
        ini.write_text("[pytest]\n")
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
               "PYDEVD_DISABLE_FILE_VALIDATION": "1", **dict(config.env)}
        offset, deadline = 0, time.monotonic() + budget
        with open(log, "wb") as log_fh:
            proc = subprocess.Popen(_command(paths, report, ini, config), cwd=tmp, env=env,
                                    stdout=log_fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            while True:
                done = proc.poll() is not None
                records, offset = _read_records(report, offset)
                for rec in records:
                    path = Path(rec["path"]).resolve()
                    outcome = CellOutcome(rec["cell_id"], rec["cell_num"], rec["outcome"],
                                          rec["message"])
                    results.setdefault(path, {})[rec["cell_id"] or f"#{rec['cell_num']}"] = outcome
                    if on_cell:
                        on_cell(path, outcome)
                if done:
                    break
                if time.monotonic() > deadline:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
                time.sleep(0.2)
        if proc.returncode not in (0, 1, 5, -signal.SIGKILL) and not any(results.values()):
            tail = log.read_text(errors="replace")[-1500:]
            raise ExecutionError(f"the nbval run could not start (exit {proc.returncode}); "
                                 f"is nbval installed in this environment? Output:\n{tail}")
    return results


def _count_code_cells(path: Path) -> int:
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return 1
    return sum(1 for c in cells if c.get("cell_type") == "code")
