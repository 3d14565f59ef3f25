"""The Triton kernels of `flash.py`; imported on first use, after the interpreter switch.

Contract: `kernels()` returns the forward, delta, dK/dV and dQ kernels, the three big ones
wrapped in autotuners whose tile configs suit the device found (`configs()`).

Design decisions (the full list is in `flash.py`'s docstring):
- This module imports triton at its top, so `flash.py` imports it only inside its
  launchers: importing `mlinfra_lab.attention` stays cheap, and on a machine without a GPU
  `runtime.ensure_triton_mode()` has switched the CPU interpreter on before triton loads.
- Every loop comes in a masked and an unmasked flavour (the ``MASKED`` constexpr): the
  compiler removes the masks from the full tiles, where they would only cost instructions.
- Version 1's pointers are plain ``base + row * stride + col`` with masks (no block
  pointers or tensor descriptors), which every GPU generation accepts. Versions 2 and 3 load
  through TMA tensor descriptors (Hopper and newer; the interpreter runs them too): built in
  the kernel (v2) or on the host (v3), see their sections below.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from mlinfra_lab import runtime

runtime.ensure_triton_mode()

import triton  # noqa: E402  (after the interpreter switch, deliberately)
import triton.language as tl  # noqa: E402

__all__ = ["configs", "configs_for", "kernels", "set_descriptor_allocator"]


@triton.jit
def _fwd_inner(
    acc,
    l_i,
    m_i,
    q,
    k_base,
    v_base,
    offs_m,
    lo,
    hi,
    n_k,
    qk_scale,
    stride_n,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = d_ok[None, :]
        if MASKED:
            kv_mask = kv_mask & (offs_n[:, None] < n_k)
        k = tl.load(k_base + offs_n[:, None] * stride_n + offs_d[None, :], mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N) fp32
        if MASKED:
            ok = offs_n[None, :] < n_k
            if CAUSAL:
                ok = ok & (offs_m[:, None] >= offs_n[None, :])
            qk = tl.where(ok, qk * qk_scale, float("-inf"))
        else:
            qk = qk * qk_scale
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.math.exp2(m_i - m_new)  # correction of the old statistics
        p = tl.math.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + offs_n[:, None] * stride_n + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


# ---- Forward, version 4: the next tile's QK^T issued before this tile's softmax ----
# FlashAttention-3's intra-warpgroup overlap, written by hand: on Hopper a `tl.dot` becomes an
# asynchronous wgmma, and the compiler waits for it only where its result is first used. v1's
# loop uses each tile's scores right away (the softmax), so the Tensor Cores idle while the
# exp2s run. Here the loop carries the scores one tile ahead: it starts tile j+1's QK^T, then
# does tile j's softmax and PV while that matmul runs. Only the unmasked main loop does this
# (the diagonal and tail tiles run as in v1). The last iteration computes one tile's scores
# that nobody uses (the next offset is clamped to the last tile: no mask, no out-of-bounds
# read). Prediction and measurement: flash.py's docstring.


@triton.jit
def _fwd_inner_overlap(
    acc,
    l_i,
    m_i,
    q,
    k_base,
    v_base,
    lo,
    hi,
    qk_scale,
    stride_n,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PRECISION: tl.constexpr,
):
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    offs_n = lo + tl.arange(0, BLOCK_N)
    # the first tile's scores; masked, since the loop may be empty (then hi == lo)
    k = tl.load(
        k_base + offs_n[:, None] * stride_n + offs_d[None, :],
        mask=d_ok[None, :] & (offs_n[:, None] < hi),
        other=0.0,
    )
    qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    for start_n in range(lo, hi, BLOCK_N):
        # start the next tile's matmul first (the last iteration recomputes the last tile)
        offs_next = tl.minimum(start_n + BLOCK_N, hi - BLOCK_N) + tl.arange(0, BLOCK_N)
        k = tl.load(k_base + offs_next[:, None] * stride_n + offs_d[None, :], mask=d_ok[None, :])
        qk_next = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        # this tile's softmax and PV, while that matmul runs
        qk = qk * qk_scale
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        v = tl.load(v_base + offs_n[:, None] * stride_n + offs_d[None, :], mask=d_ok[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
        qk = qk_next
    return acc, l_i, m_i


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    Out,
    LSE,
    n_q,
    n_k,
    qk_scale,
    stride_bh_q,
    stride_bh_k,
    stride_n,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    OVERLAP: tl.constexpr = False,
):
    # OVERLAP (version 4): the main loop is `_fwd_inner_overlap`, the rest is version 1
    if CAUSAL:  # the diagonal loop steps by BLOCK_N from a multiple of BLOCK_M
        tl.static_assert(BLOCK_M % BLOCK_N == 0, "causal tiles need BLOCK_M % BLOCK_N == 0")
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1).to(tl.int64)
    q_base = Q + off_bh * stride_bh_q
    k_base = K + off_bh * stride_bh_k
    v_base = V + off_bh * stride_bh_k
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m[:, None] < n_q) & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * stride_n + offs_d[None, :], mask=q_mask, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if CAUSAL:  # full tiles left of the diagonal, then the diagonal tiles, masked
        lo_masked = start_m * BLOCK_M
        hi_masked = tl.minimum((start_m + 1) * BLOCK_M, n_k)
    else:  # full tiles, then the tail tile past the last multiple of BLOCK_N
        lo_masked = n_k - n_k % BLOCK_N
        hi_masked = n_k
    if OVERLAP:
        acc, l_i, m_i = _fwd_inner_overlap(
            acc,
            l_i,
            m_i,
            q,
            k_base,
            v_base,
            0,
            lo_masked,
            qk_scale,
            stride_n,
            BLOCK_N,
            BLOCK_D,
            HEAD_DIM,
            PRECISION,
        )
    else:
        acc, l_i, m_i = _fwd_inner(
            acc,
            l_i,
            m_i,
            q,
            k_base,
            v_base,
            offs_m,
            0,
            lo_masked,
            n_k,
            qk_scale,
            stride_n,
            BLOCK_N,
            BLOCK_D,
            HEAD_DIM,
            False,
            CAUSAL,
            PRECISION,
        )
    acc, l_i, m_i = _fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        offs_m,
        lo_masked,
        hi_masked,
        n_k,
        qk_scale,
        stride_n,
        BLOCK_N,
        BLOCK_D,
        HEAD_DIM,
        True,
        CAUSAL,
        PRECISION,
    )
    acc = acc / l_i[:, None]
    tl.store(LSE + off_bh * n_q + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < n_q)
    tl.store(
        Out + off_bh * stride_bh_q + offs_m[:, None] * stride_n + offs_d[None, :],
        acc.to(Out.dtype.element_ty),
        mask=q_mask,
    )


# ---- Forward, version 2: TMA tensor descriptors and the scale folded into one FMA ----
# v1 (above) computes every K/V address in registers (BLOCK_N x BLOCK_D of them per tile,
# per thread group) and scales the scores before the max, then subtracts the max: a
# multiply and a subtract per score. v2 asks the copy engine for whole tiles through
# 3-D tensor descriptors ``[batch*heads, seq, head_dim]`` (out-of-bounds rows and columns
# read as zero, so sequence tails and head dims 80/96 need no load masks), and computes
# ``exp2(qk * scale - m)`` as one FMA, taking the max on the unscaled scores (valid because
# the launcher uses v2 only for a positive scale). Measured on the H200: 5-20% slower
# than v1 at the autotuned tile (a fixed cost per program, likely building 4 descriptors
# in global memory), faster than v1 only at register-starved tiles: see flash.py.


@triton.jit
def _fwd_inner_v2(
    acc,
    l_i,
    m_i,
    q,
    k_desc,
    v_desc,
    off_bh,
    offs_m,
    lo,
    hi,
    n_k,
    qk_scale,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr = False,
):
    # WARP_SPECIALIZE asks the compiler to split the loop into a producer partition issuing
    # the TMA loads and consumer warpgroups doing the dots and the softmax (Triton's automatic
    # warp specialisation, FA3's producer/consumer idea). Triton 3.6 on Hopper fails to compile
    # it at 4 warps and skips it at 8 (benchmarks/results/h200-warp-specialize-*.json), so
    # only `benchmarks/experiments/warp_specialize_probe.py` sets it; launchers never do.
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        k = k_desc.load([off_bh, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # unscaled, fp32
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            ok = offs_n[None, :] < n_k
            if CAUSAL:
                ok = ok & (offs_m[:, None] >= offs_n[None, :])
            qk = tl.where(ok, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])  # one FMA per score
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([off_bh, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _fwd_tma_body(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    LSE,
    n_q,
    n_k,
    qk_scale,
    start_m,
    off_bh,
    CAUSAL: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr = False,
):
    # one program of the v2/v3 forward, given its four descriptors (however they were built)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q = q_desc.load([off_bh, start_m * BLOCK_M, 0]).reshape(BLOCK_M, BLOCK_D)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if CAUSAL:
        lo_masked = start_m * BLOCK_M
        hi_masked = tl.minimum((start_m + 1) * BLOCK_M, n_k)
    else:
        lo_masked = n_k - n_k % BLOCK_N
        hi_masked = n_k
    acc, l_i, m_i = _fwd_inner_v2(
        acc,
        l_i,
        m_i,
        q,
        k_desc,
        v_desc,
        off_bh,
        offs_m,
        0,
        lo_masked,
        n_k,
        qk_scale,
        BLOCK_N,
        BLOCK_D,
        False,
        CAUSAL,
        PRECISION,
        WARP_SPECIALIZE,
    )
    acc, l_i, m_i = _fwd_inner_v2(
        acc,
        l_i,
        m_i,
        q,
        k_desc,
        v_desc,
        off_bh,
        offs_m,
        lo_masked,
        hi_masked,
        n_k,
        qk_scale,
        BLOCK_N,
        BLOCK_D,
        True,
        CAUSAL,
        PRECISION,
    )
    acc = acc / l_i[:, None]
    tl.store(LSE + off_bh.to(tl.int64) * n_q + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < n_q)
    o_desc.store([off_bh, start_m * BLOCK_M, 0], acc.to(q.dtype).reshape(1, BLOCK_M, BLOCK_D))


@triton.jit
def _fwd_kernel_v2(
    Q,
    K,
    V,
    Out,
    LSE,
    n_q,
    n_k,
    qk_scale,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr = False,
):
    if CAUSAL:  # the diagonal loop steps by BLOCK_N from a multiple of BLOCK_M
        tl.static_assert(BLOCK_M % BLOCK_N == 0, "causal tiles need BLOCK_M % BLOCK_N == 0")
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    n_bh = tl.num_programs(1)
    q_desc = tl.make_tensor_descriptor(
        Q,
        shape=[n_bh, n_q, HEAD_DIM],
        strides=[n_q * HEAD_DIM, HEAD_DIM, 1],
        block_shape=[1, BLOCK_M, BLOCK_D],
    )
    o_desc = tl.make_tensor_descriptor(
        Out,
        shape=[n_bh, n_q, HEAD_DIM],
        strides=[n_q * HEAD_DIM, HEAD_DIM, 1],
        block_shape=[1, BLOCK_M, BLOCK_D],
    )
    k_desc = tl.make_tensor_descriptor(
        K,
        shape=[n_bh, n_k, HEAD_DIM],
        strides=[n_k * HEAD_DIM, HEAD_DIM, 1],
        block_shape=[1, BLOCK_N, BLOCK_D],
    )
    v_desc = tl.make_tensor_descriptor(
        V,
        shape=[n_bh, n_k, HEAD_DIM],
        strides=[n_k * HEAD_DIM, HEAD_DIM, 1],
        block_shape=[1, BLOCK_N, BLOCK_D],
    )
    _fwd_tma_body(
        q_desc,
        k_desc,
        v_desc,
        o_desc,
        LSE,
        n_q,
        n_k,
        qk_scale,
        start_m,
        off_bh,
        CAUSAL,
        BLOCK_D,
        BLOCK_M,
        BLOCK_N,
        PRECISION,
        WARP_SPECIALIZE,
    )


# ---- Forward, version 3: the same kernel with host-side tensor descriptors ----
# v2's loss was measured as a fixed cost per program, most likely each program building its
# four descriptors in global memory (`tl.make_tensor_descriptor`, which also needs the
# scratch allocator). v3 keeps v2's body (TMA tile loads, the folded scale) but takes the
# descriptors as arguments, built once per launch on the host (`TensorDescriptor`, block
# shapes set by `_v3_pre_hook` for the tile the autotuner picked): what Triton's own Hopper
# tutorial does. Prediction and measurement: flash.py's docstring.


def _v3_pre_hook(nargs: dict[str, Any]) -> None:
    """Give the host descriptors the block shape of the config about to run."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    rows, cols = nargs["BLOCK_M"], nargs["BLOCK_D"]
    for name, block in (
        ("Q", rows),
        ("Out", rows),
        ("K", nargs["BLOCK_N"]),
        ("V", nargs["BLOCK_N"]),
    ):
        if isinstance(nargs[name], TensorDescriptor):
            nargs[name].block_shape = [1, block, cols]


@triton.jit
def _fwd_kernel_v3(
    Q,
    K,
    V,
    Out,
    LSE,
    n_q,
    n_k,
    qk_scale,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    if CAUSAL:  # the diagonal loop steps by BLOCK_N from a multiple of BLOCK_M
        tl.static_assert(BLOCK_M % BLOCK_N == 0, "causal tiles need BLOCK_M % BLOCK_N == 0")
    _fwd_tma_body(
        Q,
        K,
        V,
        Out,
        LSE,
        n_q,
        n_k,
        qk_scale,
        tl.program_id(0),
        tl.program_id(1),
        CAUSAL,
        BLOCK_D,
        BLOCK_M,
        BLOCK_N,
        PRECISION,
    )


def set_descriptor_allocator() -> None:
    """Give Triton the global-memory scratch that in-kernel tensor descriptors live in
    (128 bytes each; `tl.make_tensor_descriptor` needs it on a GPU). Idempotent."""

    def alloc(size: int, alignment: int, stream: Any) -> torch.Tensor:
        return torch.empty(
            size, dtype=torch.int8, device="cuda" if torch.cuda.is_available() else "cpu"
        )

    triton.set_allocator(alloc)


# ---- Backward ----
# `_bwd_dkdv_kernel` (per key tile) and `_bwd_dq_kernel` (per query tile) each recompute P:
# 7 matmuls, no atomics (flash.py's "split" backward). With DQ_ATOMIC the dK/dV kernel also
# adds dS K into a float32 dQ with atomics, FA2's 5 matmuls ("atomic"); measured slower on
# the H200 (0.63-0.95x), so "split" is the default: see flash.py's docstring.


@triton.jit
def _bwd_delta_kernel(
    Out, DO, DELTA, n_q, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr
):
    off_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_bh = tl.program_id(1).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (off_m[:, None] < n_q) & (offs_d[None, :] < HEAD_DIM)
    ptrs = off_bh * n_q * HEAD_DIM + off_m[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(Out + ptrs, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(DELTA + off_bh * n_q + off_m, tl.sum(o * do, 1), mask=off_m < n_q)


@triton.jit
def _dkdv_inner(
    dk,
    dv,
    k,
    v,
    q_base,
    do_base,
    lse_base,
    delta_base,
    offs_n,
    lo,
    hi,
    n_q,
    qk_scale,
    stride_n,
    dq_base,
    sm_scale,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    DQ_ATOMIC: tl.constexpr,
):
    offs_d = tl.arange(0, BLOCK_D)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q_mask = offs_d[None, :] < HEAD_DIM
        if MASKED:
            q_mask = q_mask & (offs_m[:, None] < n_q)
        q = tl.load(q_base + offs_m[:, None] * stride_n + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(do_base + offs_m[:, None] * stride_n + offs_d[None, :], mask=q_mask, other=0.0)
        if MASKED:
            lse = tl.load(lse_base + offs_m, mask=offs_m < n_q, other=0.0)
            delta = tl.load(delta_base + offs_m, mask=offs_m < n_q, other=0.0)
        else:
            lse = tl.load(lse_base + offs_m)
            delta = tl.load(delta_base + offs_m)
        qk_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)  # (BLOCK_N, BLOCK_M)
        p_t = tl.math.exp2(qk_t * qk_scale - lse[None, :])
        if MASKED:
            ok = offs_m[None, :] < n_q
            if CAUSAL:
                ok = ok & (offs_m[None, :] >= offs_n[:, None])
            p_t = tl.where(ok, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)
        if DQ_ATOMIC:  # FA2's fifth matmul: this key tile's share of dQ, added in fp32
            dq = tl.dot(tl.trans(ds_t).to(k.dtype), k, input_precision=PRECISION) * sm_scale
            tl.atomic_add(
                dq_base + offs_m[:, None] * stride_n + offs_d[None, :],
                dq,
                mask=q_mask,
                sem="relaxed",
            )
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    DQ,
    n_q,
    n_k,
    qk_scale,
    sm_scale,
    stride_bh_q,
    stride_bh_k,
    stride_n,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    DQ_ATOMIC: tl.constexpr = False,
):
    # DQ_ATOMIC (the 5-matmul backward): also adds dS K into DQ, a zeroed float32 buffer shaped
    # like Q, with atomics; otherwise DQ is not touched (`_bwd_dq_kernel` computes dQ)
    if CAUSAL:  # the diagonal loop steps by BLOCK_M from a multiple of BLOCK_N
        tl.static_assert(BLOCK_N % BLOCK_M == 0, "causal dK/dV tiles need BLOCK_N % BLOCK_M == 0")
    start_n = tl.program_id(0) * BLOCK_N
    off_bh = tl.program_id(1).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n[:, None] < n_k) & (offs_d[None, :] < HEAD_DIM)
    kv_off = off_bh * stride_bh_k + offs_n[:, None] * stride_n + offs_d[None, :]
    k = tl.load(K + kv_off, mask=kv_mask, other=0.0)
    v = tl.load(V + kv_off, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    q_base = Q + off_bh * stride_bh_q
    do_base = DO + off_bh * stride_bh_q
    lse_base = LSE + off_bh * n_q
    delta_base = DELTA + off_bh * n_q
    dq_base = DQ + off_bh * stride_bh_q
    full_hi = n_q - n_q % BLOCK_M
    if CAUSAL:  # queries below this key tile: first the diagonal tiles, masked
        dk, dv = _dkdv_inner(
            dk,
            dv,
            k,
            v,
            q_base,
            do_base,
            lse_base,
            delta_base,
            offs_n,
            start_n,
            tl.minimum(start_n + BLOCK_N, n_q),
            n_q,
            qk_scale,
            stride_n,
            dq_base,
            sm_scale,
            BLOCK_M,
            BLOCK_D,
            HEAD_DIM,
            True,
            CAUSAL,
            PRECISION,
            DQ_ATOMIC,
        )
        body_lo = start_n + BLOCK_N
    else:
        body_lo = 0
    dk, dv = _dkdv_inner(
        dk,
        dv,
        k,
        v,
        q_base,
        do_base,
        lse_base,
        delta_base,
        offs_n,
        body_lo,
        full_hi,
        n_q,
        qk_scale,
        stride_n,
        dq_base,
        sm_scale,
        BLOCK_M,
        BLOCK_D,
        HEAD_DIM,
        False,
        CAUSAL,
        PRECISION,
        DQ_ATOMIC,
    )
    dk, dv = _dkdv_inner(
        dk,
        dv,
        k,
        v,
        q_base,
        do_base,
        lse_base,
        delta_base,
        offs_n,
        tl.maximum(body_lo, full_hi),
        n_q,
        n_q,
        qk_scale,
        stride_n,
        dq_base,
        sm_scale,
        BLOCK_M,
        BLOCK_D,
        HEAD_DIM,
        True,
        CAUSAL,
        PRECISION,
        DQ_ATOMIC,
    )
    tl.store(DK + kv_off, (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + kv_off, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_inner(
    dq,
    q,
    do,
    lse,
    delta,
    k_base,
    v_base,
    offs_m,
    lo,
    hi,
    n_k,
    qk_scale,
    stride_n,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    offs_d = tl.arange(0, BLOCK_D)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_d[None, :] < HEAD_DIM
        if MASKED:
            kv_mask = kv_mask & (offs_n[:, None] < n_k)
        k = tl.load(k_base + offs_n[:, None] * stride_n + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_n + offs_d[None, :], mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        p = tl.math.exp2(qk * qk_scale - lse[:, None])
        if MASKED:
            ok = offs_n[None, :] < n_k
            if CAUSAL:
                ok = ok & (offs_m[:, None] >= offs_n[None, :])
            p = tl.where(ok, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    return dq


@triton.jit
def _bwd_dq_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    n_q,
    n_k,
    qk_scale,
    sm_scale,
    stride_bh_q,
    stride_bh_k,
    stride_n,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    if CAUSAL:  # the diagonal loop steps by BLOCK_N from a multiple of BLOCK_M
        tl.static_assert(BLOCK_M % BLOCK_N == 0, "causal tiles need BLOCK_M % BLOCK_N == 0")
    start_m = tl.program_id(0) * BLOCK_M
    off_bh = tl.program_id(1).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m[:, None] < n_q) & (offs_d[None, :] < HEAD_DIM)
    q_off = off_bh * stride_bh_q + offs_m[:, None] * stride_n + offs_d[None, :]
    q = tl.load(Q + q_off, mask=q_mask, other=0.0)
    do = tl.load(DO + q_off, mask=q_mask, other=0.0)
    lse = tl.load(LSE + off_bh * n_q + offs_m, mask=offs_m < n_q, other=0.0)
    delta = tl.load(DELTA + off_bh * n_q + offs_m, mask=offs_m < n_q, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    k_base = K + off_bh * stride_bh_k
    v_base = V + off_bh * stride_bh_k
    if CAUSAL:
        lo_masked = start_m
        hi_masked = tl.minimum(start_m + BLOCK_M, n_k)
    else:
        lo_masked = n_k - n_k % BLOCK_N
        hi_masked = n_k
    dq = _dq_inner(
        dq,
        q,
        do,
        lse,
        delta,
        k_base,
        v_base,
        offs_m,
        0,
        lo_masked,
        n_k,
        qk_scale,
        stride_n,
        BLOCK_N,
        BLOCK_D,
        HEAD_DIM,
        False,
        CAUSAL,
        PRECISION,
    )
    dq = _dq_inner(
        dq,
        q,
        do,
        lse,
        delta,
        k_base,
        v_base,
        offs_m,
        lo_masked,
        hi_masked,
        n_k,
        qk_scale,
        stride_n,
        BLOCK_N,
        BLOCK_D,
        HEAD_DIM,
        True,
        CAUSAL,
        PRECISION,
    )
    tl.store(DQ + q_off, (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_mask)


def configs() -> tuple[list[Any], list[Any], list[Any]]:
    """Tile configs for the forward, dK/dV and dQ kernels on the device found: one small
    fixed tile each under the CPU interpreter, else `configs_for` this GPU's capability."""
    if runtime.triton_interpreted():  # small tiles: cheap to interpret, many tiles per test
        return [_cfg(32, 16, 4, 1)], [_cfg(16, 32, 4, 1)], [_cfg(32, 16, 4, 1)]
    return configs_for(torch.cuda.get_device_capability())


def _cfg(bm: int, bn: int, warps: int, stages: int) -> Any:
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)


def configs_for(capability: tuple[int, int]) -> tuple[list[Any], list[Any], list[Any]]:
    """Tile configs for the forward, dK/dV and dQ kernels on a GPU of this compute capability.

    Every list holds more than one config: Triton's autotuner calls the pruner
    (`_pruner`: float32's own tile, ``MLINFRA_ATTENTION_AUTOTUNE=0``) only then, and runs a
    lone config as it is, float32 included (a 128 x 64 IEEE tile took over 60 s to compile).
    Without a search (short sequences, ``MLINFRA_ATTENTION_AUTOTUNE=0``) the first config
    runs, so each list's first config must fit the family's shared memory at the largest
    head dim (BLOCK_D = 128): a tile that does not fit fails at launch (OutOfResources).
    Constraints (causal; each kernel states its own with ``tl.static_assert``): forward and dQ
    need BLOCK_M % BLOCK_N == 0 (their diagonal loop steps by BLOCK_N from a multiple of
    BLOCK_M); dK/dV needs BLOCK_N % BLOCK_M == 0.
    """
    major = capability[0]
    if major == 9:  # Hopper: 128-row tiles for two warpgroups, pipelined loads
        fwd = [
            _cfg(128, 64, 4, 3),
            _cfg(128, 64, 8, 3),
            _cfg(128, 128, 8, 2),
            _cfg(128, 128, 8, 3),
            _cfg(64, 64, 4, 4),
            _cfg(128, 64, 8, 4),
            _cfg(128, 32, 4, 4),
        ]
        dkdv = [
            _cfg(32, 128, 4, 3),
            _cfg(64, 128, 8, 3),
            _cfg(64, 64, 4, 3),
            _cfg(64, 128, 8, 2),
            _cfg(32, 64, 4, 4),
        ]
        dq = [
            _cfg(128, 32, 4, 3),
            _cfg(128, 64, 8, 3),
            _cfg(64, 64, 4, 3),
            _cfg(128, 64, 8, 2),
            _cfg(64, 32, 4, 4),
        ]
        return fwd, dkdv, dq
    if major < 8:
        # Turing (Colab's free T4, compute capability 7.5): 64 KB of shared memory per block.
        # Compiled for sm_75 at BLOCK_D = 128, the Ampere list's backward tiles need 80-96 KB
        # and fail at launch; these need 40-48 KB (the forward's 32-48 KB).
        return (
            [_cfg(64, 32, 4, 2), _cfg(32, 32, 4, 2)],
            [_cfg(32, 32, 4, 1), _cfg(16, 32, 4, 1)],
            [_cfg(32, 32, 4, 1), _cfg(32, 16, 4, 1)],
        )
    # Ampere and Ada (A100, A10G, L4, RTX 30/40): tiles that fit Ada's 99 KB per block
    # (compiled for sm_86 at BLOCK_D = 128: 28-72 KB).
    return (
        [_cfg(64, 32, 4, 2), _cfg(64, 64, 4, 2)],
        [_cfg(32, 64, 4, 2), _cfg(64, 64, 4, 2)],
        [_cfg(64, 32, 4, 2), _cfg(64, 64, 4, 2)],
    )


# Below this many tokens a launch is dominated by its fixed cost: no tile is worth a search.
SHORT_SEQUENCE = 256


def _tile(config: Any) -> dict[str, int]:
    """A config's tile as the tile table writes it."""
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def _config(tile: dict[str, int], pre_hook: Callable[..., None] | None = None) -> Any:
    return triton.Config(
        {"BLOCK_M": tile["BLOCK_M"], "BLOCK_N": tile["BLOCK_N"]},
        num_warps=tile["num_warps"],
        num_stages=tile["num_stages"],
        pre_hook=pre_hook,
    )


def _pruner(
    fp32_config: Any, kernel: str, pre_hook: Callable[..., None] | None = None
) -> Callable[..., list[Any]]:
    """An ``early_config_prune`` that autotunes only where the search pays for itself.

    In order: float32 inputs (IEEE-precision dots: not Tensor Core speed, slow to compile, used for
    accuracy demos) run `fp32_config`, a small single-stage tile: IEEE dots unroll into
    FMAs, so compile time grows with the tile (on the H200, fresh cache, forward and
    backward at D=80: 54 s at 64 x 32 with 2 stages, 8 s at 32 x 16 with 1 stage, same
    error; ``benchmarks/results/h200-fp32-compile-2026-12-04.json``).
    ``MLINFRA_ATTENTION_AUTOTUNE=0`` in the environment keeps only the list's first config
    (tests on a GPU: one compile per shape class instead of a dozen).
    A shape with an entry in the committed tile table (`tile_table`: best of repeated
    measurements on this GPU) runs that tile: no search, the same tile in every run.
    Sequences of at most `SHORT_SEQUENCE` tokens run the list's first config. Each then
    costs one compile instead of one per config plus timing runs (a chapter cell with two
    fp32 shapes took 205 s on the H200 while autotuning). Everything else autotunes.
    """
    from mlinfra_lab.attention import tile_table

    def prune(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        args = {**named_args, **kwargs}
        if args.get("PRECISION") == "ieee":
            return [fp32_config]
        if os.environ.get("MLINFRA_ATTENTION_AUTOTUNE", "1") == "0":
            return configs[:1]
        q = getattr(args.get("Q"), "base", args.get("Q"))  # a tensor, or v3's descriptor
        if q is not None and q.is_cuda:
            tile = tile_table.lookup(
                kernel,
                torch.cuda.get_device_name(q.device),
                str(q.dtype).removeprefix("torch."),
                int(args["HEAD_DIM"]),
                bool(args["CAUSAL"]),
                max(int(args["n_q"]), int(args["n_k"])),
            )
            if tile is not None:
                return [_config(tile, pre_hook)]
        if max(int(args["n_q"]), int(args["n_k"])) <= SHORT_SEQUENCE:
            return configs[:1]
        return configs

    return prune


@cache
def kernels() -> dict[str, Any]:
    """The kernels, autotuned over `configs()` keyed on the shape that changes the best tile."""
    fwd_cfg, dkdv_cfg, dq_cfg = configs()
    key = ["n_q", "n_k", "HEAD_DIM", "CAUSAL", "PRECISION"]

    def tuned(
        cfgs: list[Any],
        fp32: tuple[int, int],
        kernel: Any,
        name: str,
        table: str | None = None,
        pre_hook: Callable[..., None] | None = None,
        reset_to_zero: list[str] | None = None,
    ) -> Any:
        fp32_config = triton.Config(
            {"BLOCK_M": fp32[0], "BLOCK_N": fp32[1]}, num_warps=4, num_stages=1, pre_hook=pre_hook
        )
        if pre_hook is not None:
            cfgs = [_config(_tile(c), pre_hook) for c in cfgs]
        pruner = _pruner(fp32_config, table or name, pre_hook)
        return triton.autotune(
            cfgs,
            key=key,
            prune_configs_by={"early_config_prune": pruner},
            reset_to_zero=reset_to_zero,
        )(kernel)

    return {  # fp32 tiles keep each kernel's constraint (see `configs`)
        "fwd": tuned(fwd_cfg, (32, 16), _fwd_kernel, "fwd"),
        # v4 is v1's kernel launched with OVERLAP=True, at v1's tiles (an A/B of the technique)
        "fwd_v4": tuned(fwd_cfg, (32, 16), _fwd_kernel, "fwd_v4", "fwd"),
        "fwd_v2": tuned(fwd_cfg, (32, 16), _fwd_kernel_v2, "fwd_v2"),
        # v3 runs the tile table's forward entries: the same tile as v1, no search
        "fwd_v3": tuned(fwd_cfg, (32, 16), _fwd_kernel_v3, "fwd_v3", "fwd", _v3_pre_hook),
        "delta": _bwd_delta_kernel,
        "dkdv": tuned(dkdv_cfg, (16, 32), _bwd_dkdv_kernel, "dkdv"),
        # the 5-matmul backward: the same kernel with DQ_ATOMIC=True; every config the search
        # times adds into DQ, so the autotuner zeroes it before each
        # (at the split backward's dK/dV tiles: an A/B of the technique at the same tile)
        "dkdv_dq": tuned(
            dkdv_cfg, (16, 32), _bwd_dkdv_kernel, "dkdv_dq", "dkdv", reset_to_zero=["DQ"]
        ),
        "dq": tuned(dq_cfg, (32, 16), _bwd_dq_kernel, "dq"),
    }
