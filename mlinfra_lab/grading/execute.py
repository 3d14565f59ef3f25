"""Execute notebooks with nbval in a subprocess and return each code cell's outcome.

Contract: `run_notebooks(paths, config)` runs ``pytest --nbval-lax`` once over all `paths`
(one fresh kernel per notebook, in the notebook's folder) and returns, per notebook, a dict
``cell_id -> CellOutcome`` (plus ``"note:<cell_id>"`` entries, outcome ``"note"``, for a
budget remark such as a cut output); a cell that raised, timed out or never ran is reported,
never raised, so one bad notebook cannot stop a batch.

Design decisions:
- nbval is the executor the course promises (`make test` runs the same plugin). A cell that
  raises fails its item and nbval goes on with the next cell in the same kernel; a cell
  running past ``config.cell_timeout`` is interrupted (KeyboardInterrupt), and if the kernel
  does not respond nbval stops it, so the remaining cells fail and the batch moves on.
- One pytest process for the whole batch: pytest and nbval start once, each notebook still
  gets its own kernel. ``config.jobs`` > 1 splits the batch over that many processes run
  side by side; the default is 1 because on a 2-core machine parallel kernels fight for the
  same cores (little gain, measured in the report of issue 2) and make per-cell timeouts
  less reliable.
- Isolation from the caller's pytest set-up: plugin autoloading is off (only nbval and our
  reporter are loaded), ``PYTEST_ADDOPTS``/``PYTEST_PLUGINS`` are not passed on, the run
  uses an empty ini file in a private folder, and
  ``--nbval-current-env`` runs the kernel in this Python environment whatever kernelspec the
  notebook names.
- Outcomes stream in through `nbval_report` (JSON lines), which also drives the progress
  bar; a whole-batch safety timeout (per-cell timeout x cells, plus kernel start-ups) kills
  the process group if nbval itself ever hangs, keeping the outcomes already written.
- The grading secret (see `secret`) reaches the kernels as one more ``env`` entry
  (`ExecutionConfig.with_secret`); `ExecutionConfig.record`, what a gradebook saves, leaves
  its value out and keeps only whether it was the default.
- Budgets (see `budgets`): the pytest process starts under the address-space limit
  ``config.memory_limit`` (``RLIMIT_AS``, inherited by every kernel), and loads
  `nbval_budgets`, which fails the cells of a notebook past ``config.notebook_timeout`` and
  cuts each cell's output at ``config.output_cap`` (a cut is reported as an outcome
  ``"note"``, kept apart from the cell's own outcome). The log of a run is read from its
  end only, so a kernel writing gigabytes to its standard error costs disk, not memory.
- A notebook can kill the pytest process itself (``os.kill(os.getppid(), 9)``); the
  notebooks of that process that had not started then run once more in a fresh process,
  so one submission cannot take its neighbours' scores down with it.

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
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .budgets import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_CELLS,
    DEFAULT_OUTPUT_CAP,
    address_space_limiter,
)
from .errors import ExecutionError
from .secret import DEFAULT_SECRET, SECRET_ENV

__all__ = ["CellOutcome", "ExecutionConfig", "run_notebooks"]


@dataclass(frozen=True)
class ExecutionConfig:
    """How notebooks are executed (saved with every gradebook)."""

    cell_timeout: float = 60.0  # seconds one cell may run before it is interrupted
    startup_timeout: float = 60.0  # seconds a kernel may take to start
    env: tuple[tuple[str, str], ...] = (("MPLBACKEND", "Agg"),)  # extra kernel environment
    jobs: int = 1  # pytest processes running notebooks side by side (see module docstring)
    # budgets (see `budgets`; None switches one off): the first three apply while running
    memory_limit: int | None = None  # bytes of address space per nbval process and kernel
    notebook_timeout: float | None = None  # seconds one notebook may run, kernel start included
    output_cap: int | None = DEFAULT_OUTPUT_CAP  # bytes of output kept per cell
    max_bytes: int | None = DEFAULT_MAX_BYTES  # a larger submission file is not graded
    max_cells: int | None = DEFAULT_MAX_CELLS  # a notebook with more cells is not graded

    def with_secret(self, secret: str) -> ExecutionConfig:
        """This config with the grading secret set in the kernels' environment."""
        if not secret:
            raise ValueError("the grading secret must not be empty")
        env = tuple((k, v) for k, v in self.env if k != SECRET_ENV)
        return replace(self, env=(*env, (SECRET_ENV, secret)))

    def record(self) -> dict:
        """The config as a gradebook saves it: the secret's value left out (see docstring)."""
        out = asdict(self)
        out["env"] = [[k, v] for k, v in self.env if k != SECRET_ENV]
        secret = dict(self.env).get(SECRET_ENV) or os.environ.get(SECRET_ENV) or DEFAULT_SECRET
        out["non_default_secret"] = secret != DEFAULT_SECRET
        return out


@dataclass(frozen=True)
class CellOutcome:
    """What happened to one code cell."""

    cell_id: str | None
    cell_num: int  # index among the notebook's code cells (nbval's "Cell N")
    outcome: str  # "passed", "failed", "skipped"; "note": a budget remark on this cell
    message: str  # last exception line when failed, else ""

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


def _command(paths: Sequence[Path], report: Path, ini: Path, config: ExecutionConfig) -> list[str]:
    budgets = []
    if config.notebook_timeout:
        budgets.append(f"--mlinfra-notebook-timeout={config.notebook_timeout:g}")
    if config.output_cap:
        budgets.append(f"--mlinfra-output-cap={config.output_cap:d}")
    return [
        sys.executable, "-m", "pytest", "-q", "--no-header", "-rN",
        "-c", str(ini), "--rootdir", str(ini.parent),
        "-p", "nbval.plugin", "-p", "mlinfra_lab.grading.nbval_report",
        "-p", "mlinfra_lab.grading.nbval_budgets",
        "-p", "no:cacheprovider", "--continue-on-collection-errors",
        "--mlinfra-report", str(report), *budgets,
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


@dataclass
class _Job:
    """One pytest process running a group of notebooks."""

    proc: subprocess.Popen
    paths: list[Path]
    report: Path
    log: Path
    offset: int = 0
    log_tail: str = ""  # the end of its output, read before its folder is removed


def _start(group: list[Path], folder: Path, config: ExecutionConfig) -> _Job:
    folder.mkdir()
    ini, report, log = folder / "pytest.ini", folder / "cells.jsonl", folder / "log"
    ini.write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env.update({"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                **dict(config.env)})
    with open(log, "wb") as log_fh:  # the child keeps its own handle
        proc = subprocess.Popen(_command(group, report, ini, config), cwd=folder, env=env,
                                stdout=log_fh, stderr=subprocess.STDOUT,
                                start_new_session=True,
                                preexec_fn=address_space_limiter(config.memory_limit))
    return _Job(proc, group, report, log)


def run_notebooks(
    paths: Sequence[Path | str],
    config: ExecutionConfig | None = None,
    on_cell: Callable[[Path, CellOutcome], None] | None = None,
    progress: str | None = None,
) -> dict[Path, dict[str, CellOutcome]]:
    """Run every notebook of `paths` under nbval; outcomes keyed by resolved path, then cell id.

    `on_cell` is called as each cell finishes; `progress`, when given, is the description of
    a tqdm bar counting cells. If a pytest process dies (a notebook killed it), the notebooks
    of its group that had not started are run once more in a fresh process.
    """
    config = config or ExecutionConfig()
    paths = [Path(p).resolve() for p in paths]
    results: dict[Path, dict[str, CellOutcome]] = {p: {} for p in paths}
    if not paths:
        return results
    cells = {p: _count_code_cells(p) for p in paths}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(cells.values()), desc=progress, unit="cell")

    def record(path: Path, outcome: CellOutcome) -> None:
        key = outcome.cell_id or f"#{outcome.cell_num}"
        if outcome.outcome == "note":  # a budget remark, beside the cell's own outcome
            results.setdefault(path, {})[f"note:{key}"] = outcome
            return
        results.setdefault(path, {})[key] = outcome
        if on_cell:
            on_cell(path, outcome)
        if bar is not None:
            bar.update(1)

    try:
        pending = paths
        for _attempt in range(2):
            jobs, timed_out = _run_batch(pending, cells, config, record)
            for job in jobs:
                if job.proc.returncode not in (0, 1, 5, -signal.SIGKILL) \
                        and not any(results[p] for p in job.paths):
                    raise ExecutionError(f"the nbval run could not start (exit "
                                         f"{job.proc.returncode}); is nbval installed in this "
                                         f"environment? Output:\n{job.log_tail}")
            pending = [p for job in jobs if job.proc.returncode not in (0, 1, 5)
                       for p in job.paths if not results[p]]
            if timed_out or not pending:
                break
    finally:
        if bar is not None:
            bar.close()
    return results


def _run_batch(
    paths: list[Path], cells: dict[Path, int], config: ExecutionConfig,
    record: Callable[[Path, CellOutcome], None],
) -> tuple[list[_Job], bool]:
    """Run `paths` split over ``config.jobs`` processes; return the jobs and if time ran out."""
    n_jobs = max(1, config.jobs)
    groups = [g for g in (paths[i::n_jobs] for i in range(n_jobs)) if g]
    budget = max(len(g) * (config.startup_timeout + 15)
                 + sum(cells[p] for p in g) * (config.cell_timeout + 10) + 60 for g in groups)
    timed_out = False
    with tempfile.TemporaryDirectory(prefix="mlinfra-nbval-") as tmp:
        jobs = [_start(g, Path(tmp) / f"job{i}", config) for i, g in enumerate(groups)]
        deadline = time.monotonic() + budget
        try:
            while True:
                running = [job for job in jobs if job.proc.poll() is None]
                for job in jobs:
                    records, job.offset = _read_records(job.report, job.offset)
                    for rec in records:
                        record(Path(rec["path"]).resolve(),
                               CellOutcome(rec["cell_id"], rec["cell_num"], rec["outcome"],
                                           rec["message"]))
                if not running:
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                time.sleep(0.2)
        finally:
            for job in jobs:  # after the safety timeout or an exception: leave no process
                if job.proc.poll() is None:
                    os.killpg(job.proc.pid, signal.SIGKILL)
                    job.proc.wait()
            for job in jobs:
                job.log_tail = _tail(job.log, 1500)
    return jobs, timed_out


def _tail(path: Path, size: int) -> str:
    """The last `size` bytes of `path` as text (never the whole file: see the docstring)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - size))
            return fh.read(size).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _count_code_cells(path: Path) -> int:
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return 1
    return sum(1 for c in cells if c.get("cell_type") == "code")
