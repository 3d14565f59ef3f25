"""Write the tile table: time every candidate tile of each kernel on each shape, repeatedly.

Contract: ``python -m mlinfra_lab.attention.studies.tile_sweep --out FILE [--repeats 3]`` times, on
the GPU found, every tile of `configs()` for the forward, dK/dV and dQ kernels on every shape
of the benchmark's sweep (head dims 64/128, causal and not, 1k-16k tokens, bf16), ``repeats``
times each, and writes the table that `tile_table.lookup` reads: per shape and kernel the
tile with the lowest median, with every candidate's timings beside it.

Design decisions:
- Each tile is pinned with `pinning.force` and timed through the public launchers
  (`flash_attention` forward; the whole backward for dK/dV and dQ, the other kernel pinned
  to its list's first tile), so what is timed is what a user runs.
- Candidates are timed round-robin within each repeat (tile A, B, C, then A, B, C again):
  a drift of the GPU's clock over the sweep spreads over all of them instead of
  favouring the first.
- The winner is the lowest median over the repeats; ``margin`` records how much slower the
  runner-up was, so a reader can tell a clear choice from a coin toss.
- On a CPU it runs under the interpreter with tiny shapes (for its test, not for a table).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import statistics
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from mlinfra_lab import runtime

__all__ = ["main", "sweep"]


def _tile(config: Any) -> dict[str, int]:
    return {
        "BLOCK_M": config.kwargs["BLOCK_M"],
        "BLOCK_N": config.kwargs["BLOCK_N"],
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
    }


def _shape_entries(
    gpu: str,
    dtype: torch.dtype,
    b: int,
    h: int,
    n: int,
    d: int,
    causal: bool,
    repeats: int,
    rep_ms: int,
) -> list[dict[str, Any]]:
    from mlinfra_lab.attention._flash_kernels import configs
    from mlinfra_lab.attention.bench import BenchConfig
    from mlinfra_lab.attention.flash import flash_attention
    from mlinfra_lab.attention.pinning import force
    from mlinfra_lab.attention.providers import time_ms

    device = runtime.device()
    g = torch.Generator(device=device).manual_seed(n + d)
    q, k, v = (
        torch.randn(b, h, n, d, device=device, dtype=dtype, generator=g).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn(b, h, n, d, device=device, dtype=dtype, generator=g)
    cfg = BenchConfig(warmup_ms=rep_ms // 4, rep_ms=rep_ms)
    # The table tiles the Triton kernels: v1's forward and the "split" backward. The Gluon
    # defaults (v5, "gluon") take no pinned Triton tile, so they are named away here.
    triton = functools.partial(flash_attention, causal=causal, version=1, backward="split")
    out = triton(q, k, v)  # one graph: every backward candidate replays it
    timed = {
        "fwd": lambda: time_ms(lambda: triton(q, k, v), cfg),
        "bwd": lambda: time_ms(lambda: out.backward(do, retain_graph=True), cfg, [q, k, v]),
    }
    fwd, dkdv, dq = configs()
    entries = []
    for kernel, candidates, other in (
        ("fwd", fwd, None),
        ("dkdv", dkdv, ("dq", dq[0])),
        ("dq", dq, ("dkdv", dkdv[0])),
    ):
        times: dict[str, list[float]] = {str(_tile(c)): [] for c in candidates}
        for _ in range(repeats):
            for c in candidates:  # the other backward kernel pinned to its list's first tile
                pin_other = force(other[0], _tile(other[1])) if other else nullcontext()
                with force(kernel, _tile(c)), pin_other:
                    times[str(_tile(c))].append(timed["fwd" if other is None else "bwd"]())
        medians = sorted((statistics.median(t), key) for key, t in times.items())
        best = next(_tile(c) for c in candidates if str(_tile(c)) == medians[0][1])
        entries.append(
            {
                "kernel": kernel,
                "gpu": gpu,
                "dtype": str(dtype).removeprefix("torch."),
                "head_dim": d,
                "causal": causal,
                "seq": n,
                "tile": best,
                "median_ms": medians[0][0],
                "margin": medians[1][0] / medians[0][0] - 1 if len(medians) > 1 else None,
                "candidates": {key: t for key, t in times.items()},
            }
        )
    return entries


def sweep(
    seqs: tuple[int, ...],
    head_dims: tuple[int, ...],
    tokens: int,
    model_dim: int,
    dtype: str = "bfloat16",
    repeats: int = 3,
    rep_ms: int = 100,
    progress: bool = True,
    out: Path | None = None,
) -> dict[str, Any]:
    """Time every candidate tile on every shape; returns the table (see the module doc).
    With `out`, the table so far is written after each shape (a cut-short sweep keeps them)."""
    runtime.ensure_triton_mode()  # before triton's first import: the interpreter on a CPU
    import triton

    from mlinfra_lab.progress import progress_bar

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    info = runtime.describe().as_dict()
    info["triton"] = triton.__version__
    table: dict[str, Any] = {
        "benchmark": "attention-tile-sweep",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": info,
        "repeats": repeats,
        "rep_ms": rep_ms,
        "entries": [],
    }
    shapes = [(n, d, c) for d in head_dims for c in (False, True) for n in seqs]
    for n, d, causal in progress_bar(shapes, desc="tile sweep", unit="shape", enabled=progress):
        table["entries"] += _shape_entries(
            gpu, getattr(torch, dtype), tokens // n, model_dim // d, n, d, causal, repeats, rep_ms
        )
        if out is not None:
            out.write_text(json.dumps(table, indent=1) + "\n")
    return table


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module doc (``--help``)."""
    p = argparse.ArgumentParser(
        prog="python -m mlinfra_lab.attention.studies.tile_sweep",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument(
        "--out",
        required=True,
        help="table JSON to write, e.g. mlinfra_lab/attention/tile_table.json",
    )
    p.add_argument("--repeats", type=int, default=3, help="timings per tile (default: 3)")
    p.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    p.add_argument("--head-dims", default="64,128")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    on_gpu = torch.cuda.is_available()
    table = sweep(
        tuple(int(x) for x in args.seqs.split(",")),
        tuple(int(x) for x in args.head_dims.split(",")),
        tokens=16384 if on_gpu else 64,
        model_dim=2048 if on_gpu else 32,
        dtype="bfloat16" if on_gpu else "float32",
        repeats=args.repeats,
        rep_ms=50 if on_gpu else 0,
        out=Path(args.out),
    )
    print(f"wrote {args.out}: {len(table['entries'])} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
