"""The Gluon kernel of version 5's forward (see `_gluon_fwd` for the contract and design).

Imported only when version 5 runs or compiles: it needs ``triton.experimental.gluon``
(Triton >= 3.6). Names follow FlashAttention-3's paper: S = Q K^T (float32), P = the
unnormalised probabilities (input dtype), O the float32 accumulator; ``m`` and ``l`` the
running row max (in base-2 scaled units) and row sum.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

__all__ = ["attn_fwd", "wgmma_layout"]

# Triton 3.6 names the TMA copies async_copy_global_to_shared / _shared_to_global; later
# releases call them async_load / async_store (and refuse the old names)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


@gluon.constexpr_function
def wgmma_layout(num_warps: int, cols: int) -> gl.NVMMADistributedLayout:
    """The layout of a wgmma accumulator ``cols`` wide: warps stacked along the rows (16 rows
    per warp), one instruction as wide as the tile. S (``cols`` = BLOCK_N) and O (``cols`` =
    HEAD_DIM) then share the row ownership, so row vectors move between them for free."""
    return gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, cols, 16]
    )


@gluon.jit
def _load_tile(desc, row, bars, bufs, j, n_tiles, STAGES: gl.constexpr, BLOCK_N: gl.constexpr):
    """Start the TMA copy of tile j (if it exists) into ring slot j % STAGES."""
    slot = j % STAGES
    pred = j < n_tiles
    bar = bars.index(slot)
    mbarrier.expect(bar, desc.block_type.nbytes, pred=pred)
    _tma_load(desc, [row + j * BLOCK_N, 0], bar, bufs.index(slot), pred=pred)


@gluon.jit
def _after_issue(x):
    """``x`` unchanged, through an instruction the compiler may not move above the matmul
    just issued (inline assembly with side effects keeps its place among the ``wgmma``s):
    what is computed from the result stays behind that issue. Without it LLVM hoists the
    rescale of O above ``S_j = Q K_j^T``, where no matmul runs beside it (seen in the PTX)."""
    return gl.inline_asm_elementwise(
        "mov.b32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=False, pack=1
    )


@gluon.jit
def _softmax_tile(
    s,
    m_i,
    l_i,
    qk_scale,
    start_n,
    off_m,
    CAUSAL: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    s_layout: gl.constexpr,
    BRANCH_FREE: gl.constexpr = False,
):
    """Online softmax of one scores tile: returns P (float32), the new m and l, and alpha,
    the factor that rescales what O holds so far. ``BRANCH_FREE`` compares every tile
    against the diagonal instead of branching on whether it crosses it: a branch between
    the two waits makes ptxas wait for the in-flight matmul before it (seen in the SASS)."""
    if CAUSAL:
        if BRANCH_FREE:
            rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            cols = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            s = gl.where(rows[:, None] >= cols[None, :], s, float("-inf"))
        elif start_n + BLOCK_N > off_m:  # the tile crosses the diagonal: mask it
            rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            cols = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            s = gl.where(rows[:, None] >= cols[None, :], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_new = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_new, alpha


@gluon.jit
def _stage_p(p, p_prev, p_smem, P_SMEM: gl.constexpr, p_layout: gl.constexpr):
    """Hand tile j's P to the next P V: into shared memory (``P_SMEM``; `p_prev` stays a
    placeholder) or into registers in the matmul's operand layout (the new `p_prev`)."""
    if P_SMEM:
        p_smem.store(p.to(p_smem.dtype))
        fence_async_shared()  # the wgmma reads it through the async proxy
        return p_prev
    else:
        return gl.convert_layout(p.to(p_smem.dtype), p_layout)


@gluon.jit
def _issue_pv(p_prev, p_smem, v_tile, acc, P_SMEM: gl.constexpr):
    """Issue O += P V asynchronously, P from shared memory or from registers."""
    if P_SMEM:
        return warpgroup_mma(p_smem, v_tile, acc, is_async=True)
    else:
        return warpgroup_mma(p_prev, v_tile, acc, is_async=True)


@gluon.jit
def attn_fwd(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    LSE,
    n_ctx,
    qk_scale,
    HEAD_DIM: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    OVERLAP: gl.constexpr,
    P_SMEM: gl.constexpr = False,
    EARLY_RESCALE: gl.constexpr = False,
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = wgmma_layout(NUM_WARPS, BLOCK_N)
    o_layout: gl.constexpr = wgmma_layout(NUM_WARPS, HEAD_DIM)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    if CAUSAL:  # heaviest query tiles first
        pid_m = gl.num_programs(0) - 1 - gl.program_id(0)
    else:
        pid_m = gl.program_id(0)
    off_bh = gl.program_id(1)
    off_m = pid_m * BLOCK_M
    row0 = off_bh * n_ctx  # this head's first row in the [B*H*N, D] views
    if CAUSAL:
        n_tiles = (off_m + BLOCK_M) // BLOCK_N
    else:
        n_tiles = n_ctx // BLOCK_N

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    if P_SMEM:  # one buffer: P_j is written after P_{j-1} V_{j-1} has been waited for
        p_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
            [BLOCK_M, BLOCK_N], dtype
        )
        p_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], p_smem_layout)
    else:
        p_smem = q_smem  # a placeholder: P stays in registers
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)
    fence_async_shared()

    # prologue: Q, and the first STAGES tiles of K and V
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    _tma_load(q_desc, [row0 + off_m, 0], q_bar, q_smem)
    for i in gl.static_range(STAGES):
        _load_tile(k_desc, row0, k_bars, k_smem, i, n_tiles, STAGES, BLOCK_N)
        _load_tile(v_desc, row0, v_bars, v_smem, i, n_tiles, STAGES, BLOCK_N)

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

    # tile 0's scores and softmax, alone
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_bars.index(0), 0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
    _load_tile(k_desc, row0, k_bars, k_smem, STAGES, n_tiles, STAGES, BLOCK_N)
    p, m_i, l_i, alpha = _softmax_tile(
        s, m_i, l_i, qk_scale, 0, off_m, CAUSAL, BLOCK_M, BLOCK_N, s_layout
    )
    p_prev = _stage_p(p, gl.zeros([BLOCK_M], gl.float32, row_s), p_smem, P_SMEM, p_layout)

    for j in range(1, n_tiles):
        slot = j % STAGES
        prev = (j - 1) % STAGES
        mbarrier.wait(k_bars.index(slot), (j // STAGES) & 1)
        mbarrier.wait(v_bars.index(prev), ((j - 1) // STAGES) & 1)
        if OVERLAP:  # S_j, then P_{j-1} V_{j-1} behind it; wait for S_j only
            s = warpgroup_mma(
                q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True
            )
            if EARLY_RESCALE:  # FA3's order: O *= alpha_{j-1} while S_j is on the Tensor Cores
                acc = acc * _after_issue(gl.convert_layout(alpha, row_o))[:, None]
            acc = _issue_pv(p_prev, p_smem, v_smem.index(prev), acc, P_SMEM)
            s = warpgroup_mma_wait(1, deps=(s,))
        else:  # each matmul waited for at once
            acc = _issue_pv(p_prev, p_smem, v_smem.index(prev), acc, P_SMEM)
            acc = warpgroup_mma_wait(0, deps=(acc,))
            s = warpgroup_mma(
                q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True
            )
            s = warpgroup_mma_wait(0, deps=(s,))
        _load_tile(k_desc, row0, k_bars, k_smem, j + STAGES, n_tiles, STAGES, BLOCK_N)
        p, m_i, l_i, alpha = _softmax_tile(
            s, m_i, l_i, qk_scale, j * BLOCK_N, off_m, CAUSAL, BLOCK_M, BLOCK_N, s_layout, P_SMEM
        )
        if OVERLAP:
            acc = warpgroup_mma_wait(0, deps=(acc,))
        _load_tile(v_desc, row0, v_bars, v_smem, j - 1 + STAGES, n_tiles, STAGES, BLOCK_N)
        if not (OVERLAP and EARLY_RESCALE):  # O *= alpha_j with no matmul in flight
            acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        p_prev = _stage_p(p, p_prev, p_smem, P_SMEM, p_layout)

    last = (n_tiles - 1) % STAGES
    mbarrier.wait(v_bars.index(last), ((n_tiles - 1) // STAGES) & 1)
    if OVERLAP and EARLY_RESCALE:  # the last tile's alpha, not yet applied
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
    acc = _issue_pv(p_prev, p_smem, v_smem.index(last), acc, P_SMEM)
    acc = warpgroup_mma_wait(0, deps=(acc,))

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))

    offs = off_m + gl.arange(0, BLOCK_M, layout=row_s)
    gl.store(LSE + off_bh * n_ctx + offs, m_i + gl.log2(l_i))
    o = acc / gl.convert_layout(l_i, row_o)[:, None]
    q_smem.store(o.to(dtype))  # Q's buffer is free: every QK^T has finished
    fence_async_shared()
    _tma_store(o_desc, [row0 + off_m, 0], q_smem)
    tma.store_wait(0)
