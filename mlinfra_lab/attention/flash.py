"""FlashAttention-2 on Tensor Cores: a fused forward and a two-kernel backward, in Triton
everywhere and in Gluon on Hopper.

Contract: ``flash_attention(q, k, v, causal=False, sm_scale=None, version=None,
backward=None)`` returns ``softmax(q k^T * scale) v`` for ``[batch, heads, seq, head_dim]``
inputs and is differentiable in q, k and v; the ``seq x seq`` matrix never exists in device
memory. ``version`` picks the forward kernel (`KERNEL_VERSIONS`: 1, Triton, any GPU and the
CPU interpreter; 5, Gluon, Hopper), ``backward`` the backward (`BACKWARDS`: "split", Triton;
"gluon", Gluon on Hopper); None means ``MLINFRA_ATTENTION_KERNEL`` /
``MLINFRA_ATTENTION_BACKWARD`` from the environment, else `DEFAULT_VERSION` /
`DEFAULT_BACKWARD` (`resolve_version`, `resolve_backward`). A removed variant (version 2, 3
or 4, backward "atomic") raises `RemovedKernelError`, which says what it measured and where
its code is; a name that never existed raises `AttentionInputError`.

Design decisions:
- Forward, version 1 (`_fwd_kernel`): one program per ``BLOCK_M`` queries of one (batch,
  head). Q stays in registers; K and V stream through in ``BLOCK_N`` tiles; the two matmuls
  are ``tl.dot`` on Tensor Cores in the input dtype with float32 accumulators; the softmax
  statistics (running max ``m`` and sum ``l``) are float32 and use ``exp2`` with the scale
  folded into ``log2(e) * sm_scale``: the scores are scaled, then the running max is
  subtracted. The program writes O and the row log-sum-exp (in base 2), the only state the
  backward pass keeps.
- Masking costs instructions, so each loop is split: full tiles strictly inside the valid
  region run without masks; only the tail tile (sequence length not a multiple of the
  tile) and, when causal, the tiles on the diagonal run masked. Causal programs stop at
  the diagonal: no fully masked tile is loaded.
- Head dims that are not powers of two (80, 96) are padded to the next power of two in
  registers (``BLOCK_D``) with masked loads; memory is not padded or copied.
- Forward, version 5 (`_gluon_fwd`, `_gluon_kernels`): FA3's schedule written by hand in
  Triton's lower-level Gluon dialect, where the kernel itself issues the Tensor Core matmuls
  asynchronously and says where to wait (which ``tl`` does not let a kernel say): TMA copies
  into rings of shared-memory buffers behind mbarriers, tile j's QK^T issued with
  P_{j-1} V_{j-1} behind it and tile j's softmax run while that second matmul is in flight.
- Routing: the default is version 5 where its measured table gives it the shape and it can
  run (a Hopper GPU, bf16/fp16, head dim 64 or 128, equal lengths that are multiples of its
  tile), version 1 everywhere else, silently (nothing was asked for). Asked for by name
  (argument or environment) where it cannot run, version 1 runs and a `KernelVersionWarning`
  says why: never a silent switch.
- Backward "split" (FA2's algorithm, Triton): a small kernel computes
  ``delta = rowsum(dO * O)``; `_bwd_dkdv_kernel` (one program per key tile, streaming
  queries) and `_bwd_dq_kernel` (one program per query tile, streaming keys) each recompute
  the probabilities from the saved log-sum-exp, so no atomics are needed, query and key
  lengths may differ and the gradients are bitwise reproducible. Both kernels recompute
  ``QK^T`` and ``dO V^T``, so FA2's 5 matmuls become 7: the price of needing no atomics.
- Backward "gluon" (the default): the same split with both kernels written in Gluon on
  version 5's schedule (`_gluon_bwd`: K, V resident, (Q, dO) tiles in a TMA ring, S^T and
  dP^T issued back to back, dV under dP^T). It runs where its measured table gives the
  shape and it can run (Hopper, bf16/fp16, head dim 64 or 128, equal lengths that are
  multiples of 64), the Triton "split" kernels everywhere else, silently unless "gluon" was
  asked for by name.
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

Layout: the Triton kernels live in `_flash_kernels.py` (imported on first use, after the
interpreter switch), the Gluon ones behind `_gluon_fwd` and `_gluon_bwd`; this file holds
the launchers (asserts, grids), the routing, the `torch.autograd.Function` and the public
functions. The plain references are in `reference.py`: `naive_attention` annotated with
the bytes it moves, `tiled_attention` this same algorithm in PyTorch. Bytes the version 1
forward moves: Q and O once, K and V once per query tile (``ceil(N / BLOCK_M)`` passes,
mostly served by L2), no score matrix.

Removed variants (versions 2-4, the "atomic" backward) raise `RemovedKernelError`, whose
message (`REMOVED_VERSIONS`, `REMOVED_BACKWARDS`) says what each was and where its code is;
what they measured is in ``benchmarks/NOTES.md`` and the case-study appendix.

Caveats: causal attention needs equal query and key lengths (`_checks`).
The interpreter has no bfloat16.

References: Dao, "FlashAttention-2" (2023); Shah et al., "FlashAttention-3" (2024); the
Triton tutorial "Fused Attention" (06-fused-attention.py), whose exp2 trick and loop split
version 1 follows.
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
from mlinfra_lab.attention._checks import (
    AttentionInputError,
    RemovedKernelError,
    check_kernel_inputs,
)

__all__ = [
    "BACKWARDS",
    "DEFAULT_BACKWARD",
    "DEFAULT_VERSION",
    "KERNEL_VERSIONS",
    "REMOVED_BACKWARDS",
    "REMOVED_IN",
    "REMOVED_VERSIONS",
    "KernelVersionWarning",
    "RemovedKernelError",
    "flash_attention",
    "flash_attention_lse",
    "poisoned_buffers",
    "resolve_backward",
    "resolve_version",
]

LOG2E = 1.4426950408889634
KERNEL_VERSIONS = (1, 5)  # the forward kernels: 1 Triton, 5 Gluon (see the module doc)
# the forward kernel used when neither the call nor the env picks one: v5 (Gluon) on the
# shapes its measured table gives it, v1 everywhere else (no warning: nothing was asked for)
DEFAULT_VERSION = 5
# "split": dK/dV and dQ in two Triton kernels, 7 matmuls, no atomics;
# "gluon": the split backward's two kernels written in Gluon (Hopper, `_gluon_bwd`)
BACKWARDS = ("split", "gluon")
# the backward used when neither the call nor the env picks one: the Gluon kernels on the
# shapes their measured table gives them, the Triton split kernels everywhere else (no
# warning: nothing was asked for)
DEFAULT_BACKWARD = "gluon"
# CUDA's limit on a grid's y dimension, where the launchers put batch x heads: a larger
# product (a long batch of short sequences: 512 x 128 heads) is launched in batch chunks.
MAX_GRID_ROWS = 65535

# The variants removed after losing on the H200 (module doc, "Removed variants"): what each
# was and what it measured, for the `RemovedKernelError` that asking for one raises.
REMOVED_IN = "687b216"  # the last commit that holds their code
REMOVED_VERSIONS: dict[int, str] = {
    2: "TMA tensor descriptors built in the kernel and the scale folded into one FMA; it "
    "measured 5-20% slower than version 1 on the H200 "
    "(benchmarks/results/h200-attention-2026-12-02-v2.json)",
    3: "version 2 with its descriptors built on the host; it measured 0.95-1.0x version 1 "
    "at D=128 and 0.97-1.01x at D=64 in two H200 runs "
    "(benchmarks/results/h200-fwd-versions-2026-12-04-run*.json)",
    4: "version 1 with the next tile's QK^T issued before this tile's softmax; it measured "
    "0.72-0.90x version 1 at D=64 and 0.93-1.02x at D=128 in two H200 runs "
    "(benchmarks/results/h200-fwd-overlap-2026-12-04-run*.json)",
}
REMOVED_BACKWARDS: dict[str, str] = {
    "atomic": "FA2's 5-matmul backward, dQ added by every key tile with float32 atomics; it "
    "measured 0.63-0.95x the split backward in two H200 runs "
    "(benchmarks/results/h200-bwd-atomic-2026-12-04-run*.json)",
}


def _removed(asked: str, what: str, why: str, instead: str) -> RemovedKernelError:
    return RemovedKernelError(
        f"{asked}: {what} was removed: {why}. Its code is in git commit {REMOVED_IN} "
        f"(git show {REMOVED_IN}:mlinfra_lab/attention/_flash_kernels.py). {instead}"
    )


def _kernels() -> dict[str, Any]:
    from mlinfra_lab.attention._flash_kernels import kernels  # imports triton: on use only

    return kernels()


def _block_d(head_dim: int) -> int:
    return max(16, 1 << (head_dim - 1).bit_length())


def _precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


def resolve_version(version: int | None = None) -> int:
    """The forward kernel version to use: ``version`` if given, else the environment's
    ``MLINFRA_ATTENTION_KERNEL`` (one of `KERNEL_VERSIONS`), else `DEFAULT_VERSION`.

    Raises `RemovedKernelError` for a removed version (`REMOVED_VERSIONS`), and
    `AttentionInputError` for one that never existed."""
    asked = f"version={version!r}"
    if version is None:
        raw = os.environ.get("MLINFRA_ATTENTION_KERNEL", "").strip()
        env = raw.lstrip("v")
        if env and not env.isdigit():
            raise _unknown_version(env)
        version = int(env) if env else DEFAULT_VERSION
        asked = f"MLINFRA_ATTENTION_KERNEL={raw}"
        instead = "Unset MLINFRA_ATTENTION_KERNEL for the default, or set it to 1."
    else:
        instead = "Use version=1 (the Triton kernel), or no version for the default."
    if version in REMOVED_VERSIONS:
        what = f"kernel version {version}"
        raise _removed(asked, what, REMOVED_VERSIONS[version], instead)
    if version not in KERNEL_VERSIONS:
        raise _unknown_version(version)
    return int(version)


def _unknown_version(version: object) -> AttentionInputError:
    return AttentionInputError(
        f"kernel version {version!r} does not exist; use one of {KERNEL_VERSIONS}"
    )


def resolve_backward(backward: str | None = None) -> str:
    """The backward to use: ``backward`` if given, else the environment's
    ``MLINFRA_ATTENTION_BACKWARD``, else `DEFAULT_BACKWARD` (one of `BACKWARDS`).

    Raises `RemovedKernelError` for a removed backward (`REMOVED_BACKWARDS`), and
    `AttentionInputError` for one that never existed."""
    asked = f"backward={backward!r}"
    instead = 'Use backward="split" (the Triton kernels), or no backward for the default.'
    if backward is None:
        backward = os.environ.get("MLINFRA_ATTENTION_BACKWARD", "").strip() or DEFAULT_BACKWARD
        asked = f"MLINFRA_ATTENTION_BACKWARD={backward}"
        instead = "Unset MLINFRA_ATTENTION_BACKWARD for the default, or set it to split."
    if backward in REMOVED_BACKWARDS:
        what = f"the {backward!r} backward"
        raise _removed(asked, what, REMOVED_BACKWARDS[backward], instead)
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
        grid = lambda meta, rows=(e - s) * h: (_cdiv(n_q, meta["BLOCK_M"]), rows)  # noqa: E731
        _kernels()["fwd"][grid](
            q[s:e],
            k[s:e],
            v[s:e],
            o[s:e],
            lse[s * h : e * h],
            n_q,
            n_k,
            sm_scale * LOG2E,
            n_q * d,
            n_k * d,
            d,
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
    dq, dk, dv = _empty_like(q), _empty_like(k), _empty_like(v)
    common = dict(CAUSAL=causal, HEAD_DIM=d, BLOCK_D=_block_d(d), PRECISION=_precision(q.dtype))
    args = (n_q, n_k, sm_scale * LOG2E, sm_scale, n_q * d, n_k * d, d)
    for s, e in _batch_chunks(b, h):  # one launch each unless batch x heads > MAX_GRID_ROWS
        rows = (e - s) * h
        t = [x[s:e] for x in (q, k, v, do)]
        clse, cdelta = lse[s * h : e * h], delta[s * h : e * h]
        _launch_delta(o[s:e], t[3], cdelta, rows)
        kern["dkdv"][lambda m, rows=rows: (_cdiv(n_k, m["BLOCK_N"]), rows)](
            *t, clse, cdelta, dk[s:e], dv[s:e], *args, **common
        )
        kern["dq"][lambda m, rows=rows: (_cdiv(n_q, m["BLOCK_M"]), rows)](
            *t, clse, cdelta, dq[s:e], *args, **common
        )
    return dq, dk, dv


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

    ``version`` picks the forward kernel (1: Triton, pointer loads; 5: FA3's schedule in
    Gluon, Hopper only); None means `resolve_version()`'s default (v5 on the shapes its table
    gives it, else v1). ``backward`` picks the backward ("split": two Triton kernels, 7
    matmuls; "gluon": the same split in Gluon, Hopper only); None means
    `resolve_backward()`'s default (the Gluon kernels on the shapes their table gives them,
    else "split"). A removed version (2-4) or backward ("atomic") raises
    `RemovedKernelError`.
    The log-sum-exp stays in base 2 (no conversion kernel: the Nsight Compute run of the
    chapter found one extra launch per forward when this called `flash_attention_lse`)."""
    return _apply(q, k, v, causal, sm_scale, version, backward)[0]
