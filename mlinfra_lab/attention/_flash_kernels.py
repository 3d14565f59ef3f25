"""The Triton kernels of `flash.py`; imported on first use, after the interpreter switch.

Contract: `kernels()` returns the forward, delta, dK/dV and dQ kernels, the three big ones
wrapped in autotuners whose tile configs suit the device found (`configs()`, from
`_flash_configs`). This file is the whole taught path on the GPU: the forward (`_fwd_inner`,
`_fwd_kernel`) and the split backward (`_bwd_delta_kernel`, `_dkdv_inner`,
`_bwd_dkdv_kernel`, `_dq_inner`, `_bwd_dq_kernel`).

Design decisions (the full list is in `flash.py`'s docstring):
- This module imports triton at its top, so `flash.py` imports it only inside its
  launchers: importing `mlinfra_lab.attention` stays cheap, and on a machine without a GPU
  `runtime.ensure_triton_mode()` has switched the CPU interpreter on before triton loads.
- Every loop comes in a masked and an unmasked flavour (the ``MASKED`` constexpr): the
  compiler removes the masks from the full tiles, where they would only cost instructions.
- Pointers are plain ``base + row * stride + col`` with masks (no block pointers or tensor
  descriptors), which every GPU generation accepts and the interpreter runs. The TMA
  descriptor versions (2, 3), the early-QK^T version (4) and the atomic backward were removed
  after losing on the H200; their code is in git commit 687b216 (`flash.py`'s docstring).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from mlinfra_lab import runtime

runtime.ensure_triton_mode()

import triton  # noqa: E402  (after the interpreter switch, deliberately)
import triton.language as tl  # noqa: E402

from mlinfra_lab.attention._flash_configs import (  # noqa: E402
    SHORT_SEQUENCE,
    _pruner,
    configs,
    configs_for,
)

__all__ = ["SHORT_SEQUENCE", "configs", "configs_for", "kernels"]

# The kernels below are laid out as Triton's tutorials are: argument lists packed, not one
# name per line (the formatter is off between the two markers).
# fmt: off


@triton.jit
def _fwd_inner(
    acc, l_i, m_i, q, k_base, v_base, offs_m, lo, hi, n_k, qk_scale, stride_n, BLOCK_N:
    tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL:
    tl.constexpr, PRECISION: tl.constexpr,
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


@triton.jit
def _fwd_kernel(
    Q, K, V, Out, LSE, n_q, n_k, qk_scale, stride_bh_q, stride_bh_k, stride_n, CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
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
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, offs_m, 0, lo_masked, n_k, qk_scale, stride_n, BLOCK_N,
        BLOCK_D, HEAD_DIM, False, CAUSAL, PRECISION,
    )
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, offs_m, lo_masked, hi_masked, n_k, qk_scale, stride_n,
        BLOCK_N, BLOCK_D, HEAD_DIM, True, CAUSAL, PRECISION,
    )
    acc = acc / l_i[:, None]
    tl.store(LSE + off_bh * n_q + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < n_q)
    tl.store(
        Out + off_bh * stride_bh_q + offs_m[:, None] * stride_n + offs_d[None, :],
        acc.to(Out.dtype.element_ty), mask=q_mask,
    )


# ---- Backward ----
# `_bwd_dkdv_kernel` (per key tile) and `_bwd_dq_kernel` (per query tile) each recompute P:
# 7 matmuls, no atomics (flash.py's "split" backward).


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
    dk, dv, k, v, q_base, do_base, lse_base, delta_base, offs_n, lo, hi, n_q, qk_scale, stride_n,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
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
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, n_q, n_k, qk_scale, sm_scale, stride_bh_q, stride_bh_k,
    stride_n, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M:
    tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):
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
    full_hi = n_q - n_q % BLOCK_M
    if CAUSAL:  # queries below this key tile: first the diagonal tiles, masked
        dk, dv = _dkdv_inner(
            dk, dv, k, v, q_base, do_base, lse_base, delta_base, offs_n, start_n, tl.minimum(start_n
            + BLOCK_N, n_q), n_q, qk_scale, stride_n, BLOCK_M, BLOCK_D, HEAD_DIM, True, CAUSAL,
            PRECISION,
        )
        body_lo = start_n + BLOCK_N
    else:
        body_lo = 0
    dk, dv = _dkdv_inner(
        dk, dv, k, v, q_base, do_base, lse_base, delta_base, offs_n, body_lo, full_hi, n_q,
        qk_scale, stride_n, BLOCK_M, BLOCK_D, HEAD_DIM, False, CAUSAL, PRECISION,
    )
    dk, dv = _dkdv_inner(
        dk, dv, k, v, q_base, do_base, lse_base, delta_base, offs_n, tl.maximum(body_lo, full_hi),
        n_q, n_q, qk_scale, stride_n, BLOCK_M, BLOCK_D, HEAD_DIM, True, CAUSAL, PRECISION,
    )
    tl.store(DK + kv_off, (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + kv_off, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_inner(
    dq, q, do, lse, delta, k_base, v_base, offs_m, lo, hi, n_k, qk_scale, stride_n, BLOCK_N:
    tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL:
    tl.constexpr, PRECISION: tl.constexpr,
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
    Q, K, V, DO, LSE, DELTA, DQ, n_q, n_k, qk_scale, sm_scale, stride_bh_q, stride_bh_k, stride_n,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
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
        dq, q, do, lse, delta, k_base, v_base, offs_m, 0, lo_masked, n_k, qk_scale, stride_n,
        BLOCK_N, BLOCK_D, HEAD_DIM, False, CAUSAL, PRECISION,
    )
    dq = _dq_inner(
        dq, q, do, lse, delta, k_base, v_base, offs_m, lo_masked, hi_masked, n_k, qk_scale,
        stride_n, BLOCK_N, BLOCK_D, HEAD_DIM, True, CAUSAL, PRECISION,
    )
    tl.store(DQ + q_off, (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_mask)


# fmt: on


@cache
def kernels() -> dict[str, Any]:
    """The kernels, autotuned over `configs()` keyed on the shape that changes the best tile."""
    fwd_cfg, dkdv_cfg, dq_cfg = configs()
    key = ["n_q", "n_k", "HEAD_DIM", "CAUSAL", "PRECISION"]

    def tuned(cfgs: list[Any], fp32: tuple[int, int], kernel: Any, name: str) -> Any:
        fp32_config = triton.Config(
            {"BLOCK_M": fp32[0], "BLOCK_N": fp32[1]}, num_warps=4, num_stages=1
        )
        return triton.autotune(
            cfgs, key=key, prune_configs_by={"early_config_prune": _pruner(fp32_config, name)}
        )(kernel)

    return {  # fp32 tiles keep each kernel's constraint (see `configs`)
        "fwd": tuned(fwd_cfg, (32, 16), _fwd_kernel, "fwd"),
        "delta": _bwd_delta_kernel,
        "dkdv": tuned(dkdv_cfg, (16, 32), _bwd_dkdv_kernel, "dkdv"),
        "dq": tuned(dq_cfg, (32, 16), _bwd_dq_kernel, "dq"),
    }
