"""Counting work: the bytes attention moves through device memory, and its FLOPs.

Contract: `hbm_traffic(...)` returns the bytes that unfused or fused attention reads
and writes in HBM; `attention_flops(...)` the floating-point operations that benchmarks
divide by time (the FlashAttention papers' convention).

Design decisions:
- Unfused (three kernels: ``S = QK^T``, ``P = softmax(S)``, ``O = PV``): each kernel
  reads its inputs from HBM and writes its output back, so the ``N x N`` matrix is
  written twice and read twice. Fused: Q, K, V read and O written, once each, which is
  the floor. A real fused kernel re-reads K and V once per query block; pass
  ``block_m`` to count those re-reads (most of them hit L2 on a GPU, so the truth lies
  between the two counts).
- The backward (`hbm_traffic_backward`): a fused backward reads Q, K, V, O and dO, the
  float32 log-sum-exp ``L`` and writes and reads the float32 row term ``D = rowsum(dO * O)``,
  and writes dQ, dK and dV; it recomputes P from Q, K and L. The alternative it is compared
  with, ``store_p=True``, keeps P from the forward: the forward writes ``N x N`` values per
  head and the backward reads them back, in place of L. The unfused backward of autograd
  does at least that.
- FLOPs: ``4 * B * H * Nq * Nk * D`` for the two matmuls, halved when causal; the
  backward counts 2.5 times the forward (five matmuls against two).
"""

from __future__ import annotations

__all__ = [
    "attention_flops",
    "hbm_traffic",
    "hbm_traffic_backward",
    "hbm_traffic_backward_breakdown",
    "hbm_traffic_breakdown",
]

STATS_BYTES = 4  # the log-sum-exp and D are float32 whatever the input dtype


def _positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def hbm_traffic_breakdown(
    batch: int,
    heads: int,
    seq: int,
    head_dim: int,
    dtype_bytes: int,
    fused: bool,
    block_m: int | None = None,
) -> dict[str, int]:
    """Bytes per step, e.g. ``{"read Q, K": ..., "write S": ...}``; see `hbm_traffic`."""
    _positive(batch=batch, heads=heads, seq=seq, head_dim=head_dim, dtype_bytes=dtype_bytes)
    bh = batch * heads
    nd = bh * seq * head_dim * dtype_bytes  # one of Q, K, V or O
    nn = bh * seq * seq * dtype_bytes  # the score (or probability) matrix
    if not fused:
        return {
            "read Q, K": 2 * nd,
            "write S": nn,
            "read S": nn,
            "write P": nn,
            "read P, V": nn + nd,
            "write O": nd,
        }
    if block_m is None:
        return {"read Q, K, V": 3 * nd, "write O": nd}
    _positive(block_m=block_m)
    passes = -(-seq // block_m)  # every query block streams all of K and V
    return {"read Q": nd, "read K, V (per query block)": 2 * nd * passes, "write O": nd}


def hbm_traffic(
    batch: int,
    heads: int,
    seq: int,
    head_dim: int,
    dtype_bytes: int,
    fused: bool,
    block_m: int | None = None,
) -> int:
    """Bytes the forward pass moves through HBM, unfused (``fused=False``) or fused.

    Unfused: ``4*B*H*N*D*b + 4*B*H*N^2*b``, quadratic in N. Fused: ``4*B*H*N*D*b``,
    linear in N (or with K/V re-reads counted, when ``block_m`` is given).
    """
    return sum(
        hbm_traffic_breakdown(batch, heads, seq, head_dim, dtype_bytes, fused, block_m).values()
    )


def hbm_traffic_backward_breakdown(
    batch: int, heads: int, seq: int, head_dim: int, dtype_bytes: int, store_p: bool
) -> dict[str, int]:
    """Bytes of the backward pass (and, with ``store_p``, of the forward's extra write of P)
    per step, e.g. ``{"read Q, K, V, O, dO": ..., "write P (forward)": ...}``."""
    _positive(batch=batch, heads=heads, seq=seq, head_dim=head_dim, dtype_bytes=dtype_bytes)
    bh = batch * heads
    nd = bh * seq * head_dim * dtype_bytes
    rows = bh * seq * STATS_BYTES  # one float32 per row
    steps = {
        "read Q, K, V, O, dO": 5 * nd,
        "write and read D": 2 * rows,
        "write dQ, dK, dV": 3 * nd,
    }
    if store_p:
        nn = bh * seq * seq * dtype_bytes
        return {**steps, "write P (forward)": nn, "read P": nn}
    return {**steps, "read L": rows}


def hbm_traffic_backward(
    batch: int, heads: int, seq: int, head_dim: int, dtype_bytes: int, store_p: bool
) -> int:
    """Bytes the backward moves through HBM: linear in N when P is recomputed from the
    log-sum-exp, ``+ 2*B*H*N^2*b`` when the forward stores P for it (``store_p=True``)."""
    return sum(
        hbm_traffic_backward_breakdown(batch, heads, seq, head_dim, dtype_bytes, store_p).values()
    )


def attention_flops(
    batch: int,
    heads: int,
    seq_q: int,
    seq_k: int,
    head_dim: int,
    causal: bool,
    mode: str = "fwd",
) -> float:
    """FLOPs of attention: ``4*B*H*Nq*Nk*D``, halved if causal, x2.5 for ``mode="bwd"``."""
    _positive(batch=batch, heads=heads, seq_q=seq_q, seq_k=seq_k, head_dim=head_dim)
    flops = 4.0 * batch * heads * seq_q * seq_k * head_dim
    if causal:
        flops /= 2
    factors = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}
    if mode not in factors:
        raise ValueError(f"mode must be one of {sorted(factors)}, got {mode!r}")
    return flops * factors[mode]
