"""Does Triton's automatic warp specialisation compile chapter 1's forward kernel on this GPU?

Contract: ``python benchmarks/experiments/warp_specialize_probe.py [--out FILE]`` launches the
version-2 forward (`_fwd_kernel_v2`: TMA loads through in-kernel tensor descriptors) with
``WARP_SPECIALIZE=True`` (``tl.range(..., warp_specialize=True)`` on its main loop) at head
dims 64 and 128, causal and not, 4 and 8 warps, on a 128 x 64 tile with 3 stages, and
writes one JSON record per case: whether it compiled or the compiler's message, whether the
compiled TTGIR holds a ``ttg.warp_specialize`` region (the pass really split the loop into
partitions), the largest difference from version 1's output, and, where it compiled, its
time over the same launch without the flag (medians of `triton.testing.do_bench`,
alternated, 3 repeats). The file also says device, versions and date. Needs a Hopper GPU
and a checkout of git commit 687b216: version 2 was removed from the kernel after losing on
the H200 (`flash`'s docstring, "Removed variants"), and without its kernel the probe says so
and exits with status 2. Its committed record (``h200-warp-specialize-2026-12-04.json``)
is what chapter 1's appendix reads (`case_study.warp_specialize_probe`).

Design decisions:
- The kernel is launched directly, not through `flash_attention`: no autotuner, no tile
  table, exactly the tile asked for, so "compiled" and "split" belong to that launch.
- The compiler prints its failure (an MLIR dump of hundreds of lines) on the process's
  standard error from C++; the probe points file descriptor 2 at a temporary file while it
  compiles and keeps the lines that say what failed.
- Version 2 rather than 3: Triton 3.6's pass also fails on version 3, whose descriptors are
  kernel arguments (a case its data partitioning did not handle then); the probe asks the
  friendlier question.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LOG2E = 1.4426950408889634


def _launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, warps: int, ws: bool
) -> tuple[torch.Tensor, Any]:
    """One launch of the v2 forward at a 128 x 64 tile, 3 stages: (output, compiled kernel)."""
    import torch

    from mlinfra_lab.attention import _flash_kernels as fk

    fk.set_descriptor_allocator()
    b, h, n, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((b * h, n), device=q.device, dtype=torch.float32)
    compiled = fk._fwd_kernel_v2[(math.ceil(n / 128), b * h)](
        q,
        k,
        v,
        o,
        lse,
        n,
        n,
        LOG2E / math.sqrt(d),
        CAUSAL=causal,
        HEAD_DIM=d,
        BLOCK_D=d,
        BLOCK_M=128,
        BLOCK_N=64,
        PRECISION="tf32",
        WARP_SPECIALIZE=ws,
        num_warps=warps,
        num_stages=3,
    )
    return o, compiled


def _compile_quietly(fn: Callable[[], Any]) -> tuple[Any, str]:
    """Run `fn` with fd 2 sent to a temporary file; (its result or the exception, the lines of
    that output that name the failure)."""
    with tempfile.TemporaryFile(mode="w+") as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            result: Any = fn()
        except Exception as exc:  # noqa: BLE001 (any compiler failure is what is recorded)
            result = exc
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        keep = [
            line.strip()
            for line in err.read().splitlines()
            if any(w in line for w in ("UNREACHABLE", "unsupported", "error:", "Pipeline failed"))
        ]
    return result, "\n".join(keep[:6])


def probe_case(d: int, causal: bool, warps: int, repeats: int) -> dict[str, Any]:
    import torch
    from triton.testing import do_bench

    from mlinfra_lab.attention.flash import flash_attention

    g = torch.Generator(device="cuda").manual_seed(d + warps)
    q, k, v = (
        torch.randn(4, 16, 4096, d, device="cuda", dtype=torch.bfloat16, generator=g)
        for _ in range(3)
    )
    ref = flash_attention(q, k, v, causal=causal, version=1)
    case: dict[str, Any] = {"head_dim": d, "causal": causal, "num_warps": warps, "seq": 4096}
    result, messages = _compile_quietly(lambda: _launch(q, k, v, causal, warps, ws=True))
    if isinstance(result, Exception):
        case.update(compiled=False, error=f"{type(result).__name__}: {result}", compiler=messages)
        return case
    out, compiled = result
    ttgir = compiled.asm.get("ttgir", "")
    case.update(
        compiled=True,
        partitioned="ttg.warp_specialize" in ttgir,
        max_abs_diff_vs_v1=(out.float() - ref.float()).abs().max().item(),
    )
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeats):  # alternated, so drift hits both
        for ws in (False, True):
            times[ws].append(do_bench(lambda ws=ws: _launch(q, k, v, causal, warps, ws)))
    case["ms_plain"] = statistics.median(times[False])
    case["ms_ws"] = statistics.median(times[True])
    case["ws_speedup"] = case["ms_plain"] / case["ms_ws"]
    return case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    today = dt.date.today().isoformat()
    parser.add_argument(
        "--out",
        default=str(ROOT / f"benchmarks/results/h200-warp-specialize-{today}.json"),
        help="result JSON (default: benchmarks/results/h200-warp-specialize-DATE.json)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timings per variant (default 3)")
    args = parser.parse_args(argv)

    import torch
    import triton

    from mlinfra_lab.attention import _flash_kernels as fk

    if not hasattr(fk, "_fwd_kernel_v2"):
        print(
            "the probe launches the version 2 forward, removed from this checkout; run it from "
            "git commit 687b216 (git worktree add ../probe 687b216), where _fwd_kernel_v2 exists",
            file=sys.stderr,
        )
        return 2
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        print("needs a Hopper (sm_90) or newer GPU: the pass and TMA descriptors are Hopper's")
        return 2
    cases = []
    for d in (64, 128):
        for causal in (False, True):
            for warps in (4, 8):
                case = probe_case(d, causal, warps, args.repeats)
                print(json.dumps(case), flush=True)
                cases.append(case)
    record = {
        "benchmark": "warp-specialize-probe",
        "date": today,
        "device": {
            "device_name": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "cuda": torch.version.cuda,
        },
        "kernel": "mlinfra_lab.attention._flash_kernels._fwd_kernel_v2, 128 x 64 tile, 3 stages",
        "cases": cases,
    }
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
