"""Command-line entry points of `mlinfra_lab.attention` (registered by `mlinfra_lab.cli`).

``mlinfra-lab bench attention``: time our Triton kernel against SDPA's backends, eager
attention and a matmul ceiling; write JSON and a plot; optionally fail on a regression
against a committed baseline (exit status 1).
"""

from __future__ import annotations

import argparse


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from err


def _bench(args: argparse.Namespace) -> int:
    import json
    from dataclasses import replace
    from pathlib import Path

    import torch

    from mlinfra_lab import results, runtime
    from mlinfra_lab.attention import bench
    from mlinfra_lab.errors import CommandError

    on_gpu_sizes = runtime.on_gpu() and not args.cpu_sizes
    cfg = bench.BenchConfig.gpu() if on_gpu_sizes else bench.BenchConfig.cpu()
    overrides = {
        k: v
        for k, v in (
            ("seqs", args.seqs),
            ("head_dims", args.head_dims),
            ("providers", args.providers),
        )
        if v
    }
    if args.causal != "both":
        overrides["causal"] = (args.causal == "yes",)
    if args.dtype:
        overrides["dtype"] = args.dtype
    if args.repeats is not None:
        if args.repeats < 1:
            raise CommandError(f"--repeats must be at least 1, got {args.repeats}")
        overrides["repeats"] = args.repeats
    cfg = replace(cfg, **overrides)
    known = bench.PROVIDERS + bench.VERSION_PROVIDERS
    removed = sorted(set(cfg.providers) & set(bench.REMOVED_PROVIDERS))
    if removed:
        raise CommandError(
            f"provider(s) {removed} time kernels removed after losing on the H200 (their runs "
            "stay in benchmarks/results/, read by chapter 1's appendix); their code is in git "
            f"commit 687b216; choose from {known}"
        )
    unknown = set(cfg.providers) - set(known)
    if unknown:
        raise CommandError(f"unknown provider(s) {sorted(unknown)}; choose from {known}")
    baseline = None
    if args.check_baseline:
        path = Path(args.check_baseline)
        if not path.is_file():
            raise CommandError(f"baseline {path} not found; write one with --out first")
        baseline = bench.load_result(path)
    try:
        cfg.shapes()
    except ValueError as err:
        raise CommandError(str(err)) from err
    name = torch.cuda.get_device_name() if runtime.on_gpu() else None
    out = Path(args.out or results.default_out(results.device_label(name), "attention"))
    out.parent.mkdir(parents=True, exist_ok=True)
    result = bench.run_benchmark(cfg, progress=not args.quiet, partial_out=out)
    out.write_text(json.dumps(result, indent=1) + "\n")
    bench.plot_results(result, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    print(bench.format_table(result))
    status = 0
    if baseline is not None:
        failures = bench.check_baseline(result, baseline, args.tolerance)
        if failures:
            print(f"REGRESSION (> {args.tolerance:.0%} slower than {args.check_baseline}):")
            for line in failures:
                print("  " + line)
            status = 1
        else:
            print(f"no regression against {args.check_baseline}")
        anchors = (("sdpa_flash", args.min_vs_flash), ("flex", args.min_vs_flex))
        for anchor, minimum in anchors:
            if anchor in cfg.providers and runtime.on_gpu():
                below = bench.check_anchor(result, anchor, minimum)
                if below:
                    print(f"BELOW {minimum:.2f}x {anchor} (forward, worst repeat):")
                    for line in below:
                        print("  " + line)
                    status = 1
                else:
                    print(f"every forward at least {minimum:.2f}x {anchor} in every repeat")
    return status


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add `mlinfra-lab bench attention`."""
    p = bench.add_parser(
        "attention",
        help="time the Triton flash attention against SDPA backends, eager and a matmul",
        description=(
            "Sweep sequence length and head dim (batch x seq = 16k tokens, heads x head_dim "
            "= 2048), time forward and backward (median of triton.testing.do_bench) for our "
            "kernel, SDPA pinned to FLASH/CUDNN/EFFICIENT, FlexAttention, eager attention, and a "
            "bf16 matmul ceiling, each --repeats times; write JSON and a PNG plot. On a CPU a tiny float32 sweep runs under the "
            "Triton interpreter (for testing the command, not for numbers)."
        ),
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        default=None,
        help="result JSON file; the plot goes beside it as .png (default: "
        "benchmarks/results/DEVICE-attention-YYYY-MM-DD.json)",
    )
    p.add_argument("--seqs", type=_ints, help="comma-separated sequence lengths, e.g. 1024,2048")
    p.add_argument("--head-dims", type=_ints, help="comma-separated head dims, e.g. 64,128")
    p.add_argument(
        "--causal",
        choices=("yes", "no", "both"),
        default="both",
        help="causal, non-causal or both (default: both)",
    )
    p.add_argument(
        "--providers",
        type=lambda s: tuple(x for x in s.split(",") if x),
        help="comma-separated subset of ours,sdpa_flash,sdpa_cudnn,sdpa_efficient,"
        "flex,eager (flex: torch.compile(flex_attention), compiled once per shape, "
        "compile time reported apart; ours_v1, ours_v5: one forward kernel version each, "
        "with the default backward)",
    )
    p.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        help="input dtype (default: bfloat16 on a GPU that computes in it, Ampere or newer; "
        "float16 on older GPUs such as Colab's T4; float32 on the CPU)",
    )
    p.add_argument(
        "--cpu-sizes",
        action="store_true",
        help="use the tiny CPU sweep even on a GPU (a smoke test)",
    )
    p.add_argument(
        "--check-baseline",
        metavar="FILE",
        help="fail (exit 1) if any shape is more than --tolerance slower than FILE",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.10,
        help="allowed slowdown against the baseline (default: %(default)s)",
    )
    p.add_argument(
        "--min-vs-flash",
        type=float,
        default=1.25,
        metavar="X",
        help="with --check-baseline on a GPU, also fail if any forward shape ran "
        "below X times SDPA flash in any repeat (default: %(default)s)",
    )
    p.add_argument(
        "--min-vs-flex",
        type=float,
        default=1.0,
        metavar="X",
        help="with --check-baseline on a GPU and flex among the providers, also fail if any "
        "forward shape ran below X times FlexAttention in any repeat (default: %(default)s)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        metavar="K",
        help="timings per provider and shape; rows keep each and their median "
        "(default: 3 on a GPU, 1 for the CPU sweep)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_bench)
