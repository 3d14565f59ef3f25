"""Next step for version 5, not yet run on a GPU: FA3's warp specialisation in Gluon.

Status: written and compiled for sm_90 on a CPU (Triton 3.6, `--compile-only`, which also
reports ptxas's registers and the setmaxnreg budgets); never run.
Nothing in the package uses it. The first GPU call of the next session runs it::

    python benchmarks/experiments/gluon_ws_experiment.py --out ws.json     # on the H200
    python benchmarks/experiments/gluon_ws_experiment.py --compile-only    # any machine

What it adds to version 5 (`mlinfra_lab/attention/_gluon_kernels.py`): one program holds two
consumer warpgroups of 4 warps (64 query rows each, sharing every K and V tile) and one
producer warp that only issues TMA copies (`gl.warp_specialize`). K and V stream through a ring
of STAGES slots: the producer waits for a slot's "empty" barrier (both consumers arrive on it
when done with the slot), fills it, and the TMA engine completes its "ready" barrier. Each
consumer runs version 5's loop (plain or with the intra-warpgroup overlap). The two
consumers are independent warpgroups, so the SM's schedulers may interleave one's softmax with
the other's matmuls on their own. The ``ws-pingpong`` configurations force FA3's ping-pong: two
"turn" mbarriers make the consumers issue their rounds of matmuls strictly in alternation
(consumer 0's S_j and P_{j-1} V_{j-1}, then consumer 1's, ...), so while one warpgroup's
matmuls occupy the Tensor Cores the other runs its softmax. Each arrive on a barrier is one
thread per warpgroup after a warpgroup-wide ``bar.sync`` (checked in the PTX), which the
barrier counts (2 on "empty", 1 on each "turn") rely on.
Its SASS (`mlinfra_lab.attention.studies.machine_code`, Triton 3.6's ptxas): each consumer waits for
P V before its softmax, as version 5's register form does at D=128, even with P staged in
shared memory (tried, and left out: the slot-release arrive after the wait seems to pull the
wait forward); the overlap this script can get is the one between the two warpgroups.
Prediction (before any run): warp specialisation alone within +-5% of version 5's best
configuration at D=128 (the consumers run version 5's loop; what changes is who issues the
copies); forced ping-pong a further 3-10% at D=128 and N >= 4k, where the softmax is long
enough to hide behind the other warpgroup's matmuls; FA3 reports 570 -> 620-660 TFLOP/s from it.

Safety: a mistake in barrier phases hangs a GPU kernel forever, and a hung kernel cannot be
interrupted from Python. So the parent process runs each configuration's check in a child
process with a time limit (`--child`), and times only configurations whose check passed.
"""

# ruff: noqa: ANN001 (Gluon reads the kernels' annotations: only constexprs carry one)
# no `from __future__ import annotations`: the aggregate below reads its annotations as types

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from child_checks import check_in_children, run_header, write_json  # this folder's helpers
from gluon_fwd_experiment import reference  # this folder's script: the float32 reference
from sm90_report import ptxas_report, register_budgets  # this folder's helper
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.language.core import _aggregate as aggregate

from mlinfra_lab.attention._gluon_kernels import _softmax_tile, wgmma_layout

_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
LOG2E = 1.4426950408889634

# (name, HALF rows per consumer, BLOCK_N, STAGES, OVERLAP, PINGPONG, consumer registers)
CONFIGS = [
    ("ws-plain-h64n128s2", 64, 128, 2, False, False, 232),
    ("ws-overlap-h64n128s2", 64, 128, 2, True, False, 232),
    ("ws-plain-h64n64s3", 64, 64, 3, False, False, 232),
    ("ws-overlap-h64n64s3", 64, 64, 3, True, False, 232),
    ("ws-pingpong-h64n128s2", 64, 128, 2, True, True, 232),
    ("ws-pingpong-h64n64s3", 64, 64, 3, True, True, 232),
]


@aggregate
class Part:
    """What one partition knows at compile time (Gluon passes partitions' constexprs in an
    aggregate: plain constexpr arguments arrive as tensors in a worker partition)."""

    CONSUMER: gl.constexpr
    HALF: gl.constexpr
    BLOCK_N: gl.constexpr
    STAGES: gl.constexpr
    HEAD_DIM: gl.constexpr
    CAUSAL: gl.constexpr
    OVERLAP: gl.constexpr
    PINGPONG: gl.constexpr

    @gluon.constexpr_function
    def __init__(
        self, CONSUMER, HALF, BLOCK_N, STAGES, HEAD_DIM, CAUSAL, OVERLAP, PINGPONG
    ) -> None:
        self.CONSUMER = gl.constexpr(CONSUMER)
        self.HALF = gl.constexpr(HALF)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.STAGES = gl.constexpr(STAGES)
        self.HEAD_DIM = gl.constexpr(HEAD_DIM)
        self.CAUSAL = gl.constexpr(CAUSAL)
        self.OVERLAP = gl.constexpr(OVERLAP)
        self.PINGPONG = gl.constexpr(PINGPONG)


@gluon.jit
def _take_turn(turns, r, part):
    """Ping-pong: wait until the other consumer has issued its matmuls of this round (consumer
    0 goes first, so its round 0 waits for nothing). The two consumers alternate strictly,
    so neither runs two phases ahead and the parity waits stay unambiguous."""
    if part.PINGPONG:
        if part.CONSUMER == 0:
            if r > 0:
                mbarrier.wait(turns.index(0), (r - 1) & 1)
        else:
            mbarrier.wait(turns.index(1), r & 1)


@gluon.jit
def _pass_turn(turns, part):
    """Ping-pong: this consumer's matmuls of the round are issued; the other may issue its."""
    if part.PINGPONG:
        mbarrier.arrive(turns.index(1 - part.CONSUMER), count=1)


@gluon.jit
def _producer(
    q_desc,
    k_desc,
    v_desc,
    q_smem,
    k_smem,
    v_smem,
    q_bars,
    ready,
    empty,
    row0,
    off_m,
    n_tiles,
    part,
):
    HALF: gl.constexpr = part.HALF
    BLOCK_N: gl.constexpr = part.BLOCK_N
    STAGES: gl.constexpr = part.STAGES
    for c in gl.static_range(2):  # each consumer's Q rows
        mbarrier.expect(q_bars.index(c), q_desc.block_type.nbytes)
        _tma_load(q_desc, [row0 + off_m + c * HALF, 0], q_bars.index(c), q_smem.index(c))
    for j in range(n_tiles):
        slot = j % STAGES
        # a fresh barrier counts as having completed the phase before its first: the first
        # pass over the ring waits for nothing
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        _tma_load(k_desc, [row0 + j * BLOCK_N, 0], bar, k_smem.index(slot))
        _tma_load(v_desc, [row0 + j * BLOCK_N, 0], bar, v_smem.index(slot))


@gluon.jit
def _consumer(
    o_desc,
    LSE,
    q_smem,
    k_smem,
    v_smem,
    q_bars,
    ready,
    empty,
    turns,
    off_bh,
    row0,
    off_m,
    n_ctx,
    n_tiles,
    qk_scale,
    part,
):
    c: gl.constexpr = part.CONSUMER
    HALF: gl.constexpr = part.HALF
    BLOCK_N: gl.constexpr = part.BLOCK_N
    STAGES: gl.constexpr = part.STAGES
    HEAD_DIM: gl.constexpr = part.HEAD_DIM
    CAUSAL: gl.constexpr = part.CAUSAL
    OVERLAP: gl.constexpr = part.OVERLAP
    NUM_WARPS: gl.constexpr = gl.num_warps()
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = wgmma_layout(NUM_WARPS, BLOCK_N)
    o_layout: gl.constexpr = wgmma_layout(NUM_WARPS, HEAD_DIM)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    m_off = off_m + c * HALF  # this consumer's first query row
    q = q_smem.index(c)

    m_i = gl.full([HALF], float("-inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([HALF], gl.float32, layout=row_s)
    acc = gl.zeros([HALF, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(q_bars.index(c), 0)

    if OVERLAP:  # version 5's loop; a slot is released once its P V is done
        # ping-pong rounds: 0 issues S_0, j issues S_j and P_{j-1} V_{j-1}, n_tiles the last P V
        mbarrier.wait(ready.index(0), 0)
        _take_turn(turns, 0, part)
        s = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        _pass_turn(turns, part)
        s = warpgroup_mma_wait(0, deps=(s,))
        p, m_i, l_i, alpha = _softmax_tile(
            s, m_i, l_i, qk_scale, 0, m_off, CAUSAL, HALF, BLOCK_N, s_layout
        )
        p_prev = gl.convert_layout(p.to(dtype), p_layout)
        for j in range(1, n_tiles):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
            _take_turn(turns, j, part)
            s = warpgroup_mma(
                q, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True
            )
            acc = warpgroup_mma(p_prev, v_smem.index(prev), acc, is_async=True)
            _pass_turn(turns, part)
            s = warpgroup_mma_wait(1, deps=(s,))
            p, m_i, l_i, alpha = _softmax_tile(
                s, m_i, l_i, qk_scale, j * BLOCK_N, m_off, CAUSAL, HALF, BLOCK_N, s_layout
            )
            acc = warpgroup_mma_wait(0, deps=(acc,))
            mbarrier.arrive(empty.index(prev), count=1)
            acc = acc * gl.convert_layout(alpha, row_o)[:, None]
            p_prev = gl.convert_layout(p.to(dtype), p_layout)
        last = (n_tiles - 1) % STAGES
        _take_turn(turns, n_tiles, part)
        acc = warpgroup_mma(p_prev, v_smem.index(last), acc, is_async=True)
        _pass_turn(turns, part)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty.index(last), count=1)
    else:  # each matmul waited for at once
        for j in range(n_tiles):
            slot = j % STAGES
            mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
            s = warpgroup_mma(
                q, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True
            )
            s = warpgroup_mma_wait(0, deps=(s,))
            p, m_i, l_i, alpha = _softmax_tile(
                s, m_i, l_i, qk_scale, j * BLOCK_N, m_off, CAUSAL, HALF, BLOCK_N, s_layout
            )
            acc = acc * gl.convert_layout(alpha, row_o)[:, None]
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            acc = warpgroup_mma(p_op, v_smem.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
            mbarrier.arrive(empty.index(slot), count=1)

    offs = m_off + gl.arange(0, HALF, layout=row_s)
    gl.store(LSE + off_bh * n_ctx + offs, m_i + gl.log2(l_i))
    o = acc / gl.convert_layout(l_i, row_o)[:, None]
    q.store(o.to(dtype))  # this consumer's Q rows are free: its last QK^T has finished
    fence_async_shared()
    _tma_store(o_desc, [row0 + m_off, 0], q)
    tma.store_wait(0)


@gluon.jit
def attn_fwd_ws(  # noqa: ANN201 (a kernel returns nothing)
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    LSE,
    n_ctx,
    qk_scale,
    HEAD_DIM: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    OVERLAP: gl.constexpr,
    PINGPONG: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
):
    HALF: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_M: gl.constexpr = 2 * HALF
    dtype: gl.constexpr = q_desc.dtype
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - gl.program_id(0)
    else:
        pid_m = gl.program_id(0)
    off_bh = gl.program_id(1)
    off_m = pid_m * BLOCK_M
    row0 = off_bh * n_ctx
    if CAUSAL:
        n_tiles = (off_m + BLOCK_M) // BLOCK_N
    else:
        n_tiles = n_ctx // BLOCK_N

    q_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival from each consumer
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):  # turns[c]: the other consumer has issued; c may issue
        mbarrier.init(turns.index(i), count=1)
    fence_async_shared()

    consumer_args = (
        o_desc,
        LSE,
        q_smem,
        k_smem,
        v_smem,
        q_bars,
        ready,
        empty,
        turns,
        off_bh,
        row0,
        off_m,
        n_ctx,
        n_tiles,
        qk_scale,
    )
    producer_args = (
        q_desc,
        k_desc,
        v_desc,
        q_smem,
        k_smem,
        v_smem,
        q_bars,
        ready,
        empty,
        row0,
        off_m,
        n_tiles,
    )
    gl.static_assert(OVERLAP or not PINGPONG, "ping-pong rounds follow the overlapped loop")
    first = Part(0, HALF, BLOCK_N, STAGES, HEAD_DIM, CAUSAL, OVERLAP, PINGPONG)
    second = Part(1, HALF, BLOCK_N, STAGES, HEAD_DIM, CAUSAL, OVERLAP, PINGPONG)
    gl.warp_specialize(
        [
            (_consumer, consumer_args + (first,)),
            (_consumer, consumer_args + (second,)),
            (_producer, producer_args + (first,)),
        ],
        [4, 1],
        [CONSUMER_REGS, 24],
    )


def _layout(block: list[int]) -> gl.NVMMASharedLayout:
    return gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)


def ws_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, config: tuple
) -> tuple[torch.Tensor, torch.Tensor]:
    """O and the base-2 LSE ``[B*H, N]`` of bf16 ``[B, H, N, D]`` inputs (N a multiple of 128)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    _, half, block_n, stages, overlap, pingpong, regs = config
    b, h, n, d = q.shape
    assert n % (2 * half) == 0 and n % block_n == 0 and (2 * half) % block_n == 0
    o = torch.empty_like(q)
    lse = torch.empty((b * h, n), device=q.device, dtype=torch.float32)
    rows = b * h * n
    descs = [
        TensorDescriptor(t.view(rows, d), [rows, d], [d, 1], blk, _layout(blk))
        for t, blk in ((q, [half, d]), (k, [block_n, d]), (v, [block_n, d]), (o, [half, d]))
    ]
    attn_fwd_ws[(n // (2 * half), b * h)](
        *descs,
        lse,
        n,
        d**-0.5 * LOG2E,
        HEAD_DIM=d,
        BLOCK_N=block_n,
        STAGES=stages,
        CAUSAL=causal,
        OVERLAP=overlap,
        PINGPONG=pingpong,
        CONSUMER_REGS=regs,
        num_warps=4,
    )
    return o, lse


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    for config in CONFIGS:
        name, half, block_n, stages, overlap, pingpong, regs = config
        for d in (64, 128):
            for causal in (False, True):

                def desc(rows: int, d: int = d) -> str:
                    return f"tensordesc<bf16[{rows}, {d}],{_layout([rows, d])!r}>"

                sig = {
                    "q_desc": desc(half),
                    "k_desc": desc(block_n),
                    "v_desc": desc(block_n),
                    "o_desc": desc(half),
                    "LSE": "*fp32",
                    "n_ctx": "i32",
                    "qk_scale": "fp32",
                }
                consts = dict(
                    HEAD_DIM=d,
                    BLOCK_N=block_n,
                    STAGES=stages,
                    CAUSAL=causal,
                    OVERLAP=overlap,
                    PINGPONG=pingpong,
                    CONSUMER_REGS=regs,
                )
                sig.update({key: "constexpr" for key in consts})
                k = triton.compile(
                    GluonASTSource(attn_fwd_ws, sig, consts),
                    target=GPUTarget("cuda", 90, 32),
                    options={"num_warps": 4},
                )
                report = ptxas_report(k.asm["ptx"])
                budgets = register_budgets(k.asm["ptx"])
                print(f"{name} D={d} causal={causal}: smem {k.metadata.shared} B; {report}")
                print(f"  setmaxnreg (inc/dec, registers): {budgets}")


def check_one(name: str) -> dict:
    """Child process: one configuration against float32 at a few shapes, D 64 and 128."""
    config = next(c for c in CONFIGS if c[0] == name)
    worst_o = worst_lse = 0.0
    for d in (64, 128):
        for causal in (False, True):
            for b, h, n in ((1, 3, 128), (2, 3, 512), (1, 2, 2048)):
                g = torch.Generator(device="cuda").manual_seed(n + d)
                q, k, v = (
                    torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
                    for _ in range(3)
                )
                o, lse = ws_forward(q, k, v, causal, config)
                ref, ref_lse = reference(q, k, v, causal, d**-0.5)
                worst_o = max(worst_o, (o.float() - ref).abs().max().item())
                worst_lse = max(worst_lse, (lse.view(b, h, n) - ref_lse).abs().max().item())
    return {
        "max_err_o": worst_o,
        "max_err_lse": worst_lse,
        "ok": worst_o < 2e-2 and worst_lse < 1e-2,
    }


def time_all(good: list[str], result: dict, out: Path | None) -> None:
    """D=128, the benchmark's sweep (16k tokens x 2048 features): the WS configurations next
    to version 5's table configuration, version 1 and cuDNN, in this process."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    from triton.testing import do_bench

    from mlinfra_lab.attention._gluon_fwd import gluon_forward
    from mlinfra_lab.attention.flash import flash_attention

    def cudnn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(q, k, v, is_causal=causal)

    with torch.no_grad():
        for causal in (False, True):
            for n in (1024, 4096, 16384):
                b, h, d = 16384 // n, 16, 128
                g = torch.Generator(device="cuda").manual_seed(n)
                q, k, v = (
                    torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
                    for _ in range(3)
                )
                fns = {
                    "v1": lambda q, k, v, c: flash_attention(q, k, v, causal=c, version=1),
                    "v5": lambda q, k, v, c, d=d: gluon_forward(q, k, v, c, d**-0.5)[0],
                    "sdpa_cudnn": cudnn,
                }
                for name in good:
                    config = next(c for c in CONFIGS if c[0] == name)
                    fns[name] = lambda q, k, v, c, cfg=config: ws_forward(q, k, v, c, cfg)[0]
                flops = 4 * b * h * n * n * d / (2 if causal else 1)
                tf = {}
                for name, fn in fns.items():
                    call = lambda fn=fn, t=(q, k, v), c=causal: fn(*t, c)  # noqa: E731
                    ms = do_bench(call, return_mode="median")
                    tf[name] = flops / ms * 1e-9
                row = {"head_dim": d, "seq": n, "causal": causal, "tflops": tf}
                print(json.dumps(row), flush=True)
                result["rows"].append(row)
                write_json(out, result)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--compile-only", action="store_true", help="build for sm_90, no GPU")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one config's check, in a child
    parser.add_argument("--limit", type=float, default=90, help="seconds per configuration check")
    parser.add_argument("--jobs", type=int, default=6, help="checks at once (child processes)")
    args = parser.parse_args()
    if args.compile_only:
        compile_only()
        return 0
    if args.child:
        print(json.dumps(check_one(args.child)))
        return 0
    names = [c[0] for c in CONFIGS]
    checks, good = check_in_children(__file__, names, args.limit, jobs=args.jobs)
    result = dict(run_header(), checks=checks, rows=[])
    write_json(args.out, result)
    time_all(good, result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
