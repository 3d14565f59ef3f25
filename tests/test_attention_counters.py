"""The counters harness on the CPU: ncu's CSV is read right, and the bank cases are the
accesses the model is fed (the measurement itself needs a GPU with ncu: the committed file)."""

from __future__ import annotations

import pytest

from mlinfra_lab.attention.banks import bank_conflict_degree, tile_addresses
from mlinfra_lab.attention.studies import counters

pytestmark = pytest.mark.attention

NCU_OUTPUT = """==PROF== Connected to process 123
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","dram__bytes_read.sum","dram__bytes_write.sum"
"","","","","","","","byte","byte"
"0","123","python3","h","ampere_bf16_s16816gemm","1","7","1,048,576","524,288"
"1","123","python3","h","softmax_warp_forward","1","7","2048","0"
==PROF== Disconnected from process 123
"""


def test_parse_ncu_csv_skips_the_units_row_and_reads_thousands_separators():
    rows = counters.parse_ncu_csv(NCU_OUTPUT)
    assert [r["kernel"] for r in rows] == ["ampere_bf16_s16816gemm", "softmax_warp_forward"]
    assert rows[0]["dram__bytes_read.sum"] == 1_048_576.0 and rows[1]["dram__bytes_write.sum"] == 0


def test_parse_ncu_csv_says_when_nothing_was_profiled():
    with pytest.raises(ValueError, match="no ncu CSV table"):
        counters.parse_ncu_csv("==PROF== No kernels were profiled.\n")


def test_bank_cases_span_conflict_free_to_32_way_and_fit_the_kernel_tile():
    degrees = {
        name: bank_conflict_degree(tile_addresses(**case))
        for name, case in counters.BANK_CASES.items()
    }
    assert degrees["row, fp32 32x32"] == 1 and degrees["column, fp32 32x32"] == 32
    assert degrees["column, fp32 32x32, pad 1"] == 1 == degrees["column, fp32 32x32, swizzle"]
    assert degrees["column, fp32 32x34"] == 2 and degrees["column, fp32 32x16"] == 16
    for case in counters.BANK_CASES.values():
        words = counters._bank_words(case)
        assert len(words) == 32 and max(words) < 2048  # the CUDA kernel's tile holds 2048 words


def test_the_command_without_a_gpu_says_what_it_needs(monkeypatch):
    monkeypatch.setattr(counters.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="ncu .* is not on the PATH"):
        counters.run()


def test_plot_counters_draws_both_panels_from_a_result():
    dram = [
        dict(
            provider=p,
            seq=n,
            read_bytes=1e8 * n / 512,
            write_bytes=1e7,
            model_bytes=1e8 * n / 512,
            model_bytes_kv_rereads=2e8 if p == "ours" else None,
        )
        for p in ("unfused", "ours")
        for n in (512, 1024)
    ]
    banks = [dict(case=name, model_degree=1, measured_degree=1.0) for name in counters.BANK_CASES]
    fig = counters.plot_counters(
        {
            "dram": dram,
            "banks": banks,
            "date": "2026-12-04T00:00:00",
            "device": {"device_name": "NVIDIA H200", "ncu": "ncu 2025"},
        }
    )
    assert len(fig.axes) == 2 and len(fig.axes[1].patches) == 2 * len(counters.BANK_CASES)


def test_kernel_summary_condenses_time_bytes_pipes_and_stalls():
    row = {
        "kernel": "attn_fwd",
        "gpu__time_duration.sum": 1_250_000.0,  # ns
        "dram__bytes_read.sum": 3e8,
        "dram__bytes_write.sum": 1e8,
        "launch__registers_per_thread": 168.0,
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active": 71.5,
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": 0.0,
        "sm__pipe_tensor_op_gmma_cycles_active.max.pct_of_peak_sustained_active": 80.0,
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": 0.4,
        "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": 2.5,
        "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio": 0.0,
        "launch__grid_size": "n/a",  # a value ncu left as text is skipped
    }
    got = counters.kernel_summary(row)
    assert got["kernel"] == "attn_fwd" and got["time_us"] == 1250.0
    assert got["dram_read_bytes"] == 3e8 and got["registers_per_thread"] == 168.0
    assert "grid_size" not in got and "sm_throughput_pct" not in got
    assert list(got["tensor_pipes_pct"].values()) == [71.5, 0.0]
    assert got["stalls_per_issue"] == {"math_pipe_throttle": 2.5, "barrier": 0.4}


def test_the_kernel_profile_without_ncu_says_what_it_needs(monkeypatch):
    monkeypatch.setattr(counters.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="ncu .* is not on the PATH"):
        counters.profile_kernels()
