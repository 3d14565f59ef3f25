"""The backward's two kernels written in Gluon (Hopper only): FlashAttention-2's split backward
with version 5's schedule.

Contract: `launch(do, q, k, v, lse, delta, causal, sm_scale, config)` returns
``(dq, dk, dv)`` exactly as `flash._backward` does with the Triton "split" kernels, for
contiguous bfloat16 or float16 ``[B, H, N, D]`` inputs with equal query and key lengths, ``N``
a multiple of the tiles and ``D`` in (64, 128), on a compute capability 9.x GPU, given the
forward's base-2 log-sum-exp and ``delta = rowsum(dO * O)``, both ``[B*H, N]`` float32. `unusable(...)` says why not (None when it can run);
`pick_config` is the measured per-shape table (None where the Triton kernels measured
faster). `flash._backward` runs it for the default backward where both say yes.

Design decisions (the kernels are in `_gluon_bwd_kernels`):
- Same algorithm and split as the Triton backward (a dK/dV kernel over key tiles, a dQ kernel
  over query tiles, each recomputing P from the LSE; no atomics), so the two are compared one
  for one and the Gluon kernels can stand in for the Triton ones shape by shape.
- dK/dV: K and V resident in shared memory; (Q, dO) tiles stream through a TMA ring behind
  mbarriers; S^T and dP^T issued back to back on the Tensor Cores, dV issued while dP^T may
  still run (``warpgroup_mma_wait(1)``), a slot refilled once its four matmuls are done.
  dQ: version 5's loop with the backward's algebra. delta = rowsum(dO * O) comes from the
  Triton kernel the split backward already uses (`flash._launch_delta`, which the caller
  runs: this module does not import flash).
- One tile configuration per shape class, from the experiment's four (the table's comment
  says which run); a causal diagonal tile must hold whole tiles of the other side
  (``BLOCK_N % BLOCK_M`` in dK/dV, ``BLOCK_M % BLOCK_N`` in dQ), else a program would wait
  for a tile forever: `shape_problem` refuses it.

Kernels compile for ``sm_90`` on any machine with Triton >= 3.6 (`compile_for_hopper`), which
is how a CPU test checks that they still build; they run only on a Hopper GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

from mlinfra_lab.attention._gluon_fwd import _has_gluon, _layout, _major

__all__ = [
    "BWD_TABLE",
    "GluonBwdConfig",
    "compile_for_hopper",
    "launch",
    "pick_config",
    "shape_problem",
    "unusable",
]

LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class GluonBwdConfig:
    """Tiles of the two Gluon backward kernels: ``(BLOCK_M, BLOCK_N, warps, STAGES)`` each."""

    dkdv: tuple[int, int, int, int] = (64, 64, 4, 2)
    dq: tuple[int, int, int, int] = (64, 64, 4, 2)

    @property
    def name(self) -> str:
        def part(kind: str, t: tuple[int, int, int, int]) -> str:
            return f"{kind}-m{t[0]}n{t[1]}w{t[2]}s{t[3]}"

        return f"{part('kv', self.dkdv)}.{part('q', self.dq)}"


# The configuration per (head dim, causal), by sequence length: (longest length, config), None
# where the Triton split kernels measured faster. From one H100 run of
# benchmarks/experiments/gluon_bwd_experiment.py (benchmarks/results/h100-gluon-bwd-2026-12-05.json,
# four configurations, all as accurate as the Triton kernels): 64x64 tiles with 4 warps in both
# kernels were the fastest or within 5% of it on 10 of 12 shapes, 1.01-1.33x the Triton split
# backward at D=128 and 1.04-1.21x at D=64; causal D=64 at 16k tokens ran 0.97x (Triton kept).
_BEST = GluonBwdConfig((64, 64, 4, 2), (64, 64, 4, 2))
BWD_TABLE: dict[tuple[int, bool], list[tuple[int, GluonBwdConfig | None]]] = {
    (64, False): [(1 << 30, _BEST)],
    (64, True): [(8192, _BEST), (1 << 30, None)],
    (128, False): [(1 << 30, _BEST)],
    (128, True): [(1 << 30, _BEST)],
}
FALLBACK_CONFIG = _BEST  # what an explicit ``backward="gluon"`` runs where the table says Triton
LAST_CONFIG: dict[str, str] = {}  # the configuration of the last launch (the benchmark reads it)


def pick_config(head_dim: int, causal: bool, n: int) -> GluonBwdConfig | None:
    """The table's configuration for this shape; None where the Triton kernels measured faster
    or the head dim has no entry."""
    for longest, cfg in BWD_TABLE.get((head_dim, causal), []):
        if n <= longest:
            return cfg
    return None


def unusable(
    q: torch.Tensor,
    k: torch.Tensor,
    do: torch.Tensor,
    causal: bool,
    config: GluonBwdConfig,
) -> str | None:
    """Why the Gluon backward cannot run on these inputs, or None when it can."""
    if not q.is_cuda or _major(q.device.index) != 9:
        return "it needs a Hopper GPU (compute capability 9.x)"
    if not _has_gluon():
        return "it needs Triton >= 3.6 (triton.experimental.gluon)"
    if any(t.data_ptr() % 16 for t in (q, k, do)):
        return "a tensor's base is not 16-byte aligned, which its TMA copies need"
    return shape_problem(tuple(q.shape), k.shape[-2], q.dtype, causal, config)


def shape_problem(
    shape: tuple[int, ...],
    n_k: int,
    dtype: torch.dtype,
    causal: bool,
    config: GluonBwdConfig,
) -> str | None:
    """The rules on shape, dtype and tiles alone (testable without a GPU): why the Gluon
    backward cannot take ``[B, H, N, D]`` queries against ``n_k`` keys, or None."""
    b, h, n, d = shape
    if dtype not in (torch.bfloat16, torch.float16):
        return f"dtype {dtype}: it handles bfloat16 and float16"
    if n == 0 or b * h > 65535 or b * h * n >= 2**31:
        return f"{b * h} heads of {n} tokens: outside its grid and copy-coordinate limits"
    if d not in (64, 128):
        return f"head dim {d}: it handles 64 and 128"
    if n_k != n:
        return "query and key lengths differ"
    (kv_m, kv_n, _, _), (q_m, q_n, _, _) = config.dkdv, config.dq
    if any(n % t for t in (kv_m, kv_n, q_m, q_n)):
        return f"length {n} is not a multiple of every tile of {config.name}"
    if causal and (kv_n % kv_m or q_m % q_n):
        # a diagonal program would own no whole tile of the other side and wait forever
        return "causal needs BLOCK_N % BLOCK_M == 0 (dK/dV) and BLOCK_M % BLOCK_N == 0 (dQ)"
    return None


@cache
def _kernels() -> tuple[Any, Any]:
    from mlinfra_lab.attention._gluon_bwd_kernels import attn_bwd_dkdv, attn_bwd_dq

    return attn_bwd_dkdv, attn_bwd_dq


def launch(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    causal: bool,
    sm_scale: float,
    config: GluonBwdConfig,
    empty_like: Callable[[torch.Tensor], torch.Tensor] = torch.empty_like,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (see the module doc), for a caller that has just run `unusable`; outputs
    come from `empty_like` (flash passes its own, which poisons them inside
    `flash.poisoned_buffers`)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    b, h, n, d = q.shape
    LAST_CONFIG["bwd"] = config.name
    (kv_m, kv_n, kv_w, kv_s), (q_m, q_n, q_w, q_s) = config.dkdv, config.dq
    rows = b * h * n
    dq, dk, dv = (empty_like(t) for t in (q, k, v))

    def desc(t: torch.Tensor, block_rows: int) -> TensorDescriptor:
        block = (block_rows, d)
        return TensorDescriptor(
            t.view(rows, d), [rows, d], [d, 1], list(block), _layout(block, t.dtype)
        )

    dkdv_kernel, dq_kernel = _kernels()
    qk_scale = sm_scale * LOG2E
    dkdv_kernel[(n // kv_n, b * h)](
        desc(q, kv_m),
        desc(k, kv_n),
        desc(v, kv_n),
        desc(do, kv_m),
        desc(dk, kv_n),
        desc(dv, kv_n),
        lse,
        delta,
        n,
        qk_scale,
        sm_scale,
        HEAD_DIM=d,
        BLOCK_M=kv_m,
        BLOCK_N=kv_n,
        STAGES=kv_s,
        CAUSAL=causal,
        num_warps=kv_w,
    )
    dq_kernel[(n // q_m, b * h)](
        desc(q, q_m),
        desc(k, q_n),
        desc(v, q_n),
        desc(do, q_m),
        desc(dq, q_m),
        lse,
        delta,
        n,
        qk_scale,
        sm_scale,
        HEAD_DIM=d,
        BLOCK_M=q_m,
        BLOCK_N=q_n,
        STAGES=q_s,
        CAUSAL=causal,
        num_warps=q_w,
    )
    return dq, dk, dv


def compile_for_hopper(
    head_dim: int, causal: bool, config: GluonBwdConfig, dtype: torch.dtype = torch.bfloat16
) -> dict[str, Any]:
    """Compile both kernels for sm_90 without a GPU (Triton's ahead-of-time path); returns
    ``{"dkdv": compiled, "dq": compiled}`` (``.asm['ptx']``, ``.metadata.shared``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    name = "bf16" if dtype == torch.bfloat16 else "fp16"

    def desc(r: int) -> str:
        return f"tensordesc<{name}[{r}, {head_dim}],{_layout((r, head_dim), dtype)!r}>"

    out = {}
    for kind, kernel, (bm, bn, warps, stages) in zip(
        ("dkdv", "dq"), _kernels(), (config.dkdv, config.dq), strict=True
    ):
        m_rows, n_rows = desc(bm), desc(bn)
        sig = {"q_desc": m_rows, "k_desc": n_rows, "v_desc": n_rows, "do_desc": m_rows}
        if kind == "dkdv":
            sig.update(dk_desc=n_rows, dv_desc=n_rows)
        else:
            sig.update(dq_desc=m_rows)
        sig.update(LSE="*fp32", DELTA="*fp32", n_ctx="i32", qk_scale="fp32", sm_scale="fp32")
        consts = dict(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, CAUSAL=causal)
        sig.update({key: "constexpr" for key in consts})
        out[kind] = triton.compile(
            GluonASTSource(kernel, sig, consts),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": warps},
        )
    return out
