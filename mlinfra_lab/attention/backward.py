"""The FlashAttention backward pass in plain PyTorch: gradients from the stored log-sum-exp.

Contract: ``tiled_attention_backward(q, k, v, out, lse, dout, causal, ...)`` returns
``(dq, dk, dv)`` of ``out = softmax(q k^T * scale) v`` for ``[B, H, N, D]`` inputs, given the
forward's output and its row log-sum-exp (`tiled_attention(..., return_lse=True)`), without
ever holding more than one ``block_m x block_n`` tile of scores. ``schedule="split"`` is the
order this package's Triton backward uses, ``schedule="fused"`` FlashAttention-2's.
`backward_delta(out, dout)` is the per-row term ``D = rowsum(dO * O)``.
`count_matmuls(fn)` counts the matrix multiplications a call performs.

The derivation (per head; ``s`` the softmax scale, ``L`` the stored log-sum-exp)::

    S = s Q K^T          P = exp(S - L)        O = P V
    dV = P^T dO          dP = dO V^T
    dS = P * (dP - D)    with D_i = sum_j P_ij dP_ij = sum_j P_ij (dO_i . V_j) = dO_i . O_i
    dQ = s dS K          dK = s dS^T Q

Design decisions:
- P is recomputed from Q, K and L, never stored: storing it would write and read back
  ``N x N`` values per head (`traffic.hbm_traffic_backward`), recomputing costs one extra
  ``Q K^T`` per tile, on Tensor Cores.
- ``D`` is computed once, before any tile, from O and dO (``N x D`` each): the softmax's
  Jacobian needs ``sum_j P_ij dP_ij``, which would otherwise need a whole row of dP.
- dK and dV belong to a key tile, dQ to a query tile, so one loop order cannot make all
  three local. ``split`` runs two passes: per key tile over every query tile (dK, dV; 4
  matmuls a tile pair: QK^T, P^T dO, dO V^T, dS^T Q) then per query tile over every key tile
  (dQ; 3 more: QK^T, dO V^T, dS K), 7 in all and no shared writes. ``fused`` makes one pass
  per key tile and adds each tile's share of dQ into a float32 buffer that every key tile
  writes (on a GPU, atomic adds): 5 matmuls a tile pair.
- Statistics and accumulators in float32 (float64 inputs stay float64, for references).

References: Dao, "FlashAttention-2" (2023), Algorithm 2; Dao et al., "FlashAttention" (2022),
appendix B.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mlinfra_lab import runtime
from mlinfra_lab.attention._checks import AttentionInputError, check_attention_inputs

__all__ = ["SCHEDULES", "backward_delta", "count_matmuls", "tiled_attention_backward"]

SCHEDULES = ("split", "fused")


def backward_delta(out: torch.Tensor, dout: torch.Tensor) -> torch.Tensor:
    """``D = rowsum(dO * O)``, ``[B, H, N]``, in float32 (float64 for float64 inputs)."""
    acc_t = torch.promote_types(out.dtype, torch.float32)
    return (out.to(acc_t) * dout.to(acc_t)).sum(dim=-1)


def _tile_p(
    qi: torch.Tensor,
    kj: torch.Tensor,
    lse_i: torch.Tensor,
    scale: float,
    causal: bool,
    i0: int,
    j0: int,
) -> torch.Tensor:
    """P of one tile, recomputed from the log-sum-exp; masked entries are exactly 0."""
    s = (qi @ kj.transpose(-2, -1)) * scale  # (B, H, bm, bn)
    p = torch.exp(s - lse_i[..., None])
    if causal and j0 + kj.shape[-2] - 1 > i0:  # the tile crosses the diagonal
        rows = torch.arange(i0, i0 + qi.shape[-2], device=qi.device)[:, None]
        cols = torch.arange(j0, j0 + kj.shape[-2], device=qi.device)[None, :]
        p = p.masked_fill(cols > rows, 0.0)
    return p


def _visible(causal: bool, i0: int, bm: int, j0: int) -> bool:
    """Whether query tile ``[i0, i0+bm)`` sees any key of the tile starting at `j0`."""
    return not causal or j0 <= i0 + bm - 1


def tiled_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    block_m: int = 64,
    block_n: int = 64,
    schedule: str = "split",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` in the input dtype; `lse` is the natural-log row log-sum-exp of the
    scaled scores, ``[B, H, Nq]``, as `tiled_attention(..., return_lse=True)` returns it."""
    b, h, n_q, n_k, d = check_attention_inputs(q, k, v, causal)
    for name, t, shape in (
        ("out", out, q.shape),
        ("dout", dout, q.shape),
        ("lse", lse, q.shape[:3]),
    ):
        if tuple(t.shape) != tuple(shape):
            raise AttentionInputError(
                f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}: pass the forward's "
                "output, the gradient of the loss with respect to it, and its log-sum-exp"
            )
    for name, blk in (("block_m", block_m), ("block_n", block_n)):
        if not isinstance(blk, int) or blk < 1:
            raise AttentionInputError(f"{name} must be a positive int, got {blk!r}")
    if schedule not in SCHEDULES:
        raise AttentionInputError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    acc_t = torch.promote_types(q.dtype, torch.float32)
    qf, kf, vf, dof = (t.to(acc_t) for t in (q, k, v, dout))
    lse_f = lse.to(acc_t)
    delta = backward_delta(out, dout).to(acc_t)  # (B, H, Nq): one pass over O and dO
    dq = torch.zeros(b, h, n_q, d, dtype=acc_t, device=q.device)
    dk = torch.zeros(b, h, n_k, d, dtype=acc_t, device=q.device)
    dv = torch.zeros(b, h, n_k, d, dtype=acc_t, device=q.device)

    # Pass 1 (both schedules): one key tile at a time, its dK and dV stay "on chip".
    for j0 in range(0, n_k, block_n):
        j1 = min(j0 + block_n, n_k)
        kj, vj = kf[:, :, j0:j1], vf[:, :, j0:j1]  # (B, H, bn, D)
        dk_j = torch.zeros_like(kj)
        dv_j = torch.zeros_like(vj)
        for i0 in range(0, n_q, block_m):
            i1 = min(i0 + block_m, n_q)
            if not _visible(causal, i0, i1 - i0, j0):
                continue
            qi, doi = qf[:, :, i0:i1], dof[:, :, i0:i1]
            p = _tile_p(qi, kj, lse_f[:, :, i0:i1], scale, causal, i0, j0)  # (B, H, bm, bn)
            dv_j += p.transpose(-2, -1) @ doi
            dp = doi @ vj.transpose(-2, -1)
            ds = p * (dp - delta[:, :, i0:i1, None])
            dk_j += ds.transpose(-2, -1) @ qi
            if schedule == "fused":  # this key tile's share of dQ: an atomic add on a GPU
                dq[:, :, i0:i1] += ds @ kj
        dk[:, :, j0:j1] = dk_j * scale
        dv[:, :, j0:j1] = dv_j

    # Pass 2 (split only): one query tile at a time, its dQ accumulated without sharing.
    if schedule == "split":
        for i0 in range(0, n_q, block_m):
            i1 = min(i0 + block_m, n_q)
            qi, doi = qf[:, :, i0:i1], dof[:, :, i0:i1]
            dq_i = torch.zeros_like(qi)
            for j0 in range(0, n_k, block_n):
                if not _visible(causal, i0, i1 - i0, j0):
                    break
                kj, vj = kf[:, :, j0 : j0 + block_n], vf[:, :, j0 : j0 + block_n]
                p = _tile_p(qi, kj, lse_f[:, :, i0:i1], scale, causal, i0, j0)
                dp = doi @ vj.transpose(-2, -1)
                dq_i += (p * (dp - delta[:, :, i0:i1, None])) @ kj
            dq[:, :, i0:i1] = dq_i
    dq *= scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


_MATMULS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.baddbmm.default,
}


class _MatmulCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        if func in _MATMULS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def count_matmuls(fn: Callable[[], Any]) -> int:
    """How many matrix multiplications (``mm``/``bmm`` and their fused-add forms, as ATen
    dispatches them) one call of ``fn()`` performs."""
    # A dispatch mode imports torch's compiler stack, which imports triton: on a machine
    # without a GPU the interpreter must be switched on first, as the kernels need it.
    if "triton" not in sys.modules:  # already imported: nothing left to switch
        runtime.ensure_triton_mode()
    with _MatmulCounter() as counter:
        fn()
    return counter.count
