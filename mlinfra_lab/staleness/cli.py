"""Command-line entry points of `mlinfra_lab.staleness` (registered by `mlinfra_lab.cli`).

Contract: ``mlinfra-lab bench staleness`` times the simulator on the acceptance workload
(64 workers x 20,000 updates of `logreg_problem`, target < 10 s on a 2-core CPU) and writes a
JSON result; ``mlinfra-lab staleness simulate`` runs one simulation and prints its summary.
A bad argument raises `StalenessConfigError`, which `mlinfra_lab.cli.main` prints on one line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

POLICIES = (
    "async",
    "sync",
    "bounded-wait",
    "bounded-drop",
    "ssp",
    "inverse",
    "zhang",
    "dc",
    "dc-adaptive",
)


def _policy(name: str, bound: int, lam: float):
    from mlinfra_lab import staleness as st

    return {
        "async": lambda: st.Async(),
        "sync": lambda: st.Sync(),
        "bounded-wait": lambda: st.BoundedDelay(bound, "wait"),
        "bounded-drop": lambda: st.BoundedDelay(bound, "drop"),
        "ssp": lambda: st.SSP(bound),
        "inverse": lambda: st.StalenessAwareLR(),
        "zhang": lambda: st.StalenessAwareLR.zhang(),
        "dc": lambda: st.DelayCompensated(lam),
        "dc-adaptive": lambda: st.DelayCompensated(lam, adaptive=True),
    }[name]()


def _bench(args: argparse.Namespace) -> int:
    import datetime
    import json
    import os
    import platform
    import time

    import torch

    from mlinfra_lab import staleness as st
    from mlinfra_lab.errors import CommandError
    from mlinfra_lab.progress import progress_bar
    from mlinfra_lab.results import default_out
    from mlinfra_lab.runtime import describe

    if args.workers < 1 or args.updates < 1 or args.repeats < 1:
        raise CommandError("--workers, --updates and --repeats must be >= 1")
    problem = st.logreg_problem()
    speeds = st.WorkerSpeeds.lognormal(args.workers, sigma=0.3)
    st.simulate(problem, speeds, st.Async(), 50, args.lr, 0)  # warm-up: imports, first calls
    seconds, summary = [], {}
    for rep in progress_bar(range(args.repeats), desc="bench staleness", unit="run"):
        start = time.perf_counter()
        result = st.simulate(
            problem, speeds, st.Async(), args.updates, args.lr, rep, eval_every=args.eval_every
        )
        seconds.append(time.perf_counter() - start)
        summary = result.summary()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    record = {
        "benchmark": "staleness simulate",
        "workload": f"{args.workers} workers x {args.updates} updates, logreg_problem, Async()",
        "seconds": seconds,
        "best_seconds": min(seconds),
        "simulated_updates_per_wall_second": args.updates / min(seconds),
        "target_seconds": 10.0,
        "load_average_after": load,
        "last_run": summary,
        "runtime": describe().as_dict(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    print(
        f"{record['workload']}: best {min(seconds):.2f} s of {len(seconds)} "
        f"(target < 10 s; load average {load})"
    )
    out = args.out or default_out("cpu", "staleness", record["date"])  # it runs on the CPU
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {out}")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    import json

    from mlinfra_lab import staleness as st

    problems: dict[str, Callable[[], st.Problem]] = {
        "logreg": st.logreg_problem,
        "mlp": st.mlp_problem,
        "quadratic": lambda: st.quadratic_problem(10, 10.0, noise=0.5),
    }
    speeds = st.WorkerSpeeds.straggler(args.workers, args.slow_factor, 0)
    policy = _policy(args.policy, args.bound, args.lam)
    result = st.simulate(
        problems[args.problem](),
        speeds,
        policy,
        args.updates,
        args.lr,
        args.seed,
        args.momentum,
        progress=True,
    )
    print(json.dumps(result.summary(), indent=2))
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add `bench staleness` and `staleness simulate`."""
    b = bench.add_parser(
        "staleness",
        help="time the async parameter-server simulator (64 workers x 20,000 updates)",
        description="Simulate Async() SGD on logreg_problem with log-normal worker speeds "
        "and report the wall-clock time (target: < 10 s on a 2-core CPU).",
    )
    b.add_argument("--workers", type=int, default=64, help="simulated workers (default 64)")
    b.add_argument("--updates", type=int, default=20_000, help="applied updates (default 20000)")
    b.add_argument("--lr", type=float, default=0.5, help="learning rate (default 0.5)")
    b.add_argument(
        "--eval-every",
        type=int,
        default=100,
        help="measure the full training loss every N updates (default 100)",
    )
    b.add_argument("--repeats", type=int, default=3, help="timed runs; the best is reported")
    b.add_argument(
        "--out",
        metavar="FILE",
        default=None,
        help="result JSON file (default: benchmarks/results/cpu-staleness-YYYY-MM-DD.json)",
    )
    b.add_argument("--output", dest="out", help=argparse.SUPPRESS)  # deprecated spelling
    b.set_defaults(func=_bench)

    top = commands.add_parser("staleness", help="asynchronous-training staleness simulator")
    sub = top.add_subparsers(dest="staleness_command", metavar="ACTION", required=True)
    s = sub.add_parser(
        "simulate",
        help="run one simulation with a straggler and print its summary as JSON",
        description="Simulate a parameter server where worker 0 is a straggler.",
    )
    s.add_argument(
        "--problem", choices=("logreg", "mlp", "quadratic"), default="logreg", help="model"
    )
    s.add_argument("--policy", choices=POLICIES, default="async", help="mitigation policy")
    s.add_argument("--workers", type=int, default=8, help="simulated workers (default 8)")
    s.add_argument("--slow-factor", type=float, default=10.0, help="straggler slowness")
    s.add_argument("--updates", type=int, default=1000, help="updates to apply (default 1000)")
    s.add_argument("--lr", type=float, default=0.5, help="learning rate (default 0.5)")
    s.add_argument("--seed", type=int, default=0, help="seed of speeds and minibatches")
    s.add_argument("--momentum", type=float, default=0.0, help="server momentum (default 0)")
    s.add_argument(
        "--bound",
        type=int,
        default=8,
        help="max staleness in updates (bounded-*), clock bound (ssp)",
    )
    s.add_argument(
        "--lam",
        type=float,
        default=1.0,
        help="DC-ASGD lambda (dc policy; lambda_0 for dc-adaptive)",
    )
    s.set_defaults(func=_simulate)
