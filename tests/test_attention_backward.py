"""Chapter 1's backward pass: the tiled backward against float64 autograd, its matmul count,
the traffic it saves, and the shared-memory layouts read from Triton's IR."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from mlinfra_lab.attention import (
    AttentionInputError,
    backward_delta,
    count_matmuls,
    hbm_traffic_backward,
    hbm_traffic_backward_breakdown,
    naive_attention,
    tiled_attention,
    tiled_attention_backward,
)
from mlinfra_lab.attention.backward import SCHEDULES
from mlinfra_lab.attention.studies import alloc_layouts, shared_layouts

pytestmark = pytest.mark.attention

ATTENTION = Path(__file__).resolve().parent.parent / "mlinfra_lab" / "attention"

# (batch, heads, n_q, n_k, head_dim, causal, block_m, block_n): lengths that are not multiples
# of the tile, n_q != n_k, head dims of 80 and 24, a single token, tiles wider than the input.
ODD_SHAPES = [
    (1, 2, 37, 37, 16, True, 16, 8),
    (2, 1, 50, 29, 80, False, 16, 16),
    (1, 2, 29, 50, 24, False, 8, 16),
    (1, 1, 65, 65, 80, True, 32, 16),
    (1, 3, 1, 1, 8, True, 4, 4),
    (2, 2, 33, 33, 40, True, 64, 64),
    (1, 1, 70, 45, 32, False, 16, 32),
]
# float64 throughout: rounding of a few hundred terms, far below any bug's size (a missing D
# term or an unmasked diagonal moves the gradients by O(1))
F64_TOL = dict(rtol=1e-10, atol=1e-12)


def _problem(b, h, n_q, n_k, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=dtype) for n in (n_q, n_k, n_k))
    dout = torch.randn(b, h, n_q, d, generator=g, dtype=dtype)
    return q, k, v, dout


def _autograd(q, k, v, dout, causal):
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    naive_attention(q, k, v, causal=causal).backward(dout.double())
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize(
    "shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s[:5])) + ("c" if s[5] else "")
)
def test_tiled_backward_matches_float64_autograd(shape, schedule):
    b, h, n_q, n_k, d, causal, bm, bn = shape
    q, k, v, dout = _problem(b, h, n_q, n_k, d, seed=n_q + d)
    out, lse = tiled_attention(q, k, v, causal, block_m=bm, block_n=bn, return_lse=True)
    assert lse.dtype == torch.float64  # a float32 L would cap the agreement at about 1e-7
    got = tiled_attention_backward(
        q, k, v, out, lse, dout, causal, block_m=bm, block_n=bn, schedule=schedule
    )
    for name, g, r in zip("qkv", got, _autograd(q, k, v, dout, causal), strict=True):
        torch.testing.assert_close(g, r, **F64_TOL, msg=lambda m, n=name: f"d{n}: {m}")


def test_float32_backward_is_within_float32_rounding():
    q, k, v, dout = _problem(2, 2, 45, 45, 80, dtype=torch.float32, seed=3)
    out, lse = tiled_attention(q, k, v, True, block_m=16, block_n=16, return_lse=True)
    got = tiled_attention_backward(q, k, v, out, lse, dout, True, block_m=16, block_n=16)
    for g, r in zip(got, _autograd(q, k, v, dout, True), strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-5)


def test_delta_is_the_softmax_jacobian_term():
    # D_i = sum_j P_ij dP_ij, computed the expensive way, equals rowsum(dO * O).
    q, k, v, dout = _problem(1, 2, 20, 20, 8, seed=5)
    p = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
    out = p @ v
    dp = dout @ v.transpose(-2, -1)
    torch.testing.assert_close(backward_delta(out, dout), (p * dp).sum(-1), **F64_TOL)


def test_a_backward_without_the_delta_term_is_caught():
    # The comparison above must be able to fail: drop D and the gradients of Q and K move.
    q, k, v, dout = _problem(1, 1, 24, 24, 16, seed=7)
    out, lse = tiled_attention(q, k, v, return_lse=True, block_m=8, block_n=8)
    zero = torch.zeros_like(dout)
    ref = _autograd(q, k, v, dout, False)
    import mlinfra_lab.attention.backward as bw

    real = bw.backward_delta
    try:
        bw.backward_delta = lambda o, d: real(o, zero)  # D = 0: the missing-term mistake
        dq, dk, dv = tiled_attention_backward(q, k, v, out, lse, dout, block_m=8, block_n=8)
    finally:
        bw.backward_delta = real
    torch.testing.assert_close(dv, ref[2], **F64_TOL)  # dV does not use D
    assert (dq - ref[0]).abs().max() > 1e-2
    assert (dk - ref[1]).abs().max() > 1e-2


@pytest.mark.parametrize("schedule,per_pair", [("split", 7), ("fused", 5)])
def test_matmuls_per_tile_pair(schedule, per_pair):
    q, k, v, dout = _problem(1, 1, 64, 48, 16, dtype=torch.float32)
    out, lse = tiled_attention(q, k, v, return_lse=True, block_m=16, block_n=16)
    pairs = (64 // 16) * (48 // 16)
    n = count_matmuls(
        lambda: tiled_attention_backward(
            q, k, v, out, lse, dout, block_m=16, block_n=16, schedule=schedule
        )
    )
    assert n == per_pair * pairs
    assert count_matmuls(lambda: tiled_attention(q, k, v, block_m=16, block_n=16)) == 2 * pairs


def test_causal_backward_skips_tiles_above_the_diagonal():
    q, k, v, dout = _problem(1, 1, 64, 64, 16, dtype=torch.float32)
    out, lse = tiled_attention(q, k, v, True, return_lse=True, block_m=16, block_n=16)
    visited = 4 * 5 // 2  # 4 x 4 tiles, the diagonal and below
    n = count_matmuls(
        lambda: tiled_attention_backward(q, k, v, out, lse, dout, True, block_m=16, block_n=16)
    )
    assert n == 7 * visited


def test_backward_refuses_mismatched_inputs():
    q, k, v, dout = _problem(1, 1, 8, 8, 4)
    out, lse = tiled_attention(q, k, v, return_lse=True)
    with pytest.raises(AttentionInputError, match="lse has shape"):
        tiled_attention_backward(q, k, v, out, lse[..., :-1], dout)
    with pytest.raises(AttentionInputError, match="dout has shape"):
        tiled_attention_backward(q, k, v, out, lse, dout[:, :, :4])
    with pytest.raises(AttentionInputError, match="schedule"):
        tiled_attention_backward(q, k, v, out, lse, dout, schedule="atomic")


def test_storing_p_makes_backward_traffic_quadratic():
    recompute = [hbm_traffic_backward(1, 16, n, 128, 2, store_p=False) for n in (4096, 8192)]
    stored = [hbm_traffic_backward(1, 16, n, 128, 2, store_p=True) for n in (4096, 8192)]
    assert recompute[1] == 2 * recompute[0]  # linear in N
    assert stored[1] / stored[0] > 3.5  # dominated by the N^2 terms
    parts = hbm_traffic_backward_breakdown(1, 1, 100, 8, 2, store_p=True)
    assert parts["write P (forward)"] == parts["read P"] == 100 * 100 * 2
    assert "read L" in hbm_traffic_backward_breakdown(1, 1, 100, 8, 2, store_p=False)


TTGIR = """#blocked = #ttg.blocked<{sizePerThread = [1, 8], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}>
#shared = #ttg.nvmma_shared<{swizzlingByteWidth = 128, transposed = false, elementBitWidth = 16}>
#shared1 = #ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [0]}>
#smem = #ttg.shared_memory
    %12 = ttg.local_alloc %11 : (tensor<128x128xbf16, #blocked>) -> !ttg.memdesc<128x128xbf16, #shared, #smem>
    %13 = ttg.local_alloc : () -> !ttg.memdesc<3x64x128xbf16, #shared, #smem, mutable>
"""


def test_shared_layouts_are_read_from_the_ir():
    layouts = {lay["name"]: lay for lay in shared_layouts(TTGIR)}
    assert layouts["#shared"] == {
        "name": "#shared",
        "kind": "nvmma_shared",
        "swizzlingByteWidth": 128,
        "transposed": False,
        "elementBitWidth": 16,
    }
    assert layouts["#shared1"]["order"] == [0]
    assert "#smem" not in layouts  # the memory space, not a layout
    assert alloc_layouts(TTGIR) == [
        {"shape": [128, 128], "dtype": "bf16", "layout": "#shared"},
        {"shape": [3, 64, 128], "dtype": "bf16", "layout": "#shared"},
    ]


MEASURED_IN_DOCSTRING = re.compile(
    r"\b\d+(?:\.\d+)?x\b"  # a measured ratio: 1.37x
    r"|\d+(?:\.\d+)?%"  # a measured share: 84%
    r"|20\d\d-\d\d-\d\d"  # a dated result file or session
)


@pytest.mark.parametrize(
    "module",
    sorted(p.relative_to(ATTENTION.parent.parent).as_posix() for p in ATTENTION.rglob("*.py")),
)
def test_attention_docstrings_hold_contracts_not_measurements(module):
    """Measurements and history belong in result files, benchmarks/NOTES.md and the book."""
    doc = ast.get_docstring(ast.parse((ATTENTION.parent.parent / module).read_text())) or ""
    found = [m.group(0) for m in MEASURED_IN_DOCSTRING.finditer(doc)]
    assert not found, f"{module}'s docstring quotes measurements or dated files: {found}"
