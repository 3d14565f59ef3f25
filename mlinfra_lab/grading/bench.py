"""``mlinfra-lab bench grading``: what grading a class costs, from release to LMS export.

Contract: `run_bench(config)` releases ``labs/00_warmup.ipynb``, writes a class of
``students`` submissions (a seeded mix: per exercise, the source's solution, one of the
lab's own ``wrong-answer`` cells, or the released stub left unanswered), grades them in ONE
``mlinfra-lab grade --jobs N --feedback --export canvas --summary`` run in a fresh process,
checks every student's total against the mix (an exercise answered right scores its points,
any other 0: the graders do not cascade), checks one feedback report per student and one
Canvas row per student, and returns the record that `main` writes as
``benchmarks/results/cpu-grading-YYYY-MM-DD.json`` (device, versions, date, the load
average before and after (a shared machine's load shows in every figure), the total
seconds, each phase's and the seconds per submission).

With ``from_download="canvas"`` (``--from-download canvas``) the class reaches ``grade`` the
way an LMS hands it over: `bench_download` packs it as Canvas's submissions zip (its file
names, ``_LATE``, Colab's and browsers' copies, a draft uploaded before the final notebook
by a tenth of the class) with Canvas's gradebook export as the roster, and the clock runs
around ``mlinfra-lab collect`` and then the same ``grade`` run (``--roster`` added); the
collect report must have taken each student's latest upload, and the totals must be the
final notebooks'. Feedback and the export are then written again alone, after the clock,
to show their share.

Design decisions:
- One ``grade`` process, as an instructor runs it, so imports, kernel starts, the judge,
  the database and every output count; the clock runs around the whole command.
- That process is the installed ``mlinfra-lab`` command (the console script of
  pyproject.toml, found beside this Python), not a module of this package run by name: the
  benchmark times the program an instructor types, and the grading package does not
  depend on the top-level command module that lists it (`mlinfra_lab.cli` loads
  `mlinfra_lab.grading.cli`, which loads this module).
- The answers are the lab's own: right ones from the source, wrong ones from the cells
  ``validate`` proves each grader fails, so the class exercises failing graders too.
- A total that does not match the mix stops the benchmark (exit 1): a timing of a grader
  that scores wrongly is not worth keeping. The drafts are right exactly where the final
  notebook is not, so a draft collected in place of its final shows in the totals too.
- Both modes draw the same mix of answers from the seed, so their costs compare.
- The grading secret is a fixed, non-default one (hidden tests as in a real class); the
  sandbox is the default (``auto``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

from .errors import GradingError

__all__ = ["BENCH_HELP", "BenchConfig", "BenchError", "add_bench_args", "main", "run_bench"]

BENCH_HELP = "grade a generated class of 200 warm-up submissions: feedback, Canvas export"
REPO = Path(__file__).resolve().parents[2]
COMMAND = "mlinfra-lab"  # the console script pyproject.toml installs
LAB = "00_warmup"
SECRET = "bench-grading-secret"


class BenchError(GradingError):
    """The benchmark cannot run, or grading scored the class wrongly."""


@dataclass(frozen=True)
class BenchConfig:
    """What `run_bench` grades."""

    students: int = 200
    jobs: int = 2  # notebooks graded side by side (--jobs)
    seed: int = 0  # the mix of answers
    p_right: float = 0.6  # per exercise: right, else wrong (p_wrong), else unanswered
    p_wrong: float = 0.25
    judge: bool = True
    keep: str | None = None  # a folder to keep the class and its gradebook in
    from_download: str | None = None  # "canvas": collect the class from a Canvas-style zip
    resubmissions: float = 0.1  # from a download: the share who uploaded a draft first (>= 2)


def _class(
    folder: Path, config: BenchConfig
) -> tuple[dict[str, float], dict[str, int], dict[str, float]]:
    """Write the submissions under `folder`, and the drafts of those who resubmitted beside
    it (``drafts/``, from-download mode only); (student -> expected total, count of each
    kind of answer, student -> a draft's total)."""
    import nbformat

    from .release import release_node
    from .submissions import load_source_labs

    lab = load_source_labs(REPO / "labs" / f"{LAB}.ipynb")[LAB]
    points = {g.exercise: 0.0 for g in lab.graders}
    for g in lab.graders:
        points[g.exercise] += g.points
    solutions = {
        c.id: c.source for c in lab.notebook.cells if c.get("id", "").endswith("-solution")
    }
    exercise_of = {c.id: c.metadata.get("exercise") for c in lab.notebook.cells if c.get("id") in solutions}  # fmt: skip
    wrong: dict[str, list] = {}
    for w in lab.wrong_answers:
        wrong.setdefault(w.replaces, []).append(w.source)
    released = release_node(lab.notebook, LAB)
    rng = random.Random(config.seed)  # the same mix of answers in both modes
    n_drafts = max(2, round(config.resubmissions * config.students)) if config.from_download else 0
    drafted = set(random.Random(config.seed + 1).sample(range(config.students), min(n_drafts, config.students)))  # fmt: skip
    expected: dict[str, float] = {}
    drafts: dict[str, float] = {}
    counts = {"right": 0, "wrong": 0, "unanswered": 0}
    for k in range(config.students):
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        draft = nbformat.from_dict(json.loads(json.dumps(released)))
        total = draft_total = 0.0
        for cell, draft_cell in zip(nb.cells, draft.cells, strict=True):
            if cell.get("id") not in solutions:
                continue
            draw = rng.random()
            if draw < config.p_right:
                cell.source, kind = solutions[cell.id], "right"
                total += points[exercise_of[cell.id]]
            elif draw < config.p_right + config.p_wrong and wrong.get(cell.id):
                cell.source, kind = rng.choice(wrong[cell.id]), "wrong"
            else:
                kind = "unanswered"
            if kind != "right":  # a draft right where the final is not: totals differ
                draft_cell.source = solutions[cell.id]
                draft_total += points[exercise_of[cell.id]]
            counts[kind] += 1
        name = f"student{k:03d}"
        (folder / name).mkdir(parents=True)
        nbformat.write(nb, str(folder / name / f"{LAB}.ipynb"))
        expected[name] = total
        if k in drafted:
            (folder.parent / "drafts" / name).mkdir(parents=True)
            nbformat.write(draft, str(folder.parent / "drafts" / name / f"{LAB}.ipynb"))
            drafts[name] = draft_total
    return expected, counts, drafts


def _check(gb: Path, expected: dict[str, float]) -> dict[str, int]:
    totals: dict[str, float] = {}
    why: dict[str, list[str]] = {}
    with open(gb / "gradebook.csv", newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            totals[row["student"]] = totals.get(row["student"], 0.0) + float(row["points"] or 0)
            why.setdefault(row["student"], []).append(f"{row['exercise']}: {row['message']}")
    wrong = {s: (totals.get(s), want) for s, want in expected.items() if abs(totals.get(s, -1) - want) > 1e-9}  # fmt: skip
    if wrong:
        sample = "; ".join(
            f"{s}: {got} (expected {want}: {' / '.join(why.get(s, ['not in the gradebook']))})"
            for s, (got, want) in list(wrong.items())[:3]
        )
        raise BenchError(f"{len(wrong)} students scored other than their answers earn: {sample}")
    reports = sorted((gb / "feedback").glob(f"*/{LAB}.html"))
    with open(gb / "export-canvas.csv", newline="", encoding="utf-8") as fh:
        canvas = list(csv.reader(fh))
    if len(reports) != len(expected) or len(canvas) != len(expected) + 2:
        raise BenchError(
            f"{len(reports)} feedback reports and {len(canvas) - 2} Canvas rows for "
            f"{len(expected)} students"
        )
    return {"feedback_reports": len(reports), "canvas_rows": len(canvas) - 2}


def grade_program() -> list[str]:
    """How to start the installed ``mlinfra-lab`` with this Python: ``[python, script]``.

    The script is looked for where this interpreter's installs put scripts (a virtual
    environment's ``bin``), then beside the interpreter; `BenchError` says how to install
    it when neither has it."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        script = Path(folder) / COMMAND
        if script.is_file():
            return [sys.executable, str(script)]
    raise BenchError(
        f"no {COMMAND!r} command installed for {sys.executable}; install the package "
        '(pip install -e ".[grading]" in the checkout, or make setup)'
    )


def _timed(argv: list[str], env: dict[str, str]) -> float:
    """Run `argv` from the checkout; its wall seconds, or `BenchError` on a non-zero exit.

    Wall time, not the CPU time of the process tree: the kernels run in sandboxes that are
    killed, not waited for, so ``getrusage(RUSAGE_CHILDREN)`` never counts them."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=False)  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise BenchError(f"{argv[2]} exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}")  # fmt: skip
    return seconds


def _load() -> list[float] | None:
    """The load average over 1, 5 and 15 minutes (a shared machine says so here)."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def _download_run(root: Path, config: BenchConfig, flags: list[str], env: dict[str, str]) -> dict:
    """Pack the class as a Canvas download; time collect, then grade; check both."""
    from .bench_download import check_collected, pack_canvas

    finals = {p.parent.name: p for p in (root / "submissions").glob(f"*/{LAB}.ipynb")}
    drafts = {p.parent.name: p for p in (root / "drafts").glob(f"*/{LAB}.ipynb")}
    download = pack_canvas(finals, drafts, root / "submissions.zip", root / "canvas-gradebook.csv", config.seed)  # fmt: skip
    roster = str(download.roster)
    collect = [
        *grade_program(), "collect", str(download.zip), "--lab", LAB, "--out",
        str(root / "collected"), "--roster", roster, "--report", str(root / "collect.json"),
    ]  # fmt: skip
    grade = [
        *grade_program(), "grade", str(root / "collected"),
        "--source", str(REPO / "labs" / f"{LAB}.ipynb"), "--out", str(root / "gradebook"),
        *flags, "--roster", roster,
    ]  # fmt: skip
    phases = {"collect": _timed(collect, env), "grade": _timed(grade, env)}
    return {"phases": phases, "download": download, "collect": check_collected(root / "collect.json", download)}  # fmt: skip


def run_bench(config: BenchConfig) -> dict:
    """Generate, grade and check the class (see the module docstring); the record."""
    if not (REPO / "labs" / f"{LAB}.ipynb").is_file():
        raise BenchError(f"{REPO / 'labs'}: no {LAB}.ipynb; run the benchmark from a checkout")
    if config.from_download not in (None, "canvas"):
        raise BenchError("--from-download: only 'canvas' is generated")
    where: contextlib.AbstractContextManager[str]
    if config.keep:
        Path(config.keep).mkdir(parents=True, exist_ok=True)
        where = contextlib.nullcontext(tempfile.mkdtemp(prefix="bench-grading-", dir=config.keep))
    else:
        where = tempfile.TemporaryDirectory(prefix="mlinfra-bench-grading-")
    extra: dict = {}
    with where as tmp:
        root = Path(tmp)
        expected, counts, drafts = _class(root / "submissions", config)
        flags = [
            "--jobs", str(config.jobs), "--feedback", "--export", "canvas", "--summary",
            *([] if config.judge else ["--no-judge"]),
        ]  # fmt: skip
        env = {**os.environ, "MLINFRA_GRADE_SECRET": SECRET}
        load_before = _load()
        if config.from_download:
            run = _download_run(root, config, flags, env)
            phases = run["phases"]
        else:
            argv = [
                *grade_program(), "grade", str(root / "submissions"),
                "--source", str(REPO / "labs" / f"{LAB}.ipynb"), "--out", str(root / "gradebook"),
                *flags,
            ]  # fmt: skip
            phases = {"grade": _timed(argv, env)}
        load_after = _load()
        seconds = sum(phases.values())
        outputs = _check(root / "gradebook", expected)
        sandbox = json.loads((root / "gradebook" / "gradebook.json").read_text())["config"]
        if config.from_download:  # after the clock: feedback and export alone, for scale
            gb, roster = str(root / "gradebook"), str(run["download"].roster)
            again = [*grade_program(), "grade", "--out", gb]
            alone = {
                "feedback": _timed([*again, "--feedback"], env),
                "export_canvas": _timed([*again, "--export", "canvas", "--roster", roster], env),
            }
            differing = {s for s, t in expected.items() if t != drafts.get(s, t)}
            extra = {
                "download": {
                    "lms": "canvas",
                    "entries": sum(len(s.entries) for s in run["download"].students),
                    "naming": run["download"].naming(),
                    "resubmitted": len(drafts),
                    "resubmitted_with_draft_total_differing": len(differing),
                    **run["collect"],
                },
                "rerun_alone_seconds": alone,
            }
    command = (
        "mlinfra-lab grade SUBMISSIONS --source labs/00_warmup.ipynb --out GRADEBOOK "
        + " ".join(flags)
    )
    if config.from_download:
        command = (
            "mlinfra-lab collect submissions.zip --lab 00_warmup --out SUBMISSIONS "
            "--roster canvas-gradebook.csv --report collect.json; "
            + command
            + " --roster canvas-gradebook.csv"
        )
    return {
        "benchmark": "grading-class",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": {
            "device": "cpu",
            "device_name": platform.machine(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            **{
                p: version(p)
                for p in ("ipykernel", "jupyter_client", "nbformat", "numpy", "matplotlib")
            },  # fmt: skip
        },
        "config": asdict(config)
        | {"lab": f"labs/{LAB}.ipynb", "sandbox": sandbox.get("sandbox_used")},  # fmt: skip
        "results": {
            "seconds_total": seconds,
            "seconds_per_submission": seconds / config.students,
            "phases_seconds": phases,
            "submissions_graded": len(expected),
            "answers": counts,
            "mean_points": sum(expected.values()) / len(expected),
            **outputs,
            **extra,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "load_average_1min_after": load_after[0] if load_after else None,
        },
        "command": command,
    }


def add_bench_args(parser: argparse.ArgumentParser) -> None:
    """The flags of ``bench grading``."""
    parser.add_argument("--students", type=int, default=200, help="class size (default 200)")
    parser.add_argument("--jobs", type=int, default=2, help="grade --jobs (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the answer mix (default 0)")
    parser.add_argument("--no-judge", dest="judge", action="store_false", help="grade without the judge")  # fmt: skip
    parser.add_argument("--keep", metavar="DIR", help="keep the class and gradebook under DIR")
    parser.add_argument(
        "--from-download",
        choices=("canvas",),
        default=None,
        help="pack the class as a Canvas submissions zip (its file names, _LATE, Colab and "
        "browser copies, resubmissions) and time 'collect' then 'grade' (default: grade "
        "the generated folders)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        default=None,
        help="result JSON file (default: benchmarks/results/cpu-grading-YYYY-MM-DD.json)",
    )


def bench_command(args: argparse.Namespace) -> int:
    """Run the benchmark from parsed flags; write the record; 0, or 1 on a wrong score."""
    from mlinfra_lab.results import default_out

    if args.students < 1 or args.jobs < 1:
        raise BenchError("--students and --jobs must be at least 1")
    config = BenchConfig(students=args.students, jobs=args.jobs, seed=args.seed, judge=args.judge, keep=args.keep, from_download=args.from_download)  # fmt: skip
    record = run_bench(config)
    out = Path(args.out) if args.out else default_out("cpu", "grading", record["date"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    r = record["results"]
    print(
        f"graded {r['submissions_graded']} submissions in {r['seconds_total']:.1f} s "
        f"({r['seconds_per_submission']:.2f} s each, --jobs {config.jobs}; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in r["phases_seconds"].items())
        + f"); wrote {out}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m mlinfra_lab.grading.bench``: the same as ``mlinfra-lab bench grading``."""
    parser = argparse.ArgumentParser(prog="mlinfra-lab bench grading", description=BENCH_HELP)
    add_bench_args(parser)
    try:
        return bench_command(parser.parse_args(argv))
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
