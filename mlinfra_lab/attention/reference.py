"""Attention in plain PyTorch: the unfused version, the online softmax and FlashAttention-2.

Contract: `naive_attention`, `online_softmax` and `tiled_attention` compute exactly what
their names say, readably and on any device; they are the references the Triton kernel
is checked against and the code the chapter and the lab walk through.

Design decisions:
- `naive_attention` materialises the ``[seq_q, seq_k]`` score matrix three times (scores,
  probabilities, then read again by ``P @ V``): that round trip through device memory is
  the cost fusion removes (see `traffic.hbm_traffic`). It computes in the input dtype, as
  an eager model would, so "the same-dtype eager error" is its error.
- `online_softmax` streams over blocks of the last axis, keeping a running max ``m`` and
  a running sum ``l`` that are rescaled by ``exp(m_old - m_new)`` whenever a larger value
  appears; `online_softmax_trace` returns those states for plotting.
- `tiled_attention` is the FlashAttention-2 forward: the outer loop over query blocks,
  the inner loop over key blocks, softmax statistics and the accumulator in float32, one
  division by ``l`` at the end, and (causal) key blocks above the diagonal never visited.
  With ``return_lse`` it also returns the row log-sum-exp, the one number per row that a
  backward pass needs to recompute the probabilities.

Caveats: these loops run in Python and are slow for long sequences; they are for
understanding and testing, not for training.

References: Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018);
Dao, "FlashAttention-2" (2023), Algorithm 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mlinfra_lab.attention._checks import AttentionInputError, check_attention_inputs

__all__ = [
    "OnlineSoftmaxState",
    "naive_attention",
    "online_softmax",
    "online_softmax_trace",
    "tiled_attention",
]


def _scale(sm_scale: float | None, head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Unfused attention ``softmax(q k^T * scale) v`` in the input dtype; ``[B, H, N, D]``.

    Bytes moved on a GPU, per (batch, head): read Q, K (2ND), write S (N^2), read S and
    write P (2N^2), read P and V (N^2 + ND), write O (ND), all times the element size.
    """
    _, _, n_q, n_k, d = check_attention_inputs(q, k, v, causal)
    s = (q @ k.transpose(-2, -1)) * _scale(sm_scale, d)  # (B, H, Nq, Nk): written to HBM
    if causal:
        mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, dim=-1)  # read S, write P: the second round trip
    return p @ v  # read P again


@dataclass(frozen=True)
class OnlineSoftmaxState:
    """The running statistics after one block: what the chapter plots step by step."""

    step: int  # blocks consumed so far
    end: int  # index one past the last element consumed
    m: torch.Tensor  # running max, (..., )
    l: torch.Tensor  # noqa: E741  running sum of exp(x - m), (..., )


def _check_block(block: int) -> None:
    if not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")


def online_softmax_trace(
    x: torch.Tensor, block: int, stats_dtype: torch.dtype = torch.float32
) -> list[OnlineSoftmaxState]:
    """The (m, l) state after each block of the last axis, kept in ``stats_dtype``.

    Float32 is what the kernels use; ``stats_dtype=torch.float16`` shows why (the
    chapter measures the error of a float16 running sum over long rows).

    ``l`` is always relative to the current ``m``: when a block brings a new maximum,
    the old sum is multiplied by ``exp(m_old - m_new)`` (the correction) before the new
    block's terms are added.
    """
    _check_block(block)
    xf = x.to(stats_dtype)
    m = torch.full(xf.shape[:-1], float("-inf"), dtype=stats_dtype, device=x.device)
    l = torch.zeros(xf.shape[:-1], dtype=stats_dtype, device=x.device)  # noqa: E741
    states = []
    for step, start in enumerate(range(0, xf.shape[-1], block), 1):
        xb = xf[..., start : start + block]
        m_new = torch.maximum(m, xb.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(xb - m_new[..., None]).sum(dim=-1)  # noqa: E741
        m = m_new
        states.append(OnlineSoftmaxState(step, min(start + block, xf.shape[-1]), m, l))
    return states


def online_softmax(
    x: torch.Tensor, block: int, stats_dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Softmax over the last axis, reading it ``block`` elements at a time.

    The first pass keeps only the running max and sum (one pass, no stored row), the
    second writes ``exp(x - m) / l``. Returns the input dtype; statistics (and the final
    exponentials) are computed in ``stats_dtype``, float32 by default.
    """
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"online_softmax needs a non-empty last axis, got shape {tuple(x.shape)}")
    final = online_softmax_trace(x, block, stats_dtype)[-1]
    return (torch.exp(x.to(stats_dtype) - final.m[..., None]) / final.l[..., None]).to(x.dtype)


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    block_m: int = 64,
    block_n: int = 64,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-2 forward in PyTorch: tiles of ``block_m`` queries x ``block_n`` keys.

    Returns the output in the input dtype, and with ``return_lse`` also the row log-sum-exp
    ``[B, H, Nq]`` (natural log, of the scaled scores) in float32, or float64 for float64
    inputs (the precision the backward recomputes P with).
    Bytes moved: Q and O once, K and V once per query block, no score matrix at all.
    """
    _, _, n_q, n_k, d = check_attention_inputs(q, k, v, causal)
    for name, blk in (("block_m", block_m), ("block_n", block_n)):
        if not isinstance(blk, int) or blk < 1:
            raise AttentionInputError(f"{name} must be a positive int, got {blk!r}")
    scale = _scale(sm_scale, d)
    acc_t = torch.promote_types(q.dtype, torch.float32)  # float32, or float64 for a reference
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=acc_t, device=q.device)
    for i0 in range(0, n_q, block_m):
        i1 = min(i0 + block_m, n_q)
        qi = q[:, :, i0:i1].to(acc_t) * scale  # (B, H, bm, D), on chip
        m = torch.full(qi.shape[:3], float("-inf"), dtype=acc_t, device=q.device)  # running max
        l = torch.zeros(qi.shape[:3], dtype=acc_t, device=q.device)  # noqa: E741  running sum
        acc = torch.zeros(qi.shape, dtype=acc_t, device=q.device)  # unnormalised output
        # Causal: keys past the last query of this block are all masked; skip them.
        hi = min(i1, n_k) if causal else n_k
        for j0 in range(0, hi, block_n):
            j1 = min(j0 + block_n, n_k)
            s = qi @ k[:, :, j0:j1].to(acc_t).transpose(-2, -1)  # (B, H, bm, bn)
            if causal and j1 > i0:  # only tiles that touch the diagonal need a mask
                rows = torch.arange(i0, i1, device=q.device)[:, None]
                cols = torch.arange(j0, j1, device=q.device)[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            alpha = torch.exp(m - m_new)  # correction of the old statistics
            p = torch.exp(s - m_new[..., None])
            l = l * alpha + p.sum(dim=-1)  # noqa: E741
            acc = acc * alpha[..., None] + p.to(v.dtype).to(acc_t) @ v[:, :, j0:j1].to(acc_t)
            m = m_new
        out[:, :, i0:i1] = (acc / l[..., None]).to(q.dtype)
        lse[:, :, i0:i1] = m + torch.log(l)
    return (out, lse) if return_lse else out
