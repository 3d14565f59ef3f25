"""Chapter 1's gap-to-cuDNN table: the reader of committed Nsight Compute kernel profiles."""

from __future__ import annotations

import pytest

from mlinfra_lab.attention import kernel_profile as kp

pytestmark = pytest.mark.attention


def _kernel(mode: str, time_us: float, active: float | None, **extra) -> dict:
    pipes = {} if active is None else {kp.TENSOR_ACTIVE: active}
    return {
        "mode": mode,
        "kernel": "k",
        "time_us": time_us,
        "tensor_pipes_pct": pipes,
        "dram_read_bytes": 2**20,
        "dram_write_bytes": 2**20,
        **extra,
    }


def _profile() -> dict:
    stalls = {"selected": 1.0, "wait": 2.0, "barrier": 1.5, "long_scoreboard": 0.5, "drain": 0.1}
    ours = [
        _kernel("fwd", 100.0, 70.0, issued_per_scheduler_cycle=0.4, stalls_per_issue=stalls),
        _kernel("bwd", 10.0, None),  # delta: no matmul, in time and bytes only
        _kernel("bwd", 300.0, 80.0, issued_per_scheduler_cycle=0.3, registers_per_thread=244.0),
        _kernel("bwd", 100.0, 60.0, issued_per_scheduler_cycle=0.5),
    ]
    cudnn = [
        _kernel("fwd", 90.0, 80.0, issued_per_scheduler_cycle=0.4),
        _kernel("bwd", 350.0, 50.0, issued_per_scheduler_cycle=0.4),
    ]
    shape = {"seq": 8192, "head_dim": 128, "batch": 2, "heads": 16}
    return {
        "file": "x-ncu-kernels-2026-01-01.json",
        "runs": [
            {"provider": "ours", "causal": False, "kernels": ours, **shape},
            {"provider": "sdpa_cudnn", "causal": False, "kernels": cudnn, **shape},
            {"provider": "ours", "causal": True, "error": "ncu failed", **shape},
        ],
    }


def test_rows_weight_the_matmul_kernels_by_time_and_keep_helpers_in_time_and_bytes():
    rows = {(r["provider"], r["mode"]): r for r in kp.gap_rows(_profile())}
    bwd = rows[("ours", "bwd")]
    assert bwd["time_us"] == pytest.approx(410.0) and bwd["kernels"] == 3
    assert bwd["dram_mib"] == pytest.approx(6.0)
    assert bwd["tensor_active_pct"] == pytest.approx((300 * 80 + 100 * 60) / 400)
    assert bwd["tensor_active_us"] == pytest.approx(300 * 0.8 + 100 * 0.6)
    assert bwd["issued_per_cycle"] == pytest.approx((300 * 0.3 + 100 * 0.5) / 400)
    assert bwd["registers"] == 244.0  # from the longest matmul kernel
    assert list(rows[("ours", "fwd")]["stalls"]) == ["wait", "barrier", "long_scoreboard"]
    assert kp.gap_rows(_profile(), causal=True) == []  # the errored run is skipped


def test_summary_ratios_and_a_missing_provider_is_named():
    s = kp.gap_summary(_profile())
    assert s["fwd_time_ratio"] == pytest.approx(100 / 90)
    assert s["bwd_active_ratio"] == pytest.approx(300.0 / (350 * 0.5))
    assert s["bwd_matmul_ratio"] == pytest.approx(7 / 5)
    only_ours = _profile()
    only_ours["runs"] = only_ours["runs"][:1]
    with pytest.raises(KeyError, match="no sdpa_cudnn fwd row"):
        kp.gap_summary(only_ours)


def test_the_committed_profile_reads_and_has_both_providers_and_passes():
    profile = kp.committed_kernel_profile()
    assert profile is not None, "benchmarks/results/*-ncu-kernels-*.json is committed"
    assert {"device_name", "torch", "triton"} <= set(profile["device"])
    summary = kp.gap_summary(profile)
    assert all(v > 0 for v in summary.values())
