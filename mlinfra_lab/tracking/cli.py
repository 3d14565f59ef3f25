"""Command-line entry points of `mlinfra_lab.tracking`: ``mlinfra-lab track ...`` and ``bench tracking``.

Contract: `register(commands, bench)` adds ``track`` (``runs search``, ``lineage``,
``retention plan|apply``, ``gc``, ``grant``) and ``bench tracking``; every handler opens
the store named by ``--db`` / ``--artifacts`` (or ``$MLINFRA_TRACKING_DB`` /
``$MLINFRA_TRACKING_ARTIFACTS``), acts as ``--user`` (default: ``$MLINFRA_USER`` or the OS
user), or with ``--server URL --token T`` goes through a tracking server as the token's
user (``--user`` refused; ``track serve`` and ``track token`` are in `server.cli`), prints
a table or JSON, and returns 0; store errors (`TrackingError`, an `MlinfraError`) reach ``mlinfra-lab``'s
main, which prints them as one line; a bad ``--policy`` is a `CommandError` naming it.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone

from mlinfra_lab.errors import CommandError
from mlinfra_lab.tracking.server.cli import register as register_server
from mlinfra_lab.tracking.server.cli import server_args

__all__ = ["register"]


def _store(args: argparse.Namespace):
    """The store named by --db/--artifacts, or, with --server, a `TrackingClient` on that server."""
    if getattr(args, "server", None):
        from mlinfra_lab.tracking.server.cli import client_for

        return client_for(args)
    from mlinfra_lab.tracking import TrackingStore

    return TrackingStore(args.db, args.artifacts, default_user=args.user)


def _policy(args: argparse.Namespace):
    from mlinfra_lab.tracking import RetentionPolicy, RetentionRule

    try:
        if args.policy:
            with open(args.policy) as f:
                spec = json.load(f)
            rules = tuple(RetentionRule(**r) for r in spec["rules"])
            return RetentionPolicy(rules, spec.get("cold_root"))
        rule = RetentionRule(
            kind=args.kind,
            keep_all_days=args.keep_days,
            keep_last_runs=args.keep_runs,
            cold_after_days=args.cold_after,
            delete_after_days=args.delete_after,
        )
        return RetentionPolicy((rule,), args.cold_root)
    except OSError as err:
        raise CommandError(f"--policy {args.policy}: cannot read ({err.strerror})") from err
    except (ValueError, TypeError, KeyError) as err:  # bad JSON, unknown or invalid fields
        where = f"--policy {args.policy}" if args.policy else "the retention options"
        raise CommandError(
            f"{where}: not a valid retention policy ({err}); see "
            "`mlinfra-lab track retention --help`"
        ) from err


def _runs_search(args: argparse.Namespace) -> int:
    with _store(args) as store:
        project = None if args.project == "*" else args.project
        runs = store.search_runs(project, args.filter, args.order_by, args.limit)
    if args.json:
        print(json.dumps([r.__dict__ for r in runs], indent=2, default=str))
        return 0
    for r in runs:
        when = datetime.fromtimestamp(r.created_at, timezone.utc).strftime("%Y-%m-%d %H:%M")
        mets = " ".join(f"{k}={v:.4g}" for k, v in sorted(r.metrics.items()))
        print(f"{r.id:>8}  {r.project:<12} {r.name:<16} {r.status:<9} {when}  {mets}")
    print(f"{len(runs)} run(s)")
    return 0


def _lineage(args: argparse.Namespace) -> int:
    with _store(args) as store:
        g = store.lineage(args.node, args.direction, args.depth)
    if args.json:
        print(
            json.dumps(
                {"root": g.root, "nodes": g.nodes, "edges": g.edges, "deleted": g.deleted}, indent=2
            )
        )
        return 0
    for src, dst, rel in g.edges:
        print(f"{src} ({g.nodes[src]}) --{rel}--> {dst} ({g.nodes[dst]})")
    print(f"{len(g.nodes)} node(s), {len(g.edges)} edge(s) {args.direction} of {g.root}")
    return 0


def _retention(args: argparse.Namespace) -> int:
    policy = _policy(args)
    with _store(args) as store:
        plan = store.apply_retention(policy, dry_run=args.action == "plan")
    if args.json:
        print(
            json.dumps(
                {"summary": plan.summary(), "actions": [a.__dict__ for a in plan.actions]}, indent=2
            )
        )
        return 0
    for a in plan.actions:
        print(
            f"{a.action:<9} artifact {a.artifact_id:>6} ({a.project}, run {a.run_id}, {a.size} B): {a.reason}"
        )
    print(
        ("applied: " if plan.applied else "plan (dry run, nothing changed): ")
        + json.dumps(plan.summary())
    )
    return 0


def _gc(args: argparse.Namespace) -> int:
    with _store(args) as store:
        report = store.gc(
            grace_seconds=args.grace, dry_run=args.dry_run, stale_upload_seconds=args.stale_uploads
        )
    verb = "would delete" if report.dry_run else "deleted"
    print(
        f"{verb} {len(report.deleted)} unreferenced blob(s), {report.bytes_freed} bytes; "
        f"{report.referenced} referenced blob(s) kept"
    )
    return 0


def _grant(args: argparse.Namespace) -> int:
    with _store(args) as store:
        store.grant(args.project, args.principal, args.level, kind=args.kind)
    print(f"{args.principal} now holds {args.level.upper()} on {args.project}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from mlinfra_lab.progress import progress_bar
    from mlinfra_lab.tracking.bench import BenchConfig, mlflow_available, run_benchmark, save

    scales = (args.mlflow_scale, args.mlflow_async_scale, args.server_scale)
    if args.scale <= 0 or any(s is not None and s <= 0 for s in scales):
        raise CommandError(
            "--scale, --mlflow-scale, --mlflow-async-scale and --server-scale must be positive"
        )
    if not args.no_mlflow and not mlflow_available():
        print(
            "MLflow is not importable here: its in-process store is not measured"
            + (
                " (its server is, with --mlflow-bin)"
                if args.mlflow_bin
                else ". For the side-by-side run: pip install 'mlinfra-lab[bench]'"
            )
        )
    cfg = BenchConfig(
        scale=args.scale,
        mlflow_scale=args.mlflow_scale,
        mlflow_async_scale=args.mlflow_async_scale,
        search_repeats=args.repeats,
        with_mlflow=not args.no_mlflow,
        with_server=not args.no_server,
        server_scale=args.server_scale,
        mlflow_bin=args.mlflow_bin,
    )
    result = run_benchmark(
        cfg, args.workdir, progress=lambda it, desc="": progress_bar(it, desc=desc, leave=False)
    )
    ours = result["systems"]["mlinfra"]
    print(
        f"mlinfra: {ours['log']['points_per_s']:,.0f} points/s, {ours['create']['runs_per_s']:,.0f} runs/s, "
        f"search p50 {ours['search']['p50_ms']:.2f} ms p99 {ours['search']['p99_ms']:.2f} ms "
        f"over {ours['search']['db_runs']:,} runs"
    )
    if "mlflow" in result["systems"]:
        m = result["systems"]["mlflow"]
        print(
            f"mlflow:  {m['log']['points_per_s']:,.0f} points/s (batched 1000: "
            f"{m['log_batched_1000']['points_per_s']:,.0f}), {m['create']['runs_per_s']:,.1f} runs/s, "
            f"search p50 {m['search']['p50_ms']:.2f} ms p99 {m['search']['p99_ms']:.2f} ms"
        )
        a = m["log_async"]
        print(
            f"mlflow async (log_batch synchronous=False, scale {a['scale']}): "
            f"{a['points_per_s']:,.0f} points/s until stored, {a['call_seconds']:.2f} s "
            f"inside the calls of {a['seconds']:.2f} s"
        )
        print(
            "ratios: "
            + json.dumps(
                {k: round(v, 2) for k, v in result["ratios"].items() if isinstance(v, float)}
            )
        )
    for name, label in (("served", "served: "), ("mlflow_server", "mlflow server: ")):
        if name in result["systems"]:
            m = result["systems"][name]
            print(
                f"{label}{m['log']['points_per_s']:,.0f} points/s, {m['create']['runs_per_s']:,.1f} runs/s, "
                f"search p50 {m['search']['p50_ms']:.2f} ms p99 {m['search']['p99_ms']:.2f} ms"
            )
    for note in result["notes"]:
        print(note)
    if "ratios_served" in result:
        print(
            "served vs mlflow server: "
            + json.dumps({k: round(v, 2) for k, v in result["ratios_served"].items()})
        )
    if args.out:
        print(f"wrote {save(result, args.out)}")
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``track`` and ``bench tracking``."""
    location = argparse.ArgumentParser(add_help=False)  # where the store is: --db, --artifacts
    location.add_argument(
        "--db",
        default=os.environ.get("MLINFRA_TRACKING_DB", "sqlite:///mlinfra-tracking.db"),
        help="database URL: sqlite:///file.db or postgresql+psycopg://... "
        "(default: $MLINFRA_TRACKING_DB or sqlite:///mlinfra-tracking.db)",
    )
    location.add_argument(
        "--artifacts",
        default=os.environ.get("MLINFRA_TRACKING_ARTIFACTS", "mlinfra-artifacts"),
        help="artifact root: a directory or an fsspec URL such as s3://bucket/prefix",
    )
    common = argparse.ArgumentParser(add_help=False, parents=[location])
    common.add_argument(
        "--user",
        default=None,
        help="act as this principal (default: $MLINFRA_USER or the OS user); "
        "direct database access trusts it: for admins and notebooks",
    )
    db_args = argparse.ArgumentParser(add_help=False, parents=[common])
    server_args(common)
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")

    track = commands.add_parser(
        "track",
        help="query and maintain the experiment-tracking store",
        description="Search runs, walk lineage, apply retention, collect "
        "garbage and grant access in a tracking store.",
    )
    sub = track.add_subparsers(dest="track_command", metavar="ACTION", required=True)

    runs = sub.add_parser("runs", help="runs: search")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    search = runs_sub.add_parser(
        "search",
        parents=[common],
        help="search runs with the filter language",
        description="Example: mlinfra-lab track runs search mnist "
        '"metrics.val_acc > 0.9 and params.lr <= 1e-3 and created > -30d"',
    )
    search.add_argument("project", help="project name ('*' for every project you can view)")
    search.add_argument(
        "filter",
        nargs="?",
        default=None,
        help="filter, e.g. \"metrics.acc > 0.9 and tags.team = 'nlp'\"",
    )
    search.add_argument("--order-by", default=None, help="e.g. 'metrics.val_acc desc'")
    search.add_argument("--limit", type=int, default=20, help="maximum runs to print (default 20)")
    search.set_defaults(func=_runs_search)

    lin = sub.add_parser(
        "lineage", parents=[common], help="walk lineage forward or backward from a node"
    )
    lin.add_argument("node", help="dataset:ID, run:ID, artifact:ID or code:COMMIT")
    lin.add_argument(
        "--direction",
        choices=["forward", "backward"],
        default="forward",
        help="forward: what was made from it; backward: what it was made from",
    )
    lin.add_argument("--depth", type=int, default=None, help="maximum hops (default: no limit)")
    lin.set_defaults(func=_lineage)

    ret = sub.add_parser("retention", help="plan or apply a retention policy")
    ret_sub = ret.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (
        ("plan", "show what a policy would delete or move (changes nothing)"),
        ("apply", "carry out the plan (then run 'gc' to free the bytes)"),
    ):
        p = ret_sub.add_parser(action, parents=[common], help=text, description=text)
        p.add_argument(
            "--policy", help='JSON file {"rules": [{...RetentionRule fields}], "cold_root": ...}'
        )
        p.add_argument(
            "--kind",
            default="checkpoint",
            help="artifact kind of the single rule (default checkpoint)",
        )
        p.add_argument(
            "--keep-days", type=float, default=30, help="keep everything of runs younger than this"
        )
        p.add_argument(
            "--keep-runs", type=int, default=10, help="keep everything of the N newest runs"
        )
        p.add_argument(
            "--cold-after",
            type=float,
            default=None,
            help="move final artifacts older than this (days)",
        )
        p.add_argument(
            "--delete-after",
            type=float,
            default=None,
            help="delete final artifacts older than this (days)",
        )
        p.add_argument("--cold-root", default=None, help="fsspec URL of the cold tier")
        p.set_defaults(func=_retention)

    gc = sub.add_parser("gc", parents=[common], help="delete blobs that no artifact row references")
    gc.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="keep unreferenced blobs younger than this many seconds",
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    gc.add_argument(
        "--stale-uploads",
        type=float,
        default=3600.0,
        help="remove partial uploads (tmp/) and pending-upload records older than this many seconds",
    )
    gc.set_defaults(func=_gc)

    grant = sub.add_parser(
        "grant", parents=[common], help="grant a user or team a level on a project (needs ADMIN)"
    )
    grant.add_argument("project")
    grant.add_argument("principal", help="user or team name")
    grant.add_argument(
        "level",
        choices=["NONE", "VIEW", "READ_ARTIFACTS", "WRITE", "ADMIN"],
        type=str.upper,
        help="NONE revokes; VIEW < READ_ARTIFACTS < WRITE < ADMIN",
    )
    grant.add_argument(
        "--kind",
        choices=["user", "team"],
        default=None,
        help="refuse the grant unless the principal is of this kind (--kind team: an existing team)",
    )
    grant.set_defaults(func=_grant)

    register_server(sub, db_args, location)

    b = bench.add_parser(
        "tracking",
        help="this tracking store against MLflow, side by side (SQLite)",
        description="Logs 1M metric points, creates 100k runs and times five searches "
        "over 100k runs, for this store and MLflow (if installed).",
    )
    b.add_argument(
        "--scale", type=float, default=1.0, help="multiply every run count (0.01 for a quick run)"
    )
    b.add_argument(
        "--mlflow-scale",
        type=float,
        default=None,
        help="MLflow's own scale for logging and creating runs (it is ~100x slower); default --scale",
    )
    b.add_argument(
        "--mlflow-async-scale",
        type=float,
        default=None,
        help="scale of MLflow's asynchronous logging (log_batch synchronous=False, one call "
        "per step, timed until every point is stored); default --mlflow-scale",
    )
    b.add_argument("--repeats", type=int, default=30, help="timed calls per search query")
    b.add_argument(
        "--no-mlflow", action="store_true", help="measure this store only (in process and served)"
    )
    b.add_argument(
        "--no-server",
        action="store_true",
        help="skip both servers (ours through TrackingClient, MLflow's)",
    )
    b.add_argument(
        "--server-scale",
        type=float,
        default=None,
        help="scale of both servers' logging and run creation (a request per call); default --mlflow-scale",
    )
    b.add_argument(
        "--mlflow-bin",
        default=None,
        metavar="PATH",
        help="the `mlflow` command for MLflow's server (default: on PATH, or python -m mlflow)",
    )
    b.add_argument(
        "--workdir",
        default=None,
        help="directory for the temporary databases (default: system temp)",
    )
    b.add_argument(
        "--out",
        metavar="FILE",
        default="benchmarks/results",
        help="the JSON result: a file name (e.g. benchmarks/results/cpu-tracking-"
        "YYYY-MM-DD.json), or a folder to write cpu-tracking-DATE.json into "
        "(default: benchmarks/results; '' to skip)",
    )
    b.set_defaults(func=_bench)
