"""The Gluon kernels of the backward on Hopper (see `_gluon_bwd` for the contract and design).

Imported only when the Gluon backward runs or compiles: it needs ``triton.experimental.gluon``
(Triton >= 3.6). Moved here unchanged from ``benchmarks/experiments/gluon_bwd_experiment.py``
once it had been checked and timed on a GPU. Names as in FlashAttention-2's backward: S^T =
K Q^T and dP^T = V dO^T (transposed, so dK and dV accumulate in place), P^T the probabilities
recomputed from the forward's base-2 log-sum-exp, dS^T = P^T (dP^T - delta).
"""

# ruff: noqa: ANN001 (Gluon reads the kernels' annotations: only constexprs carry one)

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

__all__ = ["attn_bwd_dkdv", "attn_bwd_dq"]


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
def attn_bwd_dkdv(
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
def attn_bwd_dq(
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
