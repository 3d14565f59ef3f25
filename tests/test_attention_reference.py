"""Chapter 1 references: naive/tiled attention, online softmax, traffic and bank models."""

from __future__ import annotations

import math

import pytest
import torch

from mlinfra_lab.attention import (
    AttentionInputError,
    attention_flops,
    bank_conflict_degree,
    hbm_traffic,
    naive_attention,
    online_softmax,
    online_softmax_trace,
    tile_addresses,
    tiled_attention,
)

pytestmark = pytest.mark.attention


def _qkv(b, h, n_q, n_k, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=dtype) for n in (n_q, n_k, n_k)]


@pytest.mark.parametrize("n,block", [(1, 1), (10, 3), (64, 16), (100, 7), (37, 64)])
def test_online_softmax_matches_softmax(n, block):
    x = torch.randn(3, n, generator=torch.Generator().manual_seed(n)) * 10
    torch.testing.assert_close(online_softmax(x, block), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


def test_online_softmax_trace_corrects_the_running_sum():
    # The max arrives in the last block: every earlier sum must be rescaled by exp(m_old - m_new).
    x = torch.tensor([[0.0, 1.0, 2.0, 10.0]])
    states = online_softmax_trace(x, block=2)
    assert [s.end for s in states] == [2, 4]
    assert states[0].m.item() == 1.0
    assert math.isclose(states[0].l.item(), math.exp(-1) + 1, rel_tol=1e-6)
    assert states[1].m.item() == 10.0
    expected = sum(math.exp(v - 10) for v in (0, 1, 2, 10))
    assert math.isclose(states[1].l.item(), expected, rel_tol=1e-6)


def test_online_softmax_rejects_bad_block():
    with pytest.raises(ValueError, match="block"):
        online_softmax(torch.ones(4), 0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "n,block_m,block_n", [(1, 64, 64), (17, 4, 5), (100, 32, 16), (65, 64, 64)]
)
def test_tiled_matches_naive(causal, n, block_m, block_n):
    q, k, v = _qkv(2, 2, n, n, 16, seed=n)
    ref = naive_attention(q, k, v, causal)
    out, lse = tiled_attention(q, k, v, causal, block_m=block_m, block_n=block_n, return_lse=True)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    s = (q @ k.transpose(-2, -1)) / 4.0
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), rtol=1e-5, atol=1e-5)


def test_tiled_different_lengths_and_scale():
    q, k, v = _qkv(1, 3, 9, 30, 8)
    torch.testing.assert_close(
        tiled_attention(q, k, v, sm_scale=0.3, block_m=4, block_n=7),
        naive_attention(q, k, v, sm_scale=0.3),
    )


def test_naive_matches_sdpa():
    q, k, v = _qkv(2, 2, 33, 33, 16)
    for causal in (False, True):
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(naive_attention(q, k, v, causal), ref)


@pytest.mark.parametrize(
    "shapes,kwargs,match",
    [
        (((2, 4, 8), (2, 4, 8), (2, 4, 8)), {}, "rank"),
        (((1, 1, 4, 8), (1, 1, 4, 16), (1, 1, 4, 16)), {}, "head dims differ"),
        (((1, 1, 4, 8), (1, 1, 5, 8), (1, 1, 5, 8)), {"causal": True}, "causal"),
        (((1, 2, 4, 8), (1, 1, 4, 8), (1, 1, 4, 8)), {}, "batch/heads"),
    ],
)
def test_input_errors(shapes, kwargs, match):
    q, k, v = (torch.zeros(s) for s in shapes)
    for fn in (naive_attention, tiled_attention):
        with pytest.raises(AttentionInputError, match=match):
            fn(q, k, v, **kwargs)


def test_dtype_mismatch_is_a_value_error():
    q, k, v = _qkv(1, 1, 4, 4, 8)
    with pytest.raises(ValueError, match="dtypes differ"):
        naive_attention(q.float(), k, v)


def test_hbm_traffic_counts():
    b, h, n, d, e = 2, 4, 1024, 64, 2
    nd, nn = b * h * n * d * e, b * h * n * n * e
    assert hbm_traffic(b, h, n, d, e, fused=False) == 4 * nd + 4 * nn
    assert hbm_traffic(b, h, n, d, e, fused=True) == 4 * nd
    # K and V re-read once per query block of 128: 8 passes.
    assert hbm_traffic(b, h, n, d, e, fused=True, block_m=128) == 2 * nd + 16 * nd
    # Unfused grows quadratically: doubling N roughly quadruples it when N >> D.
    ratio = hbm_traffic(1, 1, 8192, 64, 2, False) / hbm_traffic(1, 1, 4096, 64, 2, False)
    assert 3.8 < ratio < 4.0


def test_attention_flops_convention():
    assert attention_flops(1, 1, 10, 10, 4, causal=False) == 4 * 100 * 4
    assert attention_flops(1, 1, 10, 10, 4, causal=True, mode="bwd") == 2.5 * 2 * 100 * 4


def test_bank_conflict_degree_rules():
    assert bank_conflict_degree([4 * t for t in range(32)]) == 1
    assert bank_conflict_degree([128 * t for t in range(32)]) == 32
    assert bank_conflict_degree([0] * 32) == 1  # broadcast
    assert bank_conflict_degree([0, 128, 4, 132]) == 2
    assert bank_conflict_degree([2 * t for t in range(32)]) == 1  # two halves per word


@pytest.mark.parametrize("elem_bytes,cols", [(4, 32), (2, 64), (2, 128)])
def test_tile_column_read_conflicts_and_cures(elem_bytes, cols):
    rows = 32
    row = tile_addresses(rows, cols, elem_bytes, "row")
    col = tile_addresses(rows, cols, elem_bytes, "column")
    padded = tile_addresses(rows, cols, elem_bytes, "column", pad_elems=4 // elem_bytes)
    swizzled = tile_addresses(rows, cols, elem_bytes, "column", swizzle=True)
    assert bank_conflict_degree(row) == 1
    assert bank_conflict_degree(col) == 32
    assert bank_conflict_degree(padded) == 1
    assert bank_conflict_degree(swizzled) == 1
    # A padding of a whole 128-byte line cures nothing.
    assert (
        bank_conflict_degree(
            tile_addresses(rows, cols, elem_bytes, "column", pad_elems=128 // elem_bytes)
        )
        == 32
    )
