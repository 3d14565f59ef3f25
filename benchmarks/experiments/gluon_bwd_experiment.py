"""Next step for the backward, not yet run on a GPU: FlashAttention's backward in Gluon.

Status: written and compiled for sm_90 on a CPU (`--compile-only`, which also runs ptxas on
every kernel and reports registers, spills and the SASS schedule); never run. The SASS keeps
the dK/dV kernel's exp2s under the in-flight dP^T in every configuration (Triton 3.6's
ptxas), unlike version 5's forward at its table tile; the causal 8-warp 64x128 dK/dV tiles
spill inside the loop, the 32x128 one does not. Nothing in the package uses it.
The first GPU call that has time for it runs::

    python benchmarks/experiments/gluon_bwd_experiment.py --out bwd.json    # on the H200
    python benchmarks/experiments/gluon_bwd_experiment.py --compile-only    # any machine

Why: the Triton backward (``flash._backward``, "split": a dK/dV kernel and a dQ kernel,
7 matmuls) runs at 0.74-0.76x cuDNN at D=128 on the H200; issue 13 asks for 0.85x. Version 5
showed what Gluon buys the forward (1.13-1.37x version 1 at D=128): matmuls issued
asynchronously where the kernel says, tiles streamed by TMA into rings behind mbarriers.
This script applies the same schedule to the backward's two kernels and keeps the split
(no atomics), so the two are compared one for one with the Triton kernels they would
replace.

- ``attn_bwd_dkdv``: one program per BLOCK_N keys of one head, K and V in shared memory
  for the whole program; query tiles (Q, dO) stream through a ring of STAGES slots. Per tile,
  transposed as in FA2/FA3 so dK and dV accumulate in place: S^T = K Q^T and dP^T = V dO^T
  issued back to back (async); wait for S^T only, P^T = exp2(S^T * scale*log2e - lse), then
  dV += P^T dO issued while dP^T may still run; wait for dP^T, dS^T = P^T (dP^T - delta),
  dK += dS^T Q; the slot is refilled once both of its matmuls are done. dK is scaled once at
  the end, and dK, dV leave by TMA through K's and V's buffers.
- ``attn_bwd_dq``: version 5's forward loop with the backward's algebra: Q and dO loaded
  once, K and V tiles in rings; S = Q K^T and dP = dO V^T issued together, P and dS
  as above, dQ += dS K.
- delta = rowsum(dO * O) comes from the Triton kernel the split backward already uses.
- Causal programs run heaviest first; only tiles on the diagonal are masked.
- Shape rules as version 5's (bf16/fp16, D 64/128, N a multiple of every tile, and for
  causal the diagonal tile must hold whole tiles of the other side: BLOCK_N % BLOCK_M == 0
  in dK/dV, BLOCK_M % BLOCK_N == 0 in dQ; the forward's hang came from breaking that rule).

Prediction (written before any run): at D=128 the Gluon dK/dV kernel 1.15-1.35x the Triton
one and the dQ kernel 1.1-1.3x, so the whole backward 0.85-0.95x cuDNN at N >= 4k (the Triton
split backward measured 0.74-0.76x), since version 5's schedule gave the forward 1.13-1.37x.
Risks, from the sm_90 build on a CPU: the 8-warp dK/dV kernel at D=128 holds two float32
accumulators and two scores tiles in 248-255 registers a thread (32-48 bytes spilled when
causal), one program per SM; the S^T/dP^T pair in flight costs 32 registers more than issuing
them one at a time.

Checks (each configuration in a child process with a time limit: a wrong barrier phase
hangs a kernel, and a hung kernel cannot be interrupted from Python): dQ, dK, dV against a
float32 autograd reference on a few shapes, next to the Triton split backward's own error
on the same inputs; a configuration passes when its worst error is at most twice the Triton
kernel's plus 1e-3 (so it is as accurate as the kernel the test suite accepts) and
no gradient holds a NaN (outputs start as NaN, so an element never written shows).
Timings: the backward alone at D 64 and 128, N 1k-16k, causal and not, the benchmark's
sweep (16k tokens x 2048 features): each configuration, the Triton split backward (launched
the same way, without autograd), and cuDNN through autograd (as the benchmark times it).
"""

# ruff: noqa: ANN001 (Gluon reads the kernels' annotations: only constexprs carry one)

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from child_checks import check_in_children, run_header, write_json  # this folder's helpers
from sm90_report import ptxas_report  # this folder's helper
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from mlinfra_lab.attention._gluon_kernels import _tma_load, _tma_store, wgmma_layout
from mlinfra_lab.attention.machine_code import disassemble, schedule

LOG2E = 1.4426950408889634
TOKENS, FEATURES = 16384, 2048

# (name, dK/dV: BLOCK_M, BLOCK_N, warps, STAGES; dQ: BLOCK_M, BLOCK_N, warps, STAGES)
CONFIGS = [
    ("kv-m64n128w8s2.q-m128n64w8s2", (64, 128, 8, 2), (128, 64, 8, 2)),
    ("kv-m64n128w8s3.q-m128n64w8s3", (64, 128, 8, 3), (128, 64, 8, 3)),
    ("kv-m64n64w4s2.q-m64n64w4s2", (64, 64, 4, 2), (64, 64, 4, 2)),
    ("kv-m32n128w8s3.q-m128n128w8s2", (32, 128, 8, 3), (128, 128, 8, 2)),
]


@gluon.jit
def _load_pair(desc_a, desc_b, row, bars, bufs_a, bufs_b, t, n_tiles, STAGES: gl.constexpr):
    """Start the TMA copies of tile t of two tensors (if it exists) into ring slot t % STAGES,
    both completing one barrier."""
    BLOCK: gl.constexpr = desc_a.block_type.shape[0]
    slot = t % STAGES
    pred = t < n_tiles
    bar = bars.index(slot)
    mbarrier.expect(bar, desc_a.block_type.nbytes + desc_b.block_type.nbytes, pred=pred)
    _tma_load(desc_a, [row + t * BLOCK, 0], bar, bufs_a.index(slot), pred=pred)
    _tma_load(desc_b, [row + t * BLOCK, 0], bar, bufs_b.index(slot), pred=pred)


@gluon.jit
def attn_bwd_dkdv(  # noqa: ANN201 (a kernel returns nothing)
    q_desc,
    k_desc,
    v_desc,
    do_desc,
    dk_desc,
    dv_desc,
    LSE,
    DELTA,
    n_ctx,
    qk_scale,
    sm_scale,
    HEAD_DIM: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    dtype: gl.constexpr = q_desc.dtype
    st_layout: gl.constexpr = wgmma_layout(NUM_WARPS, BLOCK_M)  # S^T, dP^T: [BLOCK_N, BLOCK_M]
    kv_layout: gl.constexpr = wgmma_layout(NUM_WARPS, HEAD_DIM)  # dK, dV: [BLOCK_N, HEAD_DIM]
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    key_rows: gl.constexpr = gl.SliceLayout(1, st_layout)
    query_cols: gl.constexpr = gl.SliceLayout(0, st_layout)

    off_n = gl.program_id(0) * BLOCK_N  # causal: program 0 (most queries) first
    off_bh = gl.program_id(1)
    row0 = off_bh * n_ctx
    lo = off_n if CAUSAL else 0  # queries before this key tile see none of it (causal)
    n_tiles = (n_ctx - lo) // BLOCK_M

    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()

    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    _tma_load(k_desc, [row0 + off_n, 0], kv_bar, k_smem)
    _tma_load(v_desc, [row0 + off_n, 0], kv_bar, v_smem)
    for i in gl.static_range(STAGES):
        _load_pair(q_desc, do_desc, row0 + lo, bars, q_smem, do_smem, i, n_tiles, STAGES)

    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, layout=kv_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, layout=kv_layout)
    st_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=st_layout)
    keys = off_n + gl.arange(0, BLOCK_N, layout=key_rows)
    mbarrier.wait(kv_bar, 0)

    for t in range(n_tiles):
        slot = t % STAGES
        off_m = lo + t * BLOCK_M
        queries = off_m + gl.arange(0, BLOCK_M, layout=query_cols)
        lse = gl.load(LSE + row0 + queries)  # global loads, in flight under the matmuls
        delta = gl.load(DELTA + row0 + queries)
        mbarrier.wait(bars.index(slot), (t // STAGES) & 1)
        qt = q_smem.index(slot).permute((1, 0))
        st = warpgroup_mma(k_smem, qt, st_zero, use_acc=False, is_async=True)
        dot = do_smem.index(slot).permute((1, 0))
        dpt = warpgroup_mma(v_smem, dot, st_zero, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(1, deps=(st,))  # S^T done; dP^T may still run
        pt = gl.exp2(st * qk_scale - lse[None, :])
        if CAUSAL:
            if off_m < off_n + BLOCK_N:  # a diagonal tile: a query sees keys up to itself
                pt = gl.where(queries[None, :] >= keys[:, None], pt, 0.0)
        pt_op = gl.convert_layout(pt.to(dtype), op_layout)
        dv = warpgroup_mma(pt_op, do_smem.index(slot), dv, is_async=True)
        dpt = warpgroup_mma_wait(1, deps=(dpt,))  # dP^T done; dV may still run
        dst = pt * (dpt - delta[None, :])
        dst_op = gl.convert_layout(dst.to(dtype), op_layout)
        dk = warpgroup_mma(dst_op, q_smem.index(slot), dk, is_async=True)
        # P^T and dS^T are register operands the Tensor Cores read asynchronously: naming them
        # here keeps their registers alive (unreused) until both matmuls are done
        dv, dk, _, _ = warpgroup_mma_wait(0, deps=(dv, dk, pt_op, dst_op))
        # the slot's Q and dO are read by all four matmuls: refill it only now
        _load_pair(q_desc, do_desc, row0 + lo, bars, q_smem, do_smem, t + STAGES, n_tiles, STAGES)

    mbarrier.invalidate(kv_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))
    k_smem.store((dk * sm_scale).to(dtype))  # K's and V's buffers are free now
    v_smem.store(dv.to(dtype))
    fence_async_shared()
    _tma_store(dk_desc, [row0 + off_n, 0], k_smem)
    _tma_store(dv_desc, [row0 + off_n, 0], v_smem)
    tma.store_wait(0)


@gluon.jit
def attn_bwd_dq(  # noqa: ANN201 (a kernel returns nothing)
    q_desc,
    k_desc,
    v_desc,
    do_desc,
    dq_desc,
    LSE,
    DELTA,
    n_ctx,
    qk_scale,
    sm_scale,
    HEAD_DIM: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = wgmma_layout(NUM_WARPS, BLOCK_N)  # S, dP: [BLOCK_M, BLOCK_N]
    q_layout: gl.constexpr = wgmma_layout(NUM_WARPS, HEAD_DIM)  # dQ: [BLOCK_M, HEAD_DIM]
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=q_layout, k_width=2)
    query_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    key_cols: gl.constexpr = gl.SliceLayout(0, s_layout)

    if CAUSAL:  # heaviest query tiles first
        pid_m = gl.num_programs(0) - 1 - gl.program_id(0)
    else:
        pid_m = gl.program_id(0)
    off_m = pid_m * BLOCK_M
    off_bh = gl.program_id(1)
    row0 = off_bh * n_ctx
    if CAUSAL:
        n_tiles = (off_m + BLOCK_M) // BLOCK_N
    else:
        n_tiles = n_ctx // BLOCK_N

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()

    mbarrier.expect(q_bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    _tma_load(q_desc, [row0 + off_m, 0], q_bar, q_smem)
    _tma_load(do_desc, [row0 + off_m, 0], q_bar, do_smem)
    for i in gl.static_range(STAGES):
        _load_pair(k_desc, v_desc, row0, bars, k_smem, v_smem, i, n_tiles, STAGES)

    queries = off_m + gl.arange(0, BLOCK_M, layout=query_rows)
    lse = gl.load(LSE + row0 + queries)
    delta = gl.load(DELTA + row0 + queries)
    dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=q_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(q_bar, 0)

    for j in range(n_tiles):
        slot = j % STAGES
        start_n = j * BLOCK_N
        mbarrier.wait(bars.index(slot), (j // STAGES) & 1)
        k_t = k_smem.index(slot)
        s = warpgroup_mma(q_smem, k_t.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        v_t = v_smem.index(slot).permute((1, 0))
        dp = warpgroup_mma(do_smem, v_t, s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(1, deps=(s,))  # S done; dP may still run
        p = gl.exp2(s * qk_scale - lse[:, None])
        if CAUSAL:
            if start_n + BLOCK_N > off_m:  # a diagonal tile
                keys = start_n + gl.arange(0, BLOCK_N, layout=key_cols)
                p = gl.where(queries[:, None] >= keys[None, :], p, 0.0)
        dp = warpgroup_mma_wait(0, deps=(dp,))
        ds = gl.convert_layout((p * (dp - delta[:, None])).to(dtype), op_layout)
        dq = warpgroup_mma(ds, k_t, dq, is_async=True)
        dq, _ = warpgroup_mma_wait(0, deps=(dq, ds))  # ds: see dK/dV's wait
        _load_pair(k_desc, v_desc, row0, bars, k_smem, v_smem, j + STAGES, n_tiles, STAGES)

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))
    q_smem.store((dq * sm_scale).to(dtype))  # Q's buffer is free: every matmul has finished
    fence_async_shared()
    _tma_store(dq_desc, [row0 + off_m, 0], q_smem)
    tma.store_wait(0)


def _layout(block: list[int], dtype: torch.dtype = torch.bfloat16) -> gl.NVMMASharedLayout:
    gdtype = gl.bfloat16 if dtype == torch.bfloat16 else gl.float16
    return gl.NVMMASharedLayout.get_default_for(block, gdtype)


def shape_problem(n: int, causal: bool, config: tuple) -> str | None:
    """Why `config` cannot take N tokens (None when it can): the tiles must divide N, and a
    causal diagonal tile must hold whole tiles of the other side (else a program waits forever)."""
    _, (kv_m, kv_n, _, _), (q_m, q_n, _, _) = config
    if any(n % t for t in (kv_m, kv_n, q_m, q_n)):
        return f"N={n} is not a multiple of every tile"
    if causal and (kv_n % kv_m or q_m % q_n):
        return "causal needs BLOCK_N % BLOCK_M == 0 (dK/dV) and BLOCK_M % BLOCK_N == 0 (dQ)"
    return None


def gluon_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    sm_scale: float,
    config: tuple,
    poison: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of contiguous ``[B, H, N, D]`` bf16/fp16 inputs, given the forward's O and
    base-2 LSE ``[B*H, N]`` (flash's convention). ``poison``: outputs start as NaN, so an
    element no program writes shows (the check's setting; timing leaves it off)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from mlinfra_lab.attention.flash import _launch_delta

    b, h, n, d = q.shape
    why = shape_problem(n, causal, config)
    if why:
        raise ValueError(why)
    _, (kv_m, kv_n, kv_w, kv_s), (q_m, q_n, q_w, q_s) = config
    rows = b * h * n
    delta = torch.empty_like(lse)
    _launch_delta(o, do, delta, b * h)
    make = (lambda t: torch.full_like(t, float("nan"))) if poison else torch.empty_like
    dq, dk, dv = (make(t) for t in (q, k, v))

    def desc(t: torch.Tensor, block_rows: int) -> TensorDescriptor:
        block = [block_rows, d]
        return TensorDescriptor(t.view(rows, d), [rows, d], [d, 1], block, _layout(block, t.dtype))

    qk_scale = sm_scale * LOG2E
    attn_bwd_dkdv[(n // kv_n, b * h)](
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
    attn_bwd_dq[(n // q_m, b * h)](
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


def compile_only() -> list[dict]:
    """Build every kernel of every configuration for sm_90 (no GPU): shared memory, and
    ptxas's registers and spills."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    out = []
    for name, kv, qcfg in CONFIGS:
        for d in (64, 128):
            for causal in (False, True):
                for kind, kernel, (bm, bn, warps, stages) in (
                    ("dkdv", attn_bwd_dkdv, kv),
                    ("dq", attn_bwd_dq, qcfg),
                ):

                    def desc(r: int, d: int = d) -> str:
                        return f"tensordesc<bf16[{r}, {d}],{_layout([r, d])!r}>"

                    m_rows, n_rows = desc(bm), desc(bn)
                    if kind == "dkdv":
                        descs = {"q_desc": m_rows, "k_desc": n_rows, "v_desc": n_rows}
                        descs.update(do_desc=m_rows, dk_desc=n_rows, dv_desc=n_rows)
                    else:
                        descs = {"q_desc": m_rows, "k_desc": n_rows, "v_desc": n_rows}
                        descs.update(do_desc=m_rows, dq_desc=m_rows)
                    sig = dict(descs, LSE="*fp32", DELTA="*fp32", n_ctx="i32")
                    sig.update(qk_scale="fp32", sm_scale="fp32")
                    consts = dict(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, CAUSAL=causal)
                    sig.update({key: "constexpr" for key in consts})
                    compiled = triton.compile(
                        GluonASTSource(kernel, sig, consts),
                        target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": warps},
                    )
                    row = {
                        "config": name,
                        "kernel": kind,
                        "head_dim": d,
                        "causal": causal,
                        "smem_bytes": compiled.metadata.shared,
                        "ptxas": ptxas_report(compiled.asm["ptx"]),
                        # M matmul, W<n> wait, E exp2, S/L spill (mlinfra_lab.attention.machine_code)
                        "sass": schedule(disassemble(compiled)),
                    }
                    print(json.dumps(row), flush=True)
                    out.append(row)
    return out


def _inputs(b: int, h: int, n: int, d: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [
        torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)
    ]


def check_one(name: str) -> dict:
    """Child process: one configuration's gradients against float32 autograd, next to the
    Triton split backward's on the same inputs."""
    from mlinfra_lab.attention.flash import _backward, _forward

    config = next(c for c in CONFIGS if c[0] == name)
    worst = {"gluon": 0.0, "triton": 0.0}
    nan = False
    for d in (64, 128):
        for causal in (False, True):
            for b, h, n in ((1, 3, 128), (2, 3, 512), (1, 2, 2048)):
                if shape_problem(n, causal, config):
                    continue
                q, k, v, do = _inputs(b, h, n, d, n + d)
                scale = d**-0.5
                o, lse = _forward(q, k, v, causal, scale, version=1)
                ref = [t.detach().float().requires_grad_() for t in (q, k, v)]
                s = (ref[0] @ ref[1].transpose(-1, -2)) * scale
                if causal:
                    s = s.masked_fill(torch.ones(n, n, device="cuda").triu(1).bool(), -torch.inf)
                (torch.softmax(s, -1) @ ref[2]).backward(do.float())
                got = gluon_backward(do, q, k, v, o, lse, causal, scale, config, poison=True)
                base = _backward(do, q, k, v, o, lse, causal, scale, "split")
                for key, grads in (("gluon", got), ("triton", base)):
                    for g, r in zip(grads, ref, strict=True):
                        nan = nan or bool(g.isnan().any())
                        worst[key] = max(worst[key], (g.float() - r.grad).abs().max().item())
    ok = not nan and worst["gluon"] <= 2 * worst["triton"] + 1e-3
    return {"max_err": worst["gluon"], "max_err_triton": worst["triton"], "nan": nan, "ok": ok}


def time_shape(d: int, n: int, causal: bool, good: list[str]) -> dict:
    """Backward TFLOP/s of one shape of the sweep: each passing configuration, the Triton
    split backward (launched the same way, without autograd), cuDNN through autograd."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    from triton.testing import do_bench

    from mlinfra_lab.attention.flash import _backward, _forward

    b, h = TOKENS // n, FEATURES // d
    q, k, v, do = _inputs(b, h, n, d, n)
    scale = d**-0.5
    o, lse = _forward(q, k, v, causal, scale, version=1)
    fns = {"triton_split": lambda: _backward(do, q, k, v, o, lse, causal, scale)}
    for name in good:
        config = next(c for c in CONFIGS if c[0] == name)
        if not shape_problem(n, causal, config):
            fns[name] = lambda cfg=config: gluon_backward(do, q, k, v, o, lse, causal, scale, cfg)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = sdpa(*leaves, is_causal=causal)
    fns["sdpa_cudnn"] = lambda: out.backward(do, retain_graph=True)
    flops = 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)
    tf = {}
    for name, fn in fns.items():
        try:
            kw = {"grad_to_none": leaves} if name == "sdpa_cudnn" else {}
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median", **kw)
            tf[name] = flops / ms * 1e-9
        except Exception as err:  # noqa: BLE001 - a refusal is a result
            tf[name] = f"error: {str(err).splitlines()[0][:200]}"
    return {"head_dim": d, "seq": n, "causal": causal, "tflops_bwd": tf}


def time_all(good: list[str], result: dict, out: Path | None) -> None:
    """The backward alone over the benchmark's sweep (16k tokens x 2048 features), into
    ``result["rows"]``; the file is rewritten after every shape."""
    for d in (128, 64):  # D=128 first: the shapes the target is about
        for causal in (False, True):
            for n in (1024, 4096, 16384):
                row = time_shape(d, n, causal, good)
                print(json.dumps(row), flush=True)
                result["rows"].append(row)
                write_json(out, result)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--compile-only", action="store_true", help="build for sm_90, no GPU")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one config's check, in a child
    parser.add_argument("--limit", type=float, default=150, help="seconds per configuration check")
    parser.add_argument("--jobs", type=int, default=4, help="checks at once (child processes)")
    args = parser.parse_args()
    if args.compile_only:
        rows = compile_only()
        if args.out:
            args.out.write_text(json.dumps({"compiled": rows}, indent=1) + "\n")
        return 0
    if args.child:
        print(json.dumps(check_one(args.child)))
        return 0
    # the check's Triton reference runs one tile per kernel: an autotune of the split
    # backward (a dozen compiles per shape) would eat the child's time limit
    env = dict(os.environ, MLINFRA_ATTENTION_AUTOTUNE="0")
    names = [c[0] for c in CONFIGS]
    checks, good = check_in_children(__file__, names, args.limit, env, jobs=args.jobs)
    result = dict(run_header(), checks=checks, rows=[])
    write_json(args.out, result)
    time_all(good, result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
