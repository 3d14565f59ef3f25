"""Command-line entry points of `mlinfra_lab.scaling` (registered by `mlinfra_lab.cli`).

Contract: ``mlinfra-lab scaling profile|diagnose|allreduce|stacks|nccl-log`` and ``mlinfra-lab
bench scaling``; handlers return an exit code, let the chapter's errors (`FaultSpecError`,
`RankLostError`, `ResultFileError`) reach `mlinfra_lab.cli.main`, which prints them on one
line, and raise `CommandError` for a flag or a file the user must fix.
Heavy modules (torch) are imported inside the handlers so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlinfra_lab.errors import CommandError

__all__ = ["register"]

_FAULT_HELP = (
    "inject a fault (repeatable): straggler:rank=R,ms=M | slow_data:ms=M | "
    "small_batch:global=G | no_overlap | slow_transport:mbps=X | lost_rank:rank=R[,step=S] | "
    "hang:rank=R,step=S"
)


def _profile(args: argparse.Namespace) -> int:
    from mlinfra_lab.scaling.config import RunConfig
    from mlinfra_lab.scaling.launch import profile

    changes = {
        "steps": args.steps,
        "trace": args.trace,
        "backend": args.backend,
        "timeout_s": args.timeout,
        "pg_timeout_s": args.pg_timeout,
        "stack_dump_s": args.stack_dump,
    }
    if args.batch:
        changes["batch"] = args.batch
    config = RunConfig.for_gpu(**changes) if args.gpu else RunConfig(**changes)
    config = config.with_faults(*(args.inject or []))
    if args.nproc < 1:
        raise CommandError("--nproc must be at least 1")
    result = profile(config, args.nproc, out=args.out)
    b = result.breakdown()
    print(
        f"{args.nproc} ranks, {result.rank_batch}/rank: step {result.step_time() * 1e3:.1f} ms,"
        f" {result.throughput():.0f} samples/s, communication share {result.comm_share():.0%}"
    )
    print(
        "  "
        + "  ".join(
            f"{k} {b[k] * 1e3:.1f} ms"
            for k in ("data_wait", "forward", "backward", "exposed_comm", "optimizer")
        )
    )
    print(f"wrote {args.out}")
    return 0


def _diagnose(args: argparse.Namespace) -> int:
    from mlinfra_lab.scaling.diagnose import diagnose

    log = None
    if args.nccl_log:
        try:
            log = Path(args.nccl_log).read_text(errors="replace")
        except OSError as err:
            raise CommandError(f"{args.nccl_log}: cannot read ({err.strerror})") from err
    result = diagnose(args.small, args.large, nccl_log=log)
    print(result.to_json() if args.json else result.report())
    return 0


def _allreduce(args: argparse.Namespace) -> int:
    from mlinfra_lab.results import default_out, device_label
    from mlinfra_lab.scaling.allreduce import default_sizes, fit_alpha_beta
    from mlinfra_lab.scaling.harness import environment
    from mlinfra_lab.scaling.launch import run_allreduce_bench

    sizes = default_sizes(max_bytes=int(args.max_mb * 2**20))
    rows = run_allreduce_bench(args.nproc, sizes, iters=args.iters, backend=args.backend)
    print(f"{'bytes':>12} {'time (us)':>12} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for r in rows:
        print(
            f"{r['bytes']:>12} {r['time_s'] * 1e6:>12.1f} {r['algbw'] / 1e9:>11.3f} "
            f"{r['busbw'] / 1e9:>11.3f}"
        )
    fit = fit_alpha_beta(rows)
    print(
        f"fit: latency {fit.latency_s * 1e6:.1f} us, {fit.per_byte_s * 1e9:.4f} ns/byte "
        f"(worst relative error {fit.max_rel_error:.0%})"
    )
    env = environment()
    path = args.out
    if path is None and args.bench:  # `bench scaling` always writes its result
        path = default_out(device_label(env["device"]), "scaling", env["date"])
    if path:
        out = {
            "kind": "allreduce",
            "nproc": args.nproc,
            "environment": env,
            "rows": rows,
            "fit": fit.as_dict(),
        }
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(out, indent=1))
        print(f"wrote {path}")
    return 0


def _stacks(args: argparse.Namespace) -> int:
    from mlinfra_lab.scaling.stacks import name_hung_rank, read_stack_dumps

    if not Path(args.folder).is_dir():
        raise CommandError(f"{args.folder}: not a folder of rank<R>.stacks files")
    print(name_hung_rank(read_stack_dumps(args.folder, args.world_size)).report())
    return 0


def _nccl_log(args: argparse.Namespace) -> int:
    from mlinfra_lab.scaling.nccl_log import parse_nccl_log

    try:
        text = Path(args.log).read_text(errors="replace")
    except OSError as err:
        raise CommandError(f"{args.log}: cannot read ({err.strerror})") from err
    parsed = parse_nccl_log(text)
    print(json.dumps(parsed.as_dict(), indent=1) if args.json else parsed.verdict)
    return 0


def _add_allreduce_args(p: argparse.ArgumentParser, out_help: str, bench: bool) -> None:
    p.add_argument("--nproc", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--max-mb", type=float, default=64, help="largest message in MiB (64)")
    p.add_argument("--iters", type=int, default=10, help="timed all-reduces per size (10)")
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    p.add_argument("--out", metavar="FILE", help=out_help)
    p.set_defaults(func=_allreduce, bench=bench)


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``scaling ...`` and ``bench scaling``."""
    scaling = commands.add_parser(
        "scaling",
        help="profile DDP scaling, benchmark all-reduce, diagnose a slowdown",
        description="Why did more GPUs give less speedup? Profile runs at two scales "
        "(with injectable faults), then diagnose the pair.",
    )
    sub = scaling.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub.add_parser(
        "profile",
        help="run the profiled DDP loop on N local ranks",
        description="Run DDP on N local ranks (gloo on CPU, NCCL on GPU) and "
        "record per rank and step: data wait, forward, backward, "
        "exposed communication, optimizer.",
    )
    p.add_argument("--nproc", type=int, default=2, help="number of ranks (default 2)")
    p.add_argument("--steps", type=int, default=8, help="timed steps (default 8)")
    p.add_argument("--batch", type=int, help="per-rank batch (default: the config's)")
    p.add_argument("--inject", action="append", metavar="FAULT", help=_FAULT_HELP)
    p.add_argument("--out", required=True, help="result file (JSON)")
    p.add_argument(
        "--trace",
        action="store_true",
        help="also write a torch.profiler trace of rank 0 (OUT.trace.json)",
    )
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    p.add_argument(
        "--gpu",
        action="store_true",
        help="GPU config: no emulated device time or link, a larger model",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds without progress before a rank is reported lost (120)",
    )
    p.add_argument(
        "--pg-timeout",
        type=float,
        default=0.0,
        help="the process group's own timeout in seconds (default: longer than --timeout)",
    )
    p.add_argument(
        "--stack-dump",
        type=float,
        default=0.0,
        help="dump every rank's stacks when a step lasts this many seconds; a failed job "
        "then names the stuck rank (default 0: off)",
    )
    p.set_defaults(func=_profile)

    d = sub.add_parser(
        "diagnose",
        help="compare a small and a large run, name the cause",
        description="Compare two run files and name the primary cause of the "
        "lost scaling efficiency, with evidence.",
    )
    d.add_argument("small", help="run file at the smaller world size")
    d.add_argument("large", help="run file at the larger world size")
    d.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    d.add_argument("--nccl-log", help="NCCL_DEBUG=INFO log of the large run")
    d.set_defaults(func=_diagnose)

    a = sub.add_parser("allreduce", help="all-reduce sweep (nccl-tests style) + alpha-beta fit")
    _add_allreduce_args(a, "write the rows and the alpha-beta fit to this JSON file", False)

    st = sub.add_parser(
        "stacks",
        help="name the hung rank from every rank's stack dump",
        description="Read FOLDER/rank<R>.stacks (faulthandler dumps, or `py-spy dump --pid "
        "PID` output) and name the rank stuck outside a collective.",
    )
    st.add_argument("folder", help="folder of rank<R>.stacks files")
    st.add_argument("--world-size", type=int, required=True, help="number of ranks")
    st.set_defaults(func=_stacks)

    n = sub.add_parser("nccl-log", help="say which transport an NCCL_DEBUG=INFO log shows")
    n.add_argument("log", help="the log file")
    n.add_argument("--json", action="store_true", help="print as JSON")
    n.set_defaults(func=_nccl_log)

    b = bench.add_parser("scaling", help="all-reduce bandwidth sweep and alpha-beta fit")
    _add_allreduce_args(
        b,
        "result JSON file: the rows and the alpha-beta fit (default: "
        "benchmarks/results/DEVICE-scaling-YYYY-MM-DD.json)",
        True,
    )
