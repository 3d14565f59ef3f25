"""What the judge costs: grading 8 honest warm-up submissions with and without it.

Contract: ``python benchmarks/scripts/grading_cost.py [--repeats R] [--anchor REV] [--out
FILE]`` (repository root, the course's environment) releases ``labs/00_warmup.ipynb``, fills
in the source's solutions for 8 students, and grades the folder with ``mlinfra-lab grade
--jobs 2`` with the judge and with ``--no-judge``, and, with ``--anchor REV``, with the
grading code of git revision REV (checked out in a temporary worktree, run with this
environment): the grader as it was before a change. The modes alternate, `R` runs each
(default 2). It prints the wall times and the ratios of the medians, and writes them, with
the machine, versions and date, as JSON (default ``benchmarks/results/
cpu-grading-judge-<date>.json``: since issue 30, ``cpu-grading-<date>.json`` is what
``mlinfra-lab bench grading`` writes, the cost of a class of 200; the committed
``cpu-grading-2026-12-04.json`` is this script's). Every run must give every student full
marks, else it stops.

Design decisions:
- Side by side in one run, alternating, and quoted as ratios: the 2-core CI machine's speed
  drifts between runs. Issue 14 names the anchor: at most 1.5x the grading of ``7bd5df9``
  (nbval, no sandbox, no judge).
- Each run is a fresh ``python -m mlinfra_lab.cli`` process, as an instructor runs it, so
  imports count the same for every mode.
- The submissions are the released notebook with the solutions pasted in, the set-up cell
  included: what an honest student hands in. The sandbox is the default (``auto``).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[2]
LAB = Path("labs") / "00_warmup.ipynb"  # each checkout grades its own edition of the lab
STUDENTS = 8


def _submissions(code: Path, folder: Path) -> None:
    """8 honest submissions of the warm-up lab of the checkout at `code`, into `folder`."""
    from mlinfra_lab.grading import release_node

    source = nbformat.read(str(code / LAB), as_version=4)
    solutions = {c.id: c.source for c in source.cells if c.get("id", "").endswith("-solution")}
    nb = release_node(source, "00_warmup")
    for cell in nb.cells:
        if cell.get("id") in solutions:
            cell.source = solutions[cell.id]
    folder.mkdir(parents=True)
    for k in range(STUDENTS):
        nbformat.write(nb, str(folder / f"student{k:02d}.ipynb"))


def _grade(code: Path, subs: Path, out: Path, *flags: str) -> float:
    """Seconds for one ``grade`` run with the package at `code`; stops unless all full marks."""
    argv = [sys.executable, "-m", "mlinfra_lab.cli", "grade", str(subs)]
    argv += ["--source", str(code / LAB), "--out", str(out), "--jobs", "2", *flags]
    env = {**os.environ, "PYTHONPATH": str(code)}
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=code, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    with open(out / "gradebook.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    short = [r for r in rows if float(r["points"]) != float(r["max"])]
    if len(rows) < STUDENTS or short:
        sys.exit(f"not full marks ({code}, {flags}): {short[:3]}")
    return seconds


def _worktree(rev: str, where: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), rev],
        check=True,
        capture_output=True,
    )
    return where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs of each mode (default 2)")
    parser.add_argument("--anchor", metavar="REV", help="also grade with revision REV's code")
    parser.add_argument("--out", type=Path, help="the JSON file to write")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    today = datetime.date.today().isoformat()
    out = args.out or REPO / "benchmarks" / "results" / f"cpu-grading-judge-{today}.json"
    with tempfile.TemporaryDirectory() as tmp:
        modes = {"no_judge": (REPO, ("--no-judge",)), "judge": (REPO, ())}
        if args.anchor:
            modes["anchor"] = (_worktree(args.anchor, Path(tmp) / "anchor"), ())
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for code in {code for code, _ in modes.values()}:
            _submissions(code, Path(tmp) / "submissions" / code.name)
        try:
            for repeat in range(args.repeats):
                for mode, (code, flags) in modes.items():
                    subs = Path(tmp) / "submissions" / code.name
                    seconds = _grade(code, subs, Path(tmp) / f"gb-{mode}-{repeat}", *flags)
                    times[mode].append(seconds)
                    print(f"{mode:9s} run {repeat + 1}: {seconds:.1f} s", flush=True)
        finally:
            if args.anchor:
                subprocess.run(
                    [
                        "git",
                        "-C",
                        str(REPO),
                        "worktree",
                        "remove",
                        "--force",
                        str(Path(tmp) / "anchor"),
                    ],
                    check=False,
                )
    median = {mode: statistics.median(t) for mode, t in times.items()}
    ratios = {f"{mode}_over_no_judge": median[mode] / median["no_judge"] for mode in median}
    if args.anchor:
        ratios["judge_over_anchor"] = median["judge"] / median["anchor"]
    for name, ratio in ratios.items():
        print(f"median {name.replace('_over_', ' / ')}: {ratio:.2f}x")
    record = {
        "benchmark": "grading-cost",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": {
            "device": "cpu",
            "device_name": platform.machine(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "ipykernel": version("ipykernel"),
            "jupyter_client": version("jupyter_client"),
            "numpy": version("numpy"),
        },
        "config": {
            "students": STUDENTS,
            "jobs": 2,
            "repeats": args.repeats,
            "lab": str(LAB),
            "anchor": args.anchor,
        },
        "results": {
            **{f"seconds_{mode}": t for mode, t in times.items()},
            **{f"ratio_{name}": r for name, r in ratios.items() if not name.startswith("no_")},
            "load_average_1min": os.getloadavg()[0],
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
