"""Alignment on Tensor Cores, measured: head dims that are not powers of two, and matrices
whose inner dimension or row stride is not a multiple of 16 bytes.

Contract: ``python -m mlinfra_lab.attention.studies.alignment --out FILE`` (a CUDA GPU) times
and writes as JSON, with the device, versions and date:
- ``attention``: one forward and one backward of the taught kernel (version 1, Triton) and of
  SDPA's FlashAttention-2 and cuDNN backends at head dims `HEAD_DIMS` (64, 80, 96, 128), bf16,
  with the padded head dim (``BLOCK_D``) each of our programs computes with;
- ``gemm``: a bf16 ``(M, K) @ (K, N)`` matmul (cuBLAS through ``torch.mm``) at `GEMM_CASES`:
  K a multiple of 8 elements (16 bytes) or not, and the rows of A placed with a stride (lda)
  that is or is not a multiple of 16 bytes while K stays aligned.
`committed_alignment()` reads the newest committed file, `plot_alignment(result)` draws it.

Design decisions:
- Two constraints, kept apart. (1) The Tensor Core instruction: Hopper's ``wgmma`` for bf16
  has the shape m64nNk16, so the reduction dimension comes in steps of 16 elements, and 80 is
  five of them. The vector loads and the TMA copy engine that feed it want addresses and row
  strides in multiples of 16 bytes (TMA requires it of every global stride). (2) Triton's
  ``tl.arange`` takes power-of-two lengths only, so our kernel computes a head dim of 80 as
  ``BLOCK_D`` = 128 with masked loads: three eighths of its matmul work multiplies zeros. That second
  cost is Triton's, not the hardware's: FlashAttention-2 runs D = 80 in its D = 96 kernel.
- TFLOP/s count the useful work (the true head dim, `attention_flops`), so padding shows up
  as lost throughput, never as extra speed.
- The GEMM's misaligned cases are views into a wider buffer or odd K, never copies: what is
  timed is the kernel cuBLAS picks for that layout. Times are medians of
  ``triton.testing.do_bench`` (L2 flushed between calls).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

__all__ = [
    "GEMM_CASES",
    "HEAD_DIMS",
    "PROVIDERS",
    "committed_alignment",
    "gemm_inputs",
    "plot_alignment",
    "run",
]

HEAD_DIMS = (64, 80, 96, 128)
PROVIDERS = ("ours_v1", "sdpa_flash", "sdpa_cudnn")
ATTN_SHAPE = dict(batch=4, heads=16, seq=4096)  # bf16, not causal
GEMM_MN = 8192
# name -> (K, lda): lda is the row stride of A in elements (bf16: 2 bytes each)
GEMM_CASES: dict[str, tuple[int, int]] = {
    "K=8192, lda=8192 (aligned)": (8192, 8192),
    "K=8184, lda=8184 (aligned, 16 B multiple)": (8184, 8184),
    "K=8190, lda=8190 (4 B off)": (8190, 8190),
    "K=8191, lda=8191 (odd)": (8191, 8191),
    "K=8192, lda=8200 (aligned stride)": (8192, 8200),
    "K=8192, lda=8196 (8 B off)": (8192, 8196),
    "K=8192, lda=8193 (odd stride)": (8192, 8193),
}


def gemm_inputs(k: int, lda: int, mn: int, device: str, dtype: Any) -> tuple[Any, Any]:
    """A ``(mn, k)`` view with row stride `lda` into a wider buffer, and a ``(k, mn)`` B."""
    import torch

    if lda < k:
        raise ValueError(f"lda ({lda}) must be at least K ({k})")
    g = torch.Generator(device=device).manual_seed(k * 31 + lda)
    buf = torch.randn(mn, lda, device=device, dtype=dtype, generator=g)
    a = buf[:, :k]  # stride (lda, 1): cuBLAS reads it in place
    b = torch.randn(k, mn, device=device, dtype=dtype, generator=g)
    return a, b


# do_bench's settings for every timing here (`providers.time_ms` reads these fields)
TIMING = SimpleNamespace(dtype="bfloat16", warmup_ms=25, rep_ms=100, repeats=3)


def _gemm_rows() -> list[dict[str, Any]]:
    import torch

    from mlinfra_lab.attention.providers import time_ms

    rows = []
    for name, (k, lda) in GEMM_CASES.items():
        a, b = gemm_inputs(k, lda, GEMM_MN, "cuda", torch.bfloat16)

        def matmul(a: Any = a, b: Any = b) -> Any:
            return torch.mm(a, b)

        runs = [time_ms(matmul, TIMING) for _ in range(TIMING.repeats)]
        ms = statistics.median(runs)
        rows.append(
            {
                "case": name,
                "m": GEMM_MN,
                "n": GEMM_MN,
                "k": k,
                "lda": lda,
                "lda_bytes_mod_16": (lda * 2) % 16,
                "k_bytes_mod_16": (k * 2) % 16,
                "ms": ms,
                "ms_runs": runs,
                "tflops": 2.0 * GEMM_MN * GEMM_MN * k / ms * 1e-9,
            }
        )
        print(f"gemm {name}: {rows[-1]['tflops']:.0f} TFLOP/s", flush=True)
    return rows


def _attention_rows() -> list[dict[str, Any]]:
    from mlinfra_lab.attention.flash import _block_d
    from mlinfra_lab.attention.providers import measure

    rows = []
    for d in HEAD_DIMS:
        shape = (ATTN_SHAPE["batch"], ATTN_SHAPE["heads"], ATTN_SHAPE["seq"], d, False)
        for provider in PROVIDERS:
            for row in measure(provider, shape, TIMING, "cuda"):
                row["block_d"] = _block_d(d) if provider.startswith("ours") else None
                rows.append(row)
                print(f"attention {provider} D={d} {row['mode']}: {row['tflops']}", flush=True)
    return rows


def run(out: Path | None = None) -> dict[str, Any]:
    """Both measurements (needs a CUDA GPU and Triton); with `out`, the file is rewritten
    after each part, so a run cut off keeps the GEMM rows it finished."""
    import torch

    from mlinfra_lab import runtime

    if not torch.cuda.is_available():
        raise RuntimeError("the alignment study times GPU kernels: run it on a CUDA GPU")
    os.environ["MLINFRA_ATTENTION_BACKWARD"] = "split"  # the taught backward, at every D
    result: dict[str, Any] = {
        "benchmark": "attention-alignment",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": runtime.describe().as_dict(),
        "attention_shape": dict(ATTN_SHAPE, dtype="bfloat16", causal=False),
        "ours": "forward version 1, split backward (the kernels chapter 1 teaches)",
        "gemm": _gemm_rows(),
        "attention": [],
    }
    if out is not None:
        out.write_text(json.dumps(result, indent=1) + "\n")
    result["attention"] = _attention_rows()
    if out is not None:
        out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def committed_alignment() -> dict[str, Any] | None:
    """The newest committed ``benchmarks/results/DEVICE-alignment-DATE.json``, or None."""
    from mlinfra_lab import results

    files = results.committed("*-alignment-*.json")
    if not files:
        return None
    data = json.loads(files[-1].read_text())
    data["file"] = files[-1].name
    return data


def plot_alignment(result: dict[str, Any]) -> Any:
    """Two panels: attention TFLOP/s against head dim per provider (fwd solid, bwd dashed),
    and the GEMM's TFLOP/s per case, misaligned cases in another colour."""
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [1, 1.3]})
    for provider in PROVIDERS:
        for mode, style in (("fwd", "o-"), ("bwd", "s--")):
            pts = sorted(
                (r["head_dim"], r["tflops"])
                for r in result["attention"]
                if r["provider"] == provider and r["mode"] == mode and r["tflops"]
            )
            if pts:
                a1.plot(*zip(*pts, strict=True), style, label=f"{provider} {mode}")
    a1.set_xticks(HEAD_DIMS)
    a1.set_xlabel("head dim D")
    a1.set_ylabel("TFLOP/s (useful work)")
    a1.legend(fontsize=7)
    names = [r["case"] for r in result["gemm"]]
    colours = [
        "tab:blue" if r["lda_bytes_mod_16"] == 0 and r["k_bytes_mod_16"] == 0 else "tab:red"
        for r in result["gemm"]
    ]
    a2.barh(range(len(names)), [r["tflops"] for r in result["gemm"]], color=colours)
    a2.set_yticks(range(len(names)), names, fontsize=7)
    a2.invert_yaxis()
    a2.set_xlabel("TFLOP/s (red: K or lda not a multiple of 16 bytes)")
    dev = result["device"]
    fig.suptitle(
        f"measured: {dev['device_name']}, torch {dev['torch']}, Triton {dev['triton']}, "
        f"{result['date'][:10]}",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time attention at head dims 64/80/96/128 and a bf16 GEMM with aligned "
        "and misaligned K and row strides (needs a CUDA GPU); writes JSON."
    )
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    run(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
