"""Execute notebooks under nbval, each in its own process, and write a dated record of the run.

Contract: ``python -m mlinfra_lab.ci.notebook_record --out FILE.json NOTEBOOK_OR_DIR...``
runs every notebook with ``pytest --nbval-lax`` (a per-cell timeout, default 60 s;
``--jobs N`` notebooks at once) and writes a JSON record: the device and software versions,
the date, and per notebook whether it passed, its cells, its wall-clock seconds, its slowest
cell, for every failing cell why (the timeout or the exception), and a fingerprint of the
code it ran (`source_fingerprint`). The exit status is 1 when any notebook failed, so
``make test-gpu`` fails too.

Design decisions:
- One pytest process per notebook: a notebook that kills its kernel or hangs costs only its
  own record, and each notebook's seconds include its kernel's start, as a reader sees it.
- Kernels start one at a time (`kernel_start_lock`, a file lock held from port pick to the
  kernel's first reply): with ``--jobs`` > 1, two kernels starting together could pick the
  same port, and one dies before running a cell.
- Cell times come from pytest's JUnit XML (nbval makes each cell a test item), so the
  record can show that no cell ran past the budget a reader would accept.
- The fingerprint hashes each cell's type and source, not outputs or metadata: a test can
  then tell which notebooks changed after the record was made, so a stale record is said
  to be stale instead of being cited for notebooks it never ran.
- The record is what the README and the chapters cite for "every notebook passes on the
  H200": it names the device, torch, Triton, CUDA and Python versions and the date, like
  every result file under ``benchmarks/results``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mlinfra_lab.ci import kernel_start_lock

__all__ = [
    "device_info",
    "failure_reason",
    "main",
    "record_notebooks",
    "run_notebook",
    "source_fingerprint",
]


def source_fingerprint(notebook: Path) -> str:
    """SHA-256 of the notebook's cells as (type, source) pairs: what a run executes and shows.
    Outputs, execution counts and metadata are left out, so clearing outputs keeps it."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    sources = [
        [c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"]]
        for c in cells
    ]
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()


def device_info() -> dict[str, Any]:
    """The machine the notebooks ran on: GPU name, torch/Triton/CUDA/Python versions."""
    import torch

    info: dict[str, Any] = {
        "device_name": (
            torch.cuda.get_device_name(0)
            if torch.cuda.is_available()
            else f"CPU ({platform.processor() or platform.machine()})"
        ),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


_ANSI = re.compile(r"\x1b\[[0-9;]*m|#x1B\[[0-9;]*m")


def failure_reason(text: str) -> str:
    """What a reader needs from nbval's failure text: its ``Cell N: why`` line (a timeout, or
    "Cell execution caused an exception") and the exception's own last line.

    nbval's report opens with the same banner for every failure ("Notebook cell execution
    failed"), so its first line tells nothing; the colour codes are dropped.
    """
    lines = [ln.strip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()]
    why = next((ln for ln in lines if re.match(r"Cell \d+: ", ln)), "")
    tail = lines[-1] if lines else ""
    parts = [part for part in (why, tail) if part and part != "Notebook cell execution failed"]
    return " | ".join(dict.fromkeys(parts))[:400] or "failed"


def _cells_from_junit(path: Path) -> list[dict[str, Any]]:
    """Per nbval cell item: name, seconds and why it failed (if it did)."""
    if not path.exists():
        return []
    cells = []
    for case in ET.parse(path).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        message = ""
        if failure is not None:
            message = failure_reason(f"{failure.get('message') or ''}\n{failure.text or ''}")
        cells.append(
            {
                "cell": case.get("name", ""),
                "seconds": float(case.get("time", 0.0)),
                "failed": failure is not None,
                "message": message,
            }
        )
    return cells


def run_notebook(
    notebook: Path, cell_timeout: float, kernel_lock: Path | None = None
) -> dict[str, Any]:
    """Run one notebook under nbval in its own pytest process; return its record entry.
    With `kernel_lock`, its kernel starts only while no other holder of that file starts one
    (`kernel_start_lock`: parallel kernels can otherwise pick the same port)."""
    env = dict(os.environ)
    if kernel_lock is not None:
        env[kernel_start_lock.ENV] = str(kernel_lock)
    with tempfile.TemporaryDirectory(prefix="mlinfra-nbrecord-") as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "mlinfra_lab.ci.kernel_start_lock",
            "--nbval-lax",
            "--nbval-current-env",
            f"--nbval-cell-timeout={cell_timeout:g}",
            f"--junitxml={junit}",
            str(notebook),
        ]
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        seconds = time.perf_counter() - start
        cells = _cells_from_junit(junit)
    failed = [c for c in cells if c["failed"]]
    entry = {
        "notebook": str(notebook),
        "passed": proc.returncode == 0 and bool(cells) and not failed,
        "cells": len(cells),
        "failed_cells": [{"cell": c["cell"], "message": c["message"]} for c in failed],
        "seconds": round(seconds, 1),
        "slowest_cell_seconds": round(max((c["seconds"] for c in cells), default=0.0), 1),
        "slowest_cell": max(cells, key=lambda c: c["seconds"])["cell"] if cells else None,
        "exit_code": proc.returncode,
        "source_fingerprint": source_fingerprint(notebook),
    }
    if not cells:  # nothing collected: keep the end of pytest's output as the reason
        entry["output_tail"] = (proc.stdout + proc.stderr)[-1500:]
    return entry


def record_notebooks(
    paths: list[Path], cell_timeout: float = 60.0, progress: bool = True, jobs: int = 1
) -> dict[str, Any]:
    """Run every notebook of `paths` (files, or folders searched for ``*.ipynb``), `jobs` at
    a time (each in its own pytest process; seconds then include the others' load)."""
    notebooks: list[Path] = []
    for path in paths:
        if path.is_dir():
            notebooks += sorted(p for p in path.glob("*.ipynb") if p.is_file())
        elif path.suffix == ".ipynb" and path.is_file():
            notebooks.append(path)
        else:
            raise FileNotFoundError(f"{path}: not a notebook or a folder of notebooks")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")

    def report(k: int, notebook: Path, entry: dict[str, Any]) -> None:
        state = "passed" if entry["passed"] else f"FAILED ({len(entry['failed_cells'])} cells)"
        print(
            f"[{k}/{len(notebooks)}] {notebook}: {state} in {entry['seconds']:.0f} s "
            f"(slowest: {entry['slowest_cell']}, {entry['slowest_cell_seconds']:.0f} s)",
            flush=True,
        )
        for cell in entry["failed_cells"]:
            print(f"    {cell['cell']}: {cell['message']}", flush=True)

    with (
        tempfile.TemporaryDirectory(prefix="mlinfra-kernel-lock-") as tmp,
        ThreadPoolExecutor(max_workers=jobs) as pool,  # threads only wait on processes
    ):
        lock = Path(tmp) / "kernel-start.lock"
        futures = [pool.submit(run_notebook, nb, cell_timeout, lock) for nb in notebooks]
        entries = []
        for k, (notebook, future) in enumerate(zip(notebooks, futures, strict=True), 1):
            entries.append(future.result())
            if progress:
                report(k, notebook, entries[-1])
    return {
        "kind": "notebooks",
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": device_info(),
        "cell_timeout_s": cell_timeout,
        "jobs": jobs,
        "command": "python -m mlinfra_lab.ci.notebook_record (pytest --nbval-lax per notebook)",
        "all_passed": all(e["passed"] for e in entries) and bool(entries),
        "notebooks": entries,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mlinfra_lab.ci.notebook_record",
        description="Execute notebooks under nbval (one pytest process each) and write a "
        "JSON record: device, versions, date, per notebook pass/fail, seconds, slowest cell.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="NOTEBOOK_OR_DIR")
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="FILE.json",
        help="where to write the record, e.g. benchmarks/results/h200-notebooks-YYYY-MM-DD.json "
        "(the README cites the newest record by its date, whichever GPU made it)",
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a cell running longer fails (default: 60)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="notebooks run at once (default: 1; more on a many-core host, and "
        "the seconds recorded then include the others' load)",
    )
    args = parser.parse_args(argv)
    if args.cell_timeout <= 0:
        parser.error("--cell-timeout must be a positive number of seconds")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    try:
        record = record_notebooks(args.paths, args.cell_timeout, jobs=args.jobs)
    except FileNotFoundError as err:
        parser.error(str(err))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"record: {args.out} ({sum(e['passed'] for e in record['notebooks'])}/"
        f"{len(record['notebooks'])} notebooks passed)"
    )
    return 0 if record["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
