"""FlashAttention-2 in Triton: one fused kernel forward, two fused kernels backward.

Contract: ``flash_attention(q, k, v, causal=False, sm_scale=None)`` returns
``softmax(q k^T * scale) v`` for ``[batch, heads, seq, head_dim]`` inputs and is
differentiable in q, k and v; the ``seq x seq`` matrix never exists in device memory.

Design decisions:
- Forward (`_fwd_kernel`): one program per ``BLOCK_M`` queries of one (batch, head).
  Q stays in registers; K and V stream through in ``BLOCK_N`` tiles; the two matmuls are
  ``tl.dot`` on Tensor Cores in the input dtype with float32 accumulators; the softmax
  statistics (running max ``m`` and sum ``l``) are float32 and use ``exp2`` with the
  scale folded into ``log2(e) * sm_scale``: the scores are scaled, then the running max
  is subtracted (a multiply and a subtract per score; v2 below fuses them into one FMA).
  The program writes O and the row log-sum-exp (in base 2), the only state the backward
  pass keeps.
- Masking costs instructions, so each loop is split: full tiles strictly inside the valid
  region run without masks; only the tail tile (sequence length not a multiple of the
  tile) and, when causal, the tiles on the diagonal run masked. Causal programs stop at
  the diagonal: no fully masked tile is loaded.
- Head dims that are not powers of two (80, 96) are padded to the next power of two in
  registers (``BLOCK_D``) with masked loads; memory is not padded or copied.
- Backward (FA2): a small kernel computes ``delta = rowsum(dO * O)``; `_bwd_dkdv_kernel`
  (one program per key tile, streaming queries) and `_bwd_dq_kernel` (one program per
  query tile, streaming keys) each recompute the probabilities from the saved
  log-sum-exp, so no atomics are needed and query and key lengths may differ.
- Float32 inputs use IEEE-precision dots (not TF32), so fp32 results are fp32-accurate.
- Batch x heads runs on the grid's second axis (query tiles on the first, so the programs
  of one head run together and share K and V in L2); CUDA caps that axis at 65,535, so a
  larger batch is launched in chunks of whole sequences.
- Tile sizes: autotuned over a Hopper list on compute capability 9.x, a small list on
  Ampere and Ada, a smaller one on Turing (Colab's T4: 64 KB of shared memory per block;
  `_flash_kernels.configs_for`), and one small fixed tile under the CPU interpreter (fast
  to interpret and small enough that tests with 17 or 100 tokens still cross several
  tiles). Float32 inputs and sequences of at most 256 tokens skip the search (one fixed
  tile each): there the search costs far more than it saves.

Layout: the kernels live in `_flash_kernels.py` (imported on first use, after the
interpreter switch); this file holds the launchers (asserts, grids), the
`torch.autograd.Function` and the public functions. The plain references are in
`reference.py`: `naive_attention` annotated with the bytes it moves, `tiled_attention`
this same algorithm in PyTorch. Bytes this forward moves: Q and O once, K and V once per
query tile (``ceil(N / BLOCK_M)`` passes, mostly served by L2), no score matrix.

Versions of the forward kernel (``version=`` or ``MLINFRA_ATTENTION_KERNEL``; the
backward is shared): v1 is described above. The default is v5 where its measured table
gives it the shape and it can run (a Hopper GPU, bf16/fp16, head dim 64 or 128, equal
lengths that are multiples of its tile), v1 everywhere else; see v5 below. v2 loads tiles
through in-kernel TMA tensor descriptors and folds the scale into one FMA; it was predicted to gain
5-12% on Hopper and measured 5-20% slower on the H200
(``benchmarks/results/h200-attention-2026-12-02-v2.json``: a fixed cost per program, most
likely the descriptor creation), so it stays as a documented, tested alternative. v2 needs a
positive scale and 16-byte aligned tensors and rows; without them v1 runs and a
`KernelVersionWarning` says why (never a silent switch). v3 is v2 with the descriptors built
once per launch on the host (`TensorDescriptor`); predicted to match v1 everywhere and gain a
few percent at D=128, it removed v2's fixed cost (1.08-1.22x v2 at N=1k) but measured
0.95-1.0x v1 at D=128 (one shape's timing in one run, 0.77x, did not repeat) and
0.97-1.01x at D=64 in two runs
(``benchmarks/results/h200-fwd-versions-2026-12-04-run*.json``; chapter 1's appendix, "Version 3"):
TMA loads buy nothing over v1's pipelined pointer loads at these tiles, so v1 stays the
default. v2 and v3 run under the CPU interpreter too. v4 is v1 with the scores carried one
tile ahead (FA3's intra-warpgroup overlap, by hand: tile j+1's QK^T is started before tile
j's softmax, so the Tensor Cores work while the exp2s run). Prediction, written before the
first run: if the compiler keeps that matmul asynchronous across the softmax, 5-10% at D=64
(the softmax is a larger share of the work there) and 3-8% at D=128; the extra scores tile
(32 more float32 registers per thread at 8 warps) may cost occupancy and eat the gain.
Measured in two H200 runs (``benchmarks/results/h200-fwd-overlap-2026-12-04-run*.json``):
0.72-0.90x v1 at D=64, 0.93-1.02x at D=128, and 0.95-0.98x at D=128 with its own tile
search (``...-autotuned.json``): the compiler does not keep the early matmul in flight
across the softmax (our reading, not profiled), so v4 pays the registers for nothing and
v1 stays the default.
v5 (`_gluon_fwd`, `_gluon_kernels`) is FA3's schedule written by hand in Triton's lower-level
Gluon dialect, where the kernel itself issues the Tensor Core matmuls asynchronously and says
where to wait (what v4 could not make ``tl`` do): TMA copies into rings of shared-memory
buffers behind mbarriers, tile j's QK^T issued with P_{j-1} V_{j-1} behind it and tile j's
softmax run while that second matmul is in flight. Predicted (before the first run): 5-15% over
v1 at D=128. Measured in two H200 runs of a dozen configurations
(``benchmarks/results/h200-gluon-configs-2026-12-04-run*.json``), the best configuration per
shape ran 1.04-1.37x v1 and 0.72-0.95x cuDNN at D=128 (0.79-0.95x at N >= 4k, where v1 reached
0.74-0.81x), 0.92-1.21x v1 and 0.76-1.07x cuDNN at D=64; at D=128 the overlap is worth 2-8%
over the same kernel's plain schedule (its SASS, read by `machine_code`, waits for P V before
the softmax at that tile: the gain is the two matmuls issued back to back), at D=64 the plain
schedule won most shapes. Causal D=64 at 1k tokens stays on v1 (every v5 configuration was
slower there).
Three sweeps of the benchmark with the default kernel
(``benchmarks/results/h200-fwd-v5-default-2026-12-04-run*.json``): 0.86-0.94x cuDNN at D=128
and N >= 4k (v1 in the same runs: 0.75-0.79x), 0.96-1.06x at D=64; at least 1.25x SDPA's
FlashAttention-2 on every shape of the third sweep, below it on 1 and 3 shapes (1k-2k
tokens) of the first two, which ran before the launcher cached its per-call answers; at 1k
tokens the launch path costs about as much as the kernel
(``benchmarks/results/h200-host-overhead-2026-12-04.json``).

Backwards (``backward=`` or ``MLINFRA_ATTENTION_BACKWARD``): "split" recomputes
``QK^T`` and ``dO V^T`` in both backward kernels, so FA2's 5 matmuls become 7, the price of
needing no atomics. "gluon" (the default) is the same split with both kernels written in
Gluon on version 5's schedule (`_gluon_bwd`: K, V resident, (Q, dO) tiles in a TMA ring,
S^T and dP^T issued back to back, dV under dP^T); it runs where its measured table gives the
shape and it can run (Hopper, bf16/fp16, head dim 64 or 128, equal lengths that are multiples
of 64), the Triton "split" kernels everywhere else, silently unless "gluon" was asked for by
name. Predicted (before its first run) 1.1-1.35x the Triton kernels at D=128, so 0.85-0.95x
cuDNN; measured in one H100 run (``benchmarks/results/h100-gluon-bwd-2026-12-05.json``)
1.01-1.33x the Triton split backward at D=128 and 1.04-1.21x at D=64 (causal D=64 at 16k
tokens 0.97x: Triton kept there), 0.75-0.86x cuDNN at D=128 and N >= 4k (Triton: 0.74x);
in the full sweep that followed (``benchmarks/results/h100-attention-2026-12-05.json``, 3
repeats) 0.81-0.99x cuDNN there. Nsight Compute (``h100-ncu-kernels-2026-12-05.json``, D=128,
N=8k): its tensor pipes are busier than cuDNN's (78-84% vs 67% of peak), but the split does
7 matmuls to cuDNN's 5, which is the remaining gap. "atomic" is FA2's own: the dK/dV kernel also computes each key tile's
share of dQ (``dS K``, the fifth matmul) and adds it with float32 atomics into a zeroed
buffer, cast to the input dtype at the end; no dQ kernel. Predicted to gain up to ~15% at
D=64 (fewer matmuls) and to risk a loss at D=128 (a third accumulator's registers); measured
0.63-0.95x the split backward over the whole sweep in two H200 runs
(``benchmarks/results/h200-bwd-atomic-2026-12-04-run*.json``; chapter 1's appendix, "Three
FlashAttention ideas, tried"): the atomics (one float32 add per dQ element per key tile, ``N / BLOCK_N``
times) and the bigger program cost more than two matmuls save. Its dQ sums in an order that
varies from run to run (atomics), so it is not bitwise reproducible.

Caveats: causal attention needs equal query and key lengths (`_checks`).
The interpreter has no bfloat16.

References: Dao, "FlashAttention-2" (2023); the Triton tutorial "Fused Attention"
(06-fused-attention.py), whose exp2 trick and loop split this kernel follows.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from mlinfra_lab import runtime
from mlinfra_lab.attention._checks import AttentionInputError, check_kernel_inputs

__all__ = [
    "BACKWARDS",
    "DEFAULT_BACKWARD",
    "DEFAULT_VERSION",
    "KERNEL_VERSIONS",
    "KernelVersionWarning",
    "flash_attention",
    "flash_attention_lse",
    "poisoned_buffers",
    "resolve_backward",
    "resolve_version",
]

LOG2E = 1.4426950408889634
KERNEL_VERSIONS = (1, 2, 3, 4, 5)  # the forward kernels (see the module doc)
# the forward kernel used when neither the call nor the env picks one: v5 (Gluon) on the
# shapes its measured table gives it, v1 everywhere else (no warning: nothing was asked for)
DEFAULT_VERSION = 5
# "split": dK/dV and dQ in two kernels, 7 matmuls, no atomics; "atomic": FA2's 5 matmuls,
# dQ added by every key tile into a float32 buffer with atomics
# "gluon": the split backward's two kernels written in Gluon (Hopper, `_gluon_bwd`)
BACKWARDS = ("split", "atomic", "gluon")
# the backward used when neither the call nor the env picks one: the Gluon kernels on the
# shapes their measured table gives them, the Triton split kernels everywhere else (no
# warning: nothing was asked for)
DEFAULT_BACKWARD = "gluon"
# CUDA's limit on a grid's y dimension, where the launchers put batch x heads: a larger
# product (a long batch of short sequences: 512 x 128 heads) is launched in batch chunks.
MAX_GRID_ROWS = 65535


def _kernels() -> dict[str, Any]:
    from mlinfra_lab.attention._flash_kernels import kernels  # imports triton: on use only

    return kernels()


def _block_d(head_dim: int) -> int:
    return max(16, 1 << (head_dim - 1).bit_length())


def _precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


def resolve_version(version: int | None = None) -> int:
    """The forward kernel version to use: ``version`` if given, else the environment's
    ``MLINFRA_ATTENTION_KERNEL`` (one of `KERNEL_VERSIONS`), else `DEFAULT_VERSION`."""
    if version is None:
        env = os.environ.get("MLINFRA_ATTENTION_KERNEL", "").strip().lstrip("v")
        version = int(env) if env.isdigit() else (env or DEFAULT_VERSION)
    if version not in KERNEL_VERSIONS:
        raise AttentionInputError(
            f"kernel version {version!r} does not exist; use one of {KERNEL_VERSIONS}"
        )
    return int(version)


def resolve_backward(backward: str | None = None) -> str:
    """The backward to use: ``backward`` if given, else the environment's
    ``MLINFRA_ATTENTION_BACKWARD``, else `DEFAULT_BACKWARD` (one of `BACKWARDS`)."""
    if backward is None:
        backward = os.environ.get("MLINFRA_ATTENTION_BACKWARD", "").strip() or DEFAULT_BACKWARD
    if backward not in BACKWARDS:
        raise AttentionInputError(
            f"backward {backward!r} does not exist; use one of {', '.join(BACKWARDS)}"
        )
    return backward


def _batch_chunks(b: int, h: int) -> list[tuple[int, int]]:
    """Batch ranges ``[start, end)`` whose ``(end - start) * h`` fits the grid's row limit."""
    if h > MAX_GRID_ROWS:
        raise AttentionInputError(
            f"{h} heads exceed the {MAX_GRID_ROWS} grid rows one launch "
            "can address; fold heads into the batch dimension"
        )
    per = MAX_GRID_ROWS // h
    return [(s, min(b, s + per)) for s in range(0, b, per)]


_POISON = False  # set by `poisoned_buffers`: launchers fill what they allocate with NaN


@contextmanager
def poisoned_buffers() -> Iterator[None]:
    """Inside the block, every output and gradient buffer the launchers allocate starts as
    NaN, so an element a kernel never writes shows up as NaN (a correctness check's tool)."""
    global _POISON
    saved, _POISON = _POISON, True
    try:
        yield
    finally:
        _POISON = saved


def _empty_like(t: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(t)
    return out.fill_(float("nan")) if _POISON else out


class KernelVersionWarning(UserWarning):
    """The requested kernel version cannot run on these inputs; the other one ran instead."""


def _tma_unusable(sm_scale: float, tensors: tuple[torch.Tensor, ...]) -> str | None:
    """Why the v2/v3 forward (TMA copies, folded scale) cannot take these inputs (None
    when it can)."""
    if sm_scale <= 0:
        return f"scale {sm_scale:g}: it takes the row max before scaling, so it needs a scale > 0"
    if any(t.data_ptr() % 16 for t in tensors):
        return "a tensor's base is not 16-byte aligned, which its TMA copies need"
    row = tensors[0].shape[-1] * tensors[0].element_size()
    if row % 16:
        return f"a row of {row} bytes is not a multiple of 16, which its TMA copies need"
    return None


def _descriptors(tensors: tuple[torch.Tensor, ...], rows: int, block_d: int) -> list[Any]:
    """v3's host-side descriptors ``[batch*heads, seq, head_dim]`` of `tensors`; their
    block shapes are set per tile by the kernel's pre-hook."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    out = []
    for t in tensors:
        n, d = t.shape[-2], t.shape[-1]
        out.append(TensorDescriptor(t, [rows, n, d], [n * d, d, 1], [1, 16, block_d]))
    return out


def _gluon(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float, asked: bool
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Version 5 where it can run: the table's configuration, or (asked for by name) the
    fallback one where the table prefers v1; None means run v1 (warning when it was asked)."""
    from mlinfra_lab.attention import _gluon_fwd as g

    cfg = g.pick_config(q.shape[-1], causal, q.shape[-2])
    if cfg is None and not asked:
        return None  # the default, on a shape where v1 measured faster
    cfg = cfg or g.FALLBACK_CONFIG[causal]
    why_not = g.unusable(q, k, v, causal, sm_scale, cfg)
    if why_not:
        if asked:
            warnings.warn(
                f"flash_attention(version=5) cannot run here ({why_not}): ran v1",
                KernelVersionWarning,
                stacklevel=5,
            )
        return None
    return g.launch(q, k, v, causal, sm_scale, cfg)  # `unusable` ran just above


def _forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    sm_scale: float,
    version: int = 1,
    asked: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward kernel; returns O and the base-2 LSE ``[B*H, Nq]`` (fp32).
    ``asked``: the version was named by the caller or the environment (a fallback warns)."""
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
    assert k.shape == v.shape == (b, h, n_k, d) and q.dtype == k.dtype == v.dtype
    assert not causal or n_q == n_k
    if version == 5:
        done = _gluon(q, k, v, causal, sm_scale, asked)
        if done is not None:
            return done
        version = 1
    o = _empty_like(q)
    lse = torch.empty((b * h, n_q), device=q.device, dtype=torch.float32)
    common = dict(CAUSAL=causal, HEAD_DIM=d, BLOCK_D=_block_d(d), PRECISION=_precision(q.dtype))
    for s, e in _batch_chunks(b, h):  # one launch unless batch x heads > MAX_GRID_ROWS
        cq, ck, cv, co, clse = q[s:e], k[s:e], v[s:e], o[s:e], lse[s * h : e * h]
        grid = lambda meta, rows=(e - s) * h: (_cdiv(n_q, meta["BLOCK_M"]), rows)  # noqa: E731
        # v2/v3 need 16-byte aligned bases and rows (the copy engine), a scale > 0 (max first)
        why_not = _tma_unusable(sm_scale, (cq, ck, cv, co)) if version in (2, 3) else None
        if why_not:
            warnings.warn(
                f"flash_attention(version={version}) cannot run here ({why_not}): ran v1",
                KernelVersionWarning,
                stacklevel=4,
            )
        if version == 2 and not why_not:
            from mlinfra_lab.attention._flash_kernels import set_descriptor_allocator

            set_descriptor_allocator()
            _kernels()["fwd_v2"][grid](cq, ck, cv, co, clse, n_q, n_k, sm_scale * LOG2E, **common)
        elif version == 3 and not why_not:
            descs = _descriptors((cq, ck, cv, co), (e - s) * h, common["BLOCK_D"])
            _kernels()["fwd_v3"][grid](*descs, clse, n_q, n_k, sm_scale * LOG2E, **common)
        else:  # v1, or v4: v1's kernel with the next tile's QK^T started early
            _kernels()["fwd_v4" if version == 4 else "fwd"][grid](
                cq,
                ck,
                cv,
                co,
                clse,
                n_q,
                n_k,
                sm_scale * LOG2E,
                n_q * d,
                n_k * d,
                d,
                OVERLAP=version == 4,
                **common,
            )
    return o, lse


def _gluon_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    sm_scale: float,
    asked: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The Gluon backward where it can run: the table's configuration, or (asked for by name)
    the fallback one where the table prefers the Triton kernels; None means run those
    (warning when it was asked)."""
    from mlinfra_lab.attention import _gluon_bwd as g

    cfg = g.pick_config(q.shape[-1], causal, q.shape[-2])
    if cfg is None and not asked:
        return None  # the default, on a shape where the Triton kernels measured faster
    cfg = cfg or g.FALLBACK_CONFIG
    why_not = g.unusable(q, k, do, causal, cfg)
    if why_not:
        if asked:
            warnings.warn(
                f"flash_attention(backward='gluon') cannot run here ({why_not}): ran 'split'",
                KernelVersionWarning,
                stacklevel=5,
            )
        return None
    delta = _empty_like(lse)
    _launch_delta(o, do, delta, q.shape[0] * q.shape[1])  # b * h <= 65535: `unusable` says so
    return g.launch(do, q, k, v, lse, delta, causal, sm_scale, cfg, empty_like=_empty_like)


def _backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    sm_scale: float,
    backward: str = DEFAULT_BACKWARD,
    asked: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV. ``asked``: the backward was named by the caller or the environment (a
    fallback from "gluon" warns)."""
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    do = do.contiguous()
    assert do.shape == o.shape and do.dtype == o.dtype
    if backward == "gluon":
        done = _gluon_backward(do, q, k, v, o, lse, causal, sm_scale, asked)
        if done is not None:
            return done
        backward = "split"
    kern = _kernels()
    delta = _empty_like(lse)
    dk, dv = _empty_like(k), _empty_like(v)
    atomic = backward == "atomic"
    # the atomic backward adds into a zeroed float32 dQ; the split one writes dQ once
    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32) if atomic else _empty_like(q)
    common = dict(CAUSAL=causal, HEAD_DIM=d, BLOCK_D=_block_d(d), PRECISION=_precision(q.dtype))
    args = (n_q, n_k, sm_scale * LOG2E, sm_scale, n_q * d, n_k * d, d)
    for s, e in _batch_chunks(b, h):  # one launch each unless batch x heads > MAX_GRID_ROWS
        rows = (e - s) * h
        t = [x[s:e] for x in (q, k, v, do)]
        clse, cdelta = lse[s * h : e * h], delta[s * h : e * h]
        _launch_delta(o[s:e], t[3], cdelta, rows)
        kern["dkdv_dq" if atomic else "dkdv"][
            lambda m, rows=rows: (_cdiv(n_k, m["BLOCK_N"]), rows)
        ](*t, clse, cdelta, dk[s:e], dv[s:e], dq[s:e], *args, DQ_ATOMIC=atomic, **common)
        if not atomic:
            kern["dq"][lambda m, rows=rows: (_cdiv(n_q, m["BLOCK_M"]), rows)](
                *t, clse, cdelta, dq[s:e], *args, **common
            )
    return (dq.to(q.dtype) if atomic else dq), dk, dv


def _launch_delta(o: torch.Tensor, do: torch.Tensor, delta: torch.Tensor, rows: int) -> None:
    """delta = rowsum(dO * O) in float32 into `delta` ``[rows, Nq]`` (``rows`` = batch x
    heads of `o`, at most `MAX_GRID_ROWS`): the backward kernels' per-query constant."""
    n_q, d = o.shape[-2], o.shape[-1]
    _kernels()["delta"][(_cdiv(n_q, 64), rows)](
        o, do, delta, n_q, HEAD_DIM=d, BLOCK_D=_block_d(d), BLOCK_M=64
    )


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        sm_scale: float,
        version: int,
        backward: str,
        asked: bool,
        backward_asked: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        o, lse = _forward(q, k, v, causal, sm_scale, version, asked)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale, ctx.backward = causal, sm_scale, backward
        ctx.backward_asked = backward_asked
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx: Any, do: torch.Tensor, _dlse: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _backward(
            do, q, k, v, o, lse, ctx.causal, ctx.sm_scale, ctx.backward, ctx.backward_asked
        )
        return dq, dk, dv, None, None, None, None, None, None


def _apply(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    sm_scale: float | None,
    version: int | None,
    backward: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check the inputs and run the autograd function: O and the base-2 LSE ``[B*H, Nq]``."""
    runtime.ensure_triton_mode()  # before the first triton import, when there is no GPU
    _, _, _, _, d = check_kernel_inputs(q, k, v, causal, runtime.triton_interpreted())
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    asked = version is not None or bool(os.environ.get("MLINFRA_ATTENTION_KERNEL"))
    backward_asked = backward is not None or bool(os.environ.get("MLINFRA_ATTENTION_BACKWARD"))
    return _FlashAttention.apply(
        q,
        k,
        v,
        bool(causal),
        scale,
        resolve_version(version),
        resolve_backward(backward),
        asked,
        backward_asked,
    )


def flash_attention_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    version: int | None = None,
    backward: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`flash_attention` that also returns the float32 row log-sum-exp ``[B, H, Nq]``
    (natural log of the scaled scores, as `tiled_attention(..., return_lse=True)`)."""
    o, lse2 = _apply(q, k, v, causal, sm_scale, version, backward)
    b, h, n_q, _ = q.shape
    return o, (lse2 / LOG2E).view(b, h, n_q)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    version: int | None = None,
    backward: str | None = None,
) -> torch.Tensor:
    """Fused attention (Triton), differentiable; ``[B, H, N, D]`` in, ``[B, H, Nq, D]`` out.

    ``version`` picks the forward kernel (1: pointer loads; 2: tensor descriptors and a
    folded scale; 3: the same with host-built descriptors; 4: v1 with the next tile's QK^T
    started before this tile's softmax; 5: FA3's schedule in Gluon, Hopper only); None
    means `resolve_version()`'s default (v5 on the shapes its table gives it, else v1).
    ``backward`` picks the backward ("split": two Triton kernels, 7 matmuls; "atomic": FA2's
    5 matmuls, dQ added with float32 atomics; "gluon": the split backward's kernels in Gluon,
    Hopper only); None means `resolve_backward()`'s default (the Gluon kernels on the shapes
    their table gives them, else "split").
    The log-sum-exp stays in base 2 (no conversion kernel: the Nsight Compute run of the
    chapter found one extra launch per forward when this called `flash_attention_lse`)."""
    return _apply(q, k, v, causal, sm_scale, version, backward)[0]
