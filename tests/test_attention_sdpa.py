"""SDPA's backends pinned with `sdpa_kernel`: which kernel ran, its time, or why it could not."""

from __future__ import annotations

import pytest
import torch

from mlinfra_lab.attention import BACKENDS, naive_attention, sdpa_backends

pytestmark = pytest.mark.attention


def test_every_backend_runs_and_agrees_or_says_why_not():
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    rows = {r.backend: r for r in sdpa_backends(q, k, v, causal=True, repeats=1)}
    assert list(rows) == list(BACKENDS)
    math_row = rows["MATH"]
    assert math_row.kernel == "aten::_scaled_dot_product_attention_math"
    assert math_row.max_abs_diff == 0 and math_row.ms > 0
    ran = [r for r in rows.values() if r.error is None]
    for r in ran:
        assert r.ms > 0 and r.kernel and r.max_abs_diff < 1e-5, str(r)
    for r in rows.values():
        assert (r.error is None) == (r.ms is not None), "a row is either timed or refused"
    with torch.no_grad():
        ref = naive_attention(q.double(), k.double(), v.double(), causal=True)
        assert (
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) - ref
        ).abs().max() < 1e-5
    if not torch.cuda.is_available():  # the CPU has a fused kernel and the math one, no more
        assert rows["default"].kernel != math_row.kernel, (
            "the default should pick the fused CPU kernel"
        )
        for name in ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
            assert rows[name].error and "backend" in rows[name].error
            assert "cannot run here" in str(rows[name])


def test_unknown_backend_is_refused():
    q = torch.randn(1, 1, 8, 8)
    with pytest.raises(ValueError, match="unknown backends"):
        sdpa_backends(q, q, q, backends=("MATH", "TURBO"))
    with pytest.raises(ValueError, match="repeats 0"):
        sdpa_backends(q, q, q, repeats=0)
