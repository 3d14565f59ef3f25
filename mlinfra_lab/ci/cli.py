"""Command-line entry points of `mlinfra_lab.ci` (registered by `mlinfra_lab.cli`).

Contract: ``register(commands, bench)`` adds ``mlinfra-lab train`` (the tiny seeded run) and
``mlinfra-lab ci ...`` (``check-lock``, ``lock``, ``validate``, ``flaky``, ``bisect``,
``update-references``); handlers return an exit code, 1 when a check finds a problem, and
let the chapter's errors (`LockfileError`, `ArtifactError`, ...) reach `mlinfra_lab.cli.main`,
which prints them on one line; `CommandError` is for a flag the user must fix.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlinfra_lab.errors import CommandError

DEFAULT_REFERENCE = Path("tests/references/train_tiny.json")
DEFAULT_LOCK = Path("requirements.lock")


def _augment_seed(text: str) -> str | int | None:
    if text == "derived":
        return "derived"
    if text == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("use 'derived', 'none' or an integer") from None


def _train(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from mlinfra_lab.ci.train import TrainConfig, train_tiny
    from mlinfra_lab.progress import progress_bar

    config = TrainConfig(
        steps=args.steps, examples=args.examples, seed=args.seed, augment_seed=args.augment_seed
    )
    with progress_bar(total=config.steps, desc="train_tiny", unit="step") as bar:

        def on_step(step: int, loss: float) -> None:
            bar.set_postfix(loss=f"{loss:.4f}")
            bar.update()
            if args.verbose:
                tqdm.write(f"step {step:3d}  loss {loss:.6f}")

        result = train_tiny(config=config, out_dir=args.out, on_step=on_step)
    print(f"final loss (step {config.steps}): {result.final_loss!r}")
    print(f"seeds: {result.seeds}")
    if args.out:
        print(f"artifacts: {args.out}/checkpoint.pt, metrics.json, manifest.json")
    return 0


def _check_lock(args: argparse.Namespace) -> int:
    from mlinfra_lab.ci.lockfile import check_lockfile

    report = check_lockfile(args.lock)
    print(report)
    if args.show_extra:
        for extra in report.extra:
            print(f"  {extra}")
    return 0 if report.ok else 1


def _lock(args: argparse.Namespace) -> int:
    if args.freeze:
        from mlinfra_lab.ci.lockfile import write_lockfile

        count = write_lockfile(args.lock)
        print(f"{args.lock}: {count} installed packages pinned (a freeze, no hashes)")
        return 0
    from mlinfra_lab.ci.lock_compile import compile_lockfile

    count = compile_lockfile(
        args.lock,
        python_version=args.python_version,
        uv_args=["--upgrade"] if args.upgrade else [],
    )
    print(f"{args.lock}: {count} packages resolved, with hashes (Python {args.python_version}+)")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from mlinfra_lab.ci.artifacts import validate_artifacts

    report = validate_artifacts(args.run_dir)
    print(
        f"{report.run_dir}: {', '.join(report.files)} valid; "
        f"{report.manifest_entries} manifest entries match"
    )
    return 0


def _flaky(args: argparse.Namespace) -> int:
    import functools

    from mlinfra_lab.ci.flaky import detect_flaky
    from mlinfra_lab.ci.train import TrainConfig, train_tiny_final_loss

    if args.target == "train":
        target = functools.partial(
            train_tiny_final_loss, TrainConfig(seed=args.seed, augment_seed=args.augment_seed)
        )
    else:
        target = args.target
    report = detect_flaky(target, runs=args.runs, atol=args.atol, progress=True)
    print(report)
    return 1 if report.flaky else 0


def _bisect(args: argparse.Namespace) -> int:
    from mlinfra_lab.ci.flaky import find_unseeded_source
    from mlinfra_lab.ci.train import TrainConfig

    config = TrainConfig(seed=args.seed, augment_seed=args.augment_seed)
    report = find_unseeded_source(config, runs=args.runs, progress=True)
    print(report)
    return 0 if report.culprit is None else 1


def _update_references(args: argparse.Namespace) -> int:
    from mlinfra_lab.ci.references import assert_close_to_reference
    from mlinfra_lab.ci.train import train_tiny

    if not args.reason.strip():
        raise CommandError("--reason must say why the references change")
    result = train_tiny()
    assert_close_to_reference(
        "train_tiny.losses",
        result.losses,
        args.file,
        atol=args.atol,
        rtol=args.rtol,
        update=args.reason,
    )
    print(
        f"{args.file}: 'train_tiny.losses' rewritten ({len(result.losses)} steps, "
        f"final {result.final_loss:.6f}) because: {args.reason}"
    )
    return 0


def _bench(args: argparse.Namespace) -> int:
    import json

    from mlinfra_lab.ci.bench import BenchConfig, run_bench
    from mlinfra_lab.progress import progress_bar
    from mlinfra_lab.results import default_out, device_label

    config = BenchConfig(
        repeats=args.repeats,
        fresh_runs=args.fresh_runs,
        lock=str(args.lock),
        determinism_rounds=args.rounds,
    )
    seen: list[str] = []
    import torch

    tiers = 4 if torch.cuda.is_available() else 3  # the fourth: deterministic() on the GPU
    with progress_bar(total=tiers, desc="bench ci", unit="tier") as bar:

        def progress(stage: str) -> None:  # called as each tier starts
            if seen:
                bar.update()
            seen.append(stage)
            bar.set_postfix_str(stage)

        result = run_bench(config, progress)
        bar.update()
    info = result["device"]
    device = device_label(info["device_name"] if info["device"] == "cuda" else None)
    out = args.out or default_out(device, "ci", result["date"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for key, value in result["results"].items():
        if isinstance(value, int | float):
            print(f"{key:32s} {value:10.2f}")
    gpu = result["results"].get("gpu_determinism")
    if gpu is not None:
        print(
            f"deterministic/default on {gpu['device']}: {gpu['ratio_deterministic']:.2f} per step; "
            f"bit-identical reruns: default {gpu['default']['repeatable']}, "
            f"deterministic {gpu['deterministic']['repeatable']}"
        )
    det = result["results"]["determinism"]
    for threads, row in det["interleaved"].items():
        print(
            f"deterministic/default, interleaved, {threads}: {row['ratio_deterministic']:.2f} "
            f"(default median {row['default']['median_ms']:.1f} ms)"
        )
    for threads, row in det["sequential"].items():
        ratios = ", ".join(f"{r:.2f}" for r in row["ratios"])
        print(f"deterministic/default, sequential blocks, {threads}: {ratios}")
    print(f"written to {out}")
    return 0


def _add_lock_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "lock",
        nargs="?",
        type=Path,
        default=DEFAULT_LOCK,
        help=f"lock file (default {DEFAULT_LOCK})",
    )


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``train`` and ``ci`` to the ``mlinfra-lab`` command."""
    b = bench.add_parser(
        "ci",
        help="time the CI tiers: tiny run in-process and in a fresh process, lock, artifacts",
        description="Time what each CI tier of chapter 3 costs on this machine and write the "
        "results (with device, versions and date) as JSON.",
    )
    b.add_argument("--repeats", type=int, default=5, help="timed repeats, median (default 5)")
    b.add_argument("--fresh-runs", type=int, default=2, help="fresh processes timed (default 2)")
    b.add_argument("--lock", type=Path, default=DEFAULT_LOCK, help="lock file")
    b.add_argument(
        "--rounds",
        type=int,
        default=15,
        help="interleaved rounds of the determinism measurement (default 15)",
    )
    b.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        default=None,
        help="result JSON file (default: benchmarks/results/DEVICE-ci-YYYY-MM-DD.json)",
    )
    b.set_defaults(func=_bench)

    train = commands.add_parser(
        "train",
        help="run the tiny seeded training run CI uses (chapter 3)",
        description="Train a small MLP on a 100-example synthetic set for a few steps, with "
        "a seeded data augmentation; print the per-step loss and write checkpoint.pt, "
        "metrics.json and manifest.json to --out.",
    )
    train.add_argument("--steps", type=int, default=20, help="SGD steps (default 20)")
    train.add_argument("--examples", type=int, default=100, help="data set size (default 100)")
    train.add_argument("--seed", type=int, default=0, help="the base seed (default 0)")
    train.add_argument(
        "--augment-seed",
        type=_augment_seed,
        default="derived",
        help="'derived' (the fix, default), 'none' (the bug: augmentation seeded from OS "
        "entropy) or an integer",
    )
    train.add_argument("--out", type=Path, default=None, help="directory for the artifacts")
    train.add_argument("-v", "--verbose", action="store_true", help="print every step's loss")
    train.set_defaults(func=_train)

    ci = commands.add_parser(
        "ci", help="CI checks: lock file, artifacts, flaky runs, references (chapter 3)"
    )
    sub = ci.add_subparsers(dest="ci_command", metavar="CHECK", required=True)

    p = sub.add_parser(
        "check-lock", help="compare requirements.lock with the installed packages; exit 1 on drift"
    )
    _add_lock_argument(p)
    p.add_argument(
        "--show-extra",
        action="store_true",
        help="also list installed packages missing from the lock",
    )
    p.set_defaults(func=_check_lock)

    p = sub.add_parser(
        "lock",
        help="resolve requirements.txt into the hashed lock of the CPU environment (make lock)",
        description="Resolve requirements.txt for every platform with uv (uv pip compile "
        "--universal --generate-hashes), torch's installed CPU build standing in for torch; "
        "the previous lock's versions are kept where the requirements allow.",
    )
    _add_lock_argument(p)
    p.add_argument(
        "--python-version",
        default="3.11",
        help="the oldest Python the lock serves (default 3.11)",
    )
    p.add_argument("--upgrade", action="store_true", help="let every version move (uv --upgrade)")
    p.add_argument(
        "--freeze",
        action="store_true",
        help="write the installed packages as name==version lines instead (no resolver, no "
        "hashes: for a machine the lock does not cover, such as a GPU one)",
    )
    p.set_defaults(func=_lock)

    p = sub.add_parser("validate", help="check a train run's artifacts against their JSON schemas")
    p.add_argument("run_dir", type=Path, help="the --out directory of `mlinfra-lab train`")
    p.set_defaults(func=_validate)

    p = sub.add_parser(
        "flaky",
        help="run a pytest node id (or 'train') several times in fresh processes; exit 1 if they disagree",
    )
    p.add_argument("target", help="pytest node id, e.g. tests/test_x.py::test_y, or 'train'")
    p.add_argument("--runs", type=int, default=5, help="fresh processes (default 5)")
    p.add_argument(
        "--atol", type=float, default=0.0, help="values within atol agree (default exact)"
    )
    p.add_argument("--seed", type=int, default=0, help="base seed for 'train'")
    p.add_argument(
        "--augment-seed",
        type=_augment_seed,
        default="derived",
        help="for 'train': derived, none or an int",
    )
    p.set_defaults(func=_flaky)

    p = sub.add_parser(
        "bisect", help="name the random source of train_tiny that is not derived from the seed"
    )
    p.add_argument("--runs", type=int, default=2, help="fresh processes per trial (default 2)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument(
        "--augment-seed", type=_augment_seed, default=None, help="default 'none': the bug"
    )
    p.set_defaults(func=_bisect)

    p = sub.add_parser(
        "update-references",
        help="rerun train_tiny and rewrite its stored loss reference, recording why",
    )
    p.add_argument("--reason", required=True, help="why the reference changes (stored with it)")
    p.add_argument(
        "--file",
        type=Path,
        default=DEFAULT_REFERENCE,
        help=f"reference file (default {DEFAULT_REFERENCE})",
    )
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance to store")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance to store")
    p.set_defaults(func=_update_references)
