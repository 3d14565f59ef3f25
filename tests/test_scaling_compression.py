"""Gradient compression through DDP comm hooks: bytes counted on real gloo ranks.

The counted bytes are checked against what each hook must send for the course's model
(4 x Linear(256, 256)): all gradients in float32, in float16, and PowerSGD's P and Q factors
plus the uncompressed biases, so a counter that missed PowerSGD's second all-reduce (issued
from a callback after the hook returned) would fail.
"""

from __future__ import annotations

import pytest

from mlinfra_lab.scaling import (
    HOOKS,
    RunConfig,
    UnknownHookError,
    compression_bench,
    ring_wire_bytes,
)

pytestmark = pytest.mark.scaling

HIDDEN, LAYERS = 256, 4
WEIGHTS, BIASES = LAYERS * HIDDEN * HIDDEN, LAYERS * HIDDEN


def test_ring_wire_bytes():
    assert ring_wire_bytes(1000, 1) == 0
    assert ring_wire_bytes(1000, 2) == 1000
    assert ring_wire_bytes(1000, 4) == 1500
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        ring_wire_bytes(1000, 0)


@pytest.mark.parametrize("name", ["int8", "powersgd-0", "powersgd-x", "powersgd-"])
def test_unknown_hooks_are_refused_before_any_process_starts(name):
    with pytest.raises(UnknownHookError, match="unknown comm hook"):
        compression_bench((name,))


def test_each_hook_sends_what_it_should_and_costs_what_it_should():
    config = RunConfig(hidden=HIDDEN, layers=LAYERS, timeout_s=60)
    rows = {r.hook: r for r in compression_bench(HOOKS, nproc=2, config=config)}
    assert list(rows) == list(HOOKS)
    full = 4 * (WEIGHTS + BIASES)
    for r in rows.values():
        assert r.world_size == 2 and r.gradient_bytes == full
        assert r.wire_bytes == ring_wire_bytes(r.sent_bytes, 2)
    plain, fp16 = rows["allreduce"], rows["fp16"]
    assert (plain.sent_bytes, plain.calls, plain.relative_error) == (
        full,
        1,
        pytest.approx(0, abs=1e-6),
    )
    assert (fp16.sent_bytes, fp16.ratio) == (full // 2, 2.0)
    assert 0 < fp16.relative_error < 1e-2  # float16 rounding, and nothing more
    for rank in (1, 4):
        r = rows[f"powersgd-{rank}"]
        factors = LAYERS * (HIDDEN + HIDDEN) * rank  # P (256 x r) and Q (256 x r) per weight
        assert r.sent_bytes == 4 * (factors + BIASES), "P, Q and the uncompressed biases"
        assert r.calls == 3  # biases, then P, then Q
        assert 0 < r.relative_error < 1  # lossy, but not garbage
    assert rows["powersgd-4"].relative_error < rows["powersgd-1"].relative_error
