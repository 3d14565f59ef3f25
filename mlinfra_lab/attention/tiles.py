"""Time the forward kernel at one tile config you choose, bypassing the autotuner.

Contract: ``time_forward_tile(block_m, block_n, num_warps, num_stages, ...)`` compiles and
runs the Triton forward kernel (version 1) with exactly that ``(BLOCK_M, BLOCK_N)`` tile,
warp count and pipeline depth on random bf16 inputs (fp16 on GPUs without bf16, such as
Colab's T4), times it with
`triton.testing.do_bench` (median) and returns a `TileTiming`: milliseconds, TFLOP/s and
the largest difference from the autotuned kernel's output. A config that the GPU cannot
run (too much shared memory, too many registers, a compile error) comes back as a
`TileTiming` with ``error`` set, not as an exception, so a sweep or a widget keeps going.

Design decisions:
- One launch path: the tile is pinned with `pinning.force` and the kernel launched by
  `flash_attention` itself, the launcher every user calls (grid, batch chunks, strides);
  `gpu_study`'s tile sweep, the chapter's live widget and `tile_sweep` all time it that way,
  so the committed sweeps and what a reader measures run the same code.
- Inputs are validated before anything touches the GPU (`TileConfigError`, a
  `ValueError`): tiles are powers of two from 16 (the Tensor Core K dimension) to 256;
  causal tiles need ``block_m % block_n == 0`` (the diagonal loop steps by ``BLOCK_N`` from
  a multiple of ``BLOCK_M``); warps 1-16 and powers of two; stages 1-6. A removed kernel
  version (2-4) raises `flash.RemovedKernelError`, which says where its code is.
- On a CPU it raises `TileTimingNeedsGPUError`: the Triton interpreter runs the kernel in
  numpy, so its time says nothing about tiles on Tensor Cores.
- Inputs are made once per shape and kept (`_inputs`), so timing many configs at one
  shape (a widget moving a slider) pays only for each config's compile.

Caveats: each new config compiles a kernel (about a second); the numbers are for the GPU
it ran on and vary a few percent from run to run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any

import torch

from mlinfra_lab import runtime
from mlinfra_lab.attention._checks import KERNEL_HEAD_DIM_RANGE
from mlinfra_lab.attention.flash import KERNEL_VERSIONS, REMOVED_VERSIONS, resolve_version
from mlinfra_lab.errors import MlinfraError

# the Triton kernels, whose tiles this module times; version 5 (Gluon) has its own
# configurations (`_gluon_fwd.GluonConfig`, timed by benchmarks/experiments/gluon_fwd_experiment.py)
TILED_VERSIONS = tuple(v for v in KERNEL_VERSIONS if v != 5)

__all__ = [
    "TileConfigError",
    "TileTiming",
    "TileTimingNeedsGPUError",
    "check_tile_config",
    "time_forward_tile",
]


class TileConfigError(MlinfraError, ValueError):
    """A tile config or shape the forward kernel cannot be launched with."""


class TileTimingNeedsGPUError(MlinfraError, RuntimeError):
    """Timing a tile config was asked for on a machine without a CUDA GPU."""


@dataclass(frozen=True)
class TileTiming:
    """One timed forward launch: its config, shape, and either the timing or the error."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool
    version: int
    dtype: str = "bfloat16"
    ms: float | None = None
    tflops: float | None = None
    max_abs_diff: float | None = None  # vs the autotuned v1 kernel on the same inputs
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (the format of `gpu_study`'s ``tiles`` rows)."""
        return asdict(self)


def _power_of_two(x: int) -> bool:
    return isinstance(x, int) and x > 0 and x & (x - 1) == 0


def check_tile_config(
    block_m: int,
    block_n: int,
    num_warps: int = 8,
    num_stages: int = 3,
    *,
    batch: int = 2,
    heads: int = 16,
    seq: int = 8192,
    head_dim: int = 128,
    causal: bool = False,
    version: int = 1,
) -> None:
    """Raise `TileConfigError` saying what to change when the kernel cannot take this
    config or shape (`RemovedKernelError` for a removed version); return None when it can."""
    for name, val in (("block_m", block_m), ("block_n", block_n)):
        if not _power_of_two(val) or not 16 <= val <= 256:
            raise TileConfigError(
                f"{name}={val!r}: use a power of two from 16 to 256 "
                "(16 is the smallest Tensor Core tile dimension)"
            )
    if not _power_of_two(num_warps) or num_warps > 16:
        raise TileConfigError(f"num_warps={num_warps!r}: use 1, 2, 4, 8 or 16")
    if not isinstance(num_stages, int) or not 1 <= num_stages <= 6:
        raise TileConfigError(f"num_stages={num_stages!r}: use an integer from 1 to 6")
    if causal and block_m % block_n:
        raise TileConfigError(
            f"causal tiles need block_m to be a multiple of block_n, got "
            f"{block_m} x {block_n}: use block_n <= block_m"
        )
    for name, val in (("batch", batch), ("heads", heads), ("seq", seq)):
        if not isinstance(val, int) or val < 1:
            raise TileConfigError(f"{name}={val!r}: use a positive integer")
    lo, hi = KERNEL_HEAD_DIM_RANGE
    if not isinstance(head_dim, int) or not lo <= head_dim <= hi:
        raise TileConfigError(f"head_dim={head_dim!r}: the kernel takes {lo} to {hi}")
    if version in REMOVED_VERSIONS:
        resolve_version(version)  # raises RemovedKernelError: what it measured, where its code is
    if version not in TILED_VERSIONS:
        raise TileConfigError(
            f"version={version!r}: use one of {TILED_VERSIONS} (version 5, the Gluon kernel, "
            "has its own configurations: mlinfra_lab.attention._gluon_fwd.GluonConfig)"
        )


@lru_cache(maxsize=2)
def _inputs(
    batch: int, heads: int, seq: int, head_dim: int, causal: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded q, k, v on the GPU and the autotuned v1 output on them (kept per shape)."""
    from mlinfra_lab.attention.flash import flash_attention

    dtype = runtime.half_dtype()  # bfloat16 from Ampere on, float16 on a T4
    g = torch.Generator(device="cuda").manual_seed(8)
    q, k, v = (
        torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=dtype, generator=g)
        for _ in range(3)
    )
    return q, k, v, flash_attention(q, k, v, causal=causal, version=1)


def time_forward_tile(
    block_m: int,
    block_n: int,
    num_warps: int = 8,
    num_stages: int = 3,
    *,
    batch: int = 2,
    heads: int = 16,
    seq: int = 8192,
    head_dim: int = 128,
    causal: bool = False,
    version: int = 1,
    warmup_ms: int = 25,
    rep_ms: int = 100,
) -> TileTiming:
    """Compile, check and time the forward kernel at exactly this tile config (GPU only).

    Returns a `TileTiming`; ``error`` is set (and the timing None) when the config does
    not compile or launch on this GPU. Raises `TileConfigError` for an invalid config and
    `TileTimingNeedsGPUError` without a CUDA GPU."""
    check_tile_config(
        block_m,
        block_n,
        num_warps,
        num_stages,
        batch=batch,
        heads=heads,
        seq=seq,
        head_dim=head_dim,
        causal=causal,
        version=version,
    )
    if not torch.cuda.is_available():
        raise TileTimingNeedsGPUError(
            "time_forward_tile needs a CUDA GPU: under the CPU interpreter a kernel's time "
            "says nothing about its tiles. Run on a GPU (Colab: Runtime > Change runtime type)"
            ", or read the committed H200 sweep with gpu_study.committed_study()"
        )
    from triton.testing import do_bench

    from mlinfra_lab.attention.flash import flash_attention
    from mlinfra_lab.attention.pinning import force
    from mlinfra_lab.attention.traffic import attention_flops

    b, h, n, d = batch, heads, seq, head_dim
    q, k, v, ref = _inputs(b, h, n, d, causal)
    tile = {
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "num_warps": num_warps,
        "num_stages": num_stages,
    }
    untimed = TileTiming(
        block_m=block_m,
        block_n=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
        batch=b,
        heads=h,
        seq=n,
        head_dim=d,
        causal=causal,
        version=version,
        dtype=str(q.dtype).removeprefix("torch."),
    )

    def call() -> torch.Tensor:
        return flash_attention(q, k, v, causal=causal, version=version)

    try:
        with force("fwd", tile):
            diff = (call().float() - ref.float()).abs().max().item()
            ms = float(do_bench(call, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    except Exception as err:  # noqa: BLE001 (out of resources, compile errors: report them)
        return replace(
            untimed, error=f"{type(err).__name__}: " + (str(err).splitlines() or [""])[0][:200]
        )
    flops = attention_flops(b, h, n, n, d, causal, "fwd")
    return replace(untimed, ms=ms, tflops=flops / ms * 1e-9, max_abs_diff=diff)
