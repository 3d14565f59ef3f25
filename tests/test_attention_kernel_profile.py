"""Chapter 1's gap-to-cuDNN table: the reader of committed Nsight Compute kernel profiles."""

from __future__ import annotations

import pytest

from mlinfra_lab.attention.studies import kernel_profile as kp

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


def test_rescale_gain_is_the_geometric_mean_of_per_pass_ratios():
    def row(causal, seq, passes):
        return {"head_dim": 128, "seq": seq, "causal": causal, "tflops_passes": passes}

    def p(early, late, cudnn=100.0):
        return {kp.EARLY: early, kp.LATE: late, "sdpa_cudnn": cudnn}

    run = {
        "rows": [
            row(False, 1024, [p(1.0, 100.0)]),  # too short: left out
            row(False, 4096, [p(110.0, 100.0), p(90.0, 100.0, 110.0)]),
            row(True, 8192, [p(99.0, 100.0, 110.0)]),
        ]
    }
    gain = kp.rescale_gain(run)
    assert gain[False]["gain"] == pytest.approx((1.1 * 0.9) ** 0.5)
    assert (gain[False]["lo"], gain[False]["hi"], gain[False]["passes"]) == (0.9, 1.1, 2)
    assert gain[True]["early_cudnn"] == pytest.approx(0.9) and gain[True]["late_cudnn"] == (
        pytest.approx(100 / 110)
    )
    short = kp.rescale_gain(run, min_seq=1024, max_seq=1024)[False]
    assert short["gain"] == pytest.approx(0.01) and short["passes"] == 1
    with pytest.raises(ValueError, match="no D=64"):
        kp.rescale_gain(run, head_dim=64)
    assert kp.anchor_spread(run) == pytest.approx(0.1)


def test_committed_rescale_run_holds_both_forms_and_a_real_gain_reading():
    run = kp.committed_rescale_run()
    assert run is not None and run["checks"] and all(c["ok"] for c in run["checks"])
    gain = kp.rescale_gain(run)
    for causal in (False, True):
        g = gain[causal]
        assert g["lo"] <= g["gain"] <= g["hi"] and g["passes"] == 9
