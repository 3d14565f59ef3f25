"""The counters harness on the CPU: ncu's CSV is read right, and the bank cases are the
accesses the model is fed (the measurement itself needs a GPU with ncu: the committed file)."""

from __future__ import annotations

import pytest

from mlinfra_lab.attention import counters
from mlinfra_lab.attention.banks import bank_conflict_degree, tile_addresses

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
