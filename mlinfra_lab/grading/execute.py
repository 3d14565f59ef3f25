"""Execute notebooks, each in its own sandboxed kernel, and return each code cell's outcome.

Contract: `run_notebooks(paths, config)` runs every notebook of `paths` (a fresh kernel
each, in a fresh sandbox: see `sandbox` and `kernel_runner`) and returns, per notebook, a
dict ``cell_id -> CellOutcome`` (plus ``"note:<cell_id>"`` entries, outcome ``"note"``, for
a budget remark such as a cut output); a cell that raised, timed out or never ran is
reported, never raised, so one bad notebook cannot stop a batch. A notebook whose run
raised in this process (a bug a hostile file found) gets only the entry `CRASHED`, and the
others run on; only `ExecutionError` (no kernel can start here) stops the batch.

Design decisions:
- The grading process drives each kernel itself and judges each cell by the kernel's
  ``execute_reply`` (see `kernel_runner`): no pytest, no report file between them. The rule
  for a cell is nbval's under ``--nbval-lax`` (a cell that raises fails; outputs are not
  compared), read from more than nbval reads; nbval stays what ``make test`` runs the
  course's chapters with, and what reruns a restored submission (`restored`).
- ``config.jobs`` notebooks run side by side (threads in this process, each driving one
  sandboxed kernel in its own slot, see `sandbox`). The default is 1 because on a 2-core
  machine parallel kernels fight for the same cores and make per-cell timeouts less
  reliable.
- ``config.sandbox`` picks the sandbox (``auto``: bubblewrap where it works, else the
  resource-limit fallback, named in the gradebook's config); a kernel a notebook kills or
  hangs is that notebook's loss only: the next one gets a new kernel in a new sandbox.
- The grading secret (see `secret`) is held in ``config.env`` (`ExecutionConfig.with_secret`)
  but never reaches a kernel: the runner turns it into the seed table of each notebook's
  graders (`kernel_runner`); `ExecutionConfig.record`, what a gradebook saves, leaves
  its value out and keeps only whether it was the default.
- The judge (see `judge`): with ``judge_texts`` and ``config.judge`` (the default), every
  grader is checked again in a second kernel on the values the student's functions
  returned; a grader passes only where both kernels pass it.
- Budgets (see `budgets`): memory and process count as caps on each sandbox's processes
  together (a control group, `cgroups`; else an address-space limit per process), disk as
  size-capped tmpfs, per-notebook wall time checked between cells, output counted per cell
  and never kept.
"""

from __future__ import annotations

import functools
import os
import queue
import tempfile
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .budgets import (
    DEFAULT_DISK_LIMIT,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_CELLS,
    DEFAULT_MAX_PROCS,
    DEFAULT_OUTPUT_CAP,
)
from .errors import ExecutionError
from .kernel_runner import run_notebook
from .outcome import CellOutcome
from .sandbox import Sandbox, make_sandbox
from .secret import DEFAULT_SECRET, SECRET_ENV

__all__ = ["CRASHED", "CellOutcome", "ExecutionConfig", "run_notebooks"]

CRASHED = "error:notebook"  # the outcome key of a notebook whose run raised (see run_notebooks)


@dataclass(frozen=True)
class ExecutionConfig:
    """How notebooks are executed (saved with every gradebook)."""

    cell_timeout: float = 60.0  # seconds one cell may run before it is interrupted
    startup_timeout: float = 60.0  # seconds a kernel may take to start
    env: tuple[tuple[str, str], ...] = (("MPLBACKEND", "Agg"),)  # extra kernel environment
    jobs: int = 1  # notebooks run side by side (see the module docstring)
    sandbox: str = "auto"  # "auto", "bwrap" or "rlimit" (see `sandbox`)
    # budgets (see `budgets`; None switches one off): the first three apply while running
    memory_limit: int | None = None  # bytes of address space per kernel (and its children)
    notebook_timeout: float | None = None  # seconds one notebook may run, kernel start included
    output_cap: int | None = DEFAULT_OUTPUT_CAP  # bytes of output kept per cell
    max_bytes: int | None = DEFAULT_MAX_BYTES  # a larger submission file is not graded
    max_cells: int | None = DEFAULT_MAX_CELLS  # a notebook with more cells is not graded
    max_procs: int | None = DEFAULT_MAX_PROCS  # tasks of one sandbox together (`cgroups`)
    disk_limit: int | None = DEFAULT_DISK_LIMIT  # bytes of each of a sandbox's tmpfs
    judge: bool = True  # check graders again outside the student's kernel (see `judge`)

    def with_secret(self, secret: str) -> ExecutionConfig:
        """This config with the grading secret, from which the kernels' seeds are derived."""
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


def run_notebooks(
    paths: Sequence[Path | str],
    config: ExecutionConfig | None = None,
    on_cell: Callable[[Path, CellOutcome], None] | None = None,
    progress: str | None = None,
    sandbox: Sandbox | None = None,
    judge_texts: Mapping[Path, Mapping[str, str]] | None = None,
) -> dict[Path, dict[str, CellOutcome]]:
    """Run every notebook of `paths`, each in its own sandboxed kernel; outcomes keyed by
    resolved path, then cell id.

    `on_cell` is called as each cell finishes; `progress`, when given, is the description of
    a tqdm bar counting cells; `sandbox` defaults to ``make_sandbox(config.sandbox)``;
    `judge_texts` (notebook -> grader cell id -> judge text) has the graders judged outside
    the student's kernel too (see `judge`), unless ``config.judge`` is off.
    """
    config = config or ExecutionConfig()
    notebooks = [Path(p).resolve() for p in paths]
    results: dict[Path, dict[str, CellOutcome]] = {p: {} for p in notebooks}
    if not notebooks:
        return results
    sandbox = sandbox or make_sandbox(config.sandbox)
    judges = {Path(p).resolve(): texts for p, texts in (judge_texts or {}).items()}
    bar, lock = None, threading.Lock()
    if progress:
        from mlinfra_lab.progress import progress_bar

        bar = progress_bar(
            total=sum(_count_code_cells(p) for p in notebooks),
            desc=progress,
            unit="cell",
            mininterval=2.0,
        )

    def cell_done(path: Path, outcome: CellOutcome) -> None:
        with lock:
            if on_cell:
                on_cell(path, outcome)
            if bar is not None:
                bar.update(1)

    todo: queue.Queue[tuple[int, Path]] = queue.Queue()
    for item in enumerate(notebooks):
        todo.put(item)
    failures: list[BaseException] = []

    def worker(slot: int, tmp: Path) -> None:
        while not failures:
            try:
                k, path = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[path] = run_notebook(
                    path,
                    config,
                    sandbox,
                    slot,
                    tmp / f"w{k:04d}",
                    on_cell=functools.partial(cell_done, path),
                    judge_texts=judges.get(path) if config.judge else None,
                )
            except ExecutionError as err:  # this machine cannot run kernels: stop the batch
                failures.append(err)
            # anything else this notebook made go wrong is this notebook's loss alone
            except Exception as err:  # noqa: BLE001
                results[path] = {
                    CRASHED: CellOutcome(
                        None,
                        -1,
                        "failed",
                        f"grading this notebook failed ({type(err).__name__} {_where(err)})",
                    )
                }
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
                failures.append(err)

    try:
        with tempfile.TemporaryDirectory(prefix="mlinfra-run-") as tmp:
            os.chmod(tmp, 0o755)  # the sandbox's user must reach its own working folder
            threads = [
                threading.Thread(target=worker, args=(slot, Path(tmp)), daemon=True)
                for slot in range(max(1, min(config.jobs, len(notebooks))))
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        if bar is not None:
            bar.close()
    if failures:
        raise failures[0]
    return results


def _count_code_cells(path: Path) -> int:
    import json

    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return 1
    return sum(1 for c in cells if c.get("cell_type") == "code")


def _where(err: BaseException) -> str:
    """Where in the grader's own code `err` was raised ("at kernel_runner.py:120 in run"), so
    an instructor can report a crash; never the exception's text, which a submission may
    have written."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return "at an unknown place"
    last = frames[-1]
    return f"at {Path(last.filename).name}:{last.lineno} in {last.name}"
