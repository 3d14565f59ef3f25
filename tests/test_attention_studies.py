"""Chapter 1's GPU studies read on the CPU: the taught kernels' run, alignment, swizzles."""

from __future__ import annotations

import json

import matplotlib
import pytest

from mlinfra_lab import results
from mlinfra_lab.attention.studies import alignment, study, swizzle

matplotlib.use("Agg")
pytestmark = pytest.mark.attention


def _run(providers_rows, file_name, tmp_path, monkeypatch, date="2026-12-07T00:00:00+00:00"):
    run = {
        "benchmark": "attention",
        "date": date,
        "device": {"device_name": "NVIDIA H100 80GB HBM3", "torch": "t", "triton": "x"},
        "config": {"providers": sorted({r["provider"] for r in providers_rows})},
        "complete": False,
        "matmul_tflops": 700.0,
        "rows": providers_rows,
        "ratios": [],
    }
    (tmp_path / file_name).write_text(json.dumps(run))
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    return run


def _row(provider, mode, tflops, tiles=None):
    return dict(
        provider=provider,
        mode=mode,
        seq=4096,
        head_dim=128,
        causal=False,
        batch=4,
        heads=16,
        tflops=tflops,
        ms=1.0,
        tiles=tiles,
    )


def test_taught_run_relabels_version_1_and_recomputes_ratios(tmp_path, monkeypatch):
    _run(
        [
            _row("ours_v1", "fwd", 400.0, "v1 BLOCK_M: 128"),
            _row("ours_v1", "bwd", 300.0, "dkdv: BLOCK_M: 64; dq: BLOCK_M: 128"),
            _row("sdpa_flash", "fwd", 320.0),
            _row("sdpa_flash", "bwd", 250.0),
        ],
        "h100-attention-2026-12-07-taught.json",
        tmp_path,
        monkeypatch,
    )
    run = study.taught_run()
    assert {r["provider"] for r in run["rows"]} == {"ours", "sdpa_flash"}
    assert run["config"]["providers"][0] == "ours"
    fwd = next(e for e in run["ratios"] if e["mode"] == "fwd")
    assert fwd["vs_sdpa_flash"] == pytest.approx(400 / 320)
    assert run["file"] == "h100-attention-2026-12-07-taught.json"


def test_a_run_with_the_gluon_backward_is_not_the_taught_kernel(tmp_path, monkeypatch):
    _run(
        [
            _row("ours_v1", "fwd", 400.0, "v1 BLOCK_M: 128"),
            _row("ours_v1", "bwd", 350.0, "gluon bwd m64n64"),
        ],
        "h100-attention-2026-12-05.json",
        tmp_path,
        monkeypatch,
    )
    with pytest.raises(study.NoTaughtRunError, match="MLINFRA_ATTENTION_BACKWARD=split"):
        study.taught_run()


def test_the_committed_taught_run_has_version_1_and_the_anchors():
    run = study.taught_run()
    assert run["device"]["device_name"].startswith("NVIDIA H")
    fwd = [r for r in run["rows"] if r["provider"] == "ours" and r["mode"] == "fwd" and r["tiles"]]
    assert fwd and all(study.row_version(r) == 1 for r in fwd)
    assert {"sdpa_flash", "sdpa_cudnn"} <= {r["provider"] for r in run["rows"]}


def test_committed_alignment_and_swizzle_studies_are_readable():
    align = alignment.committed_alignment()
    assert align is not None and align["device"]["device_name"]
    assert {r["head_dim"] for r in align["attention"]} == set(alignment.HEAD_DIMS)
    assert {(r["k"], r["lda"]) for r in align["gemm"]} == set(alignment.GEMM_CASES.values())
    alignment.plot_alignment(align)
    swz = swizzle.committed_swizzle()
    assert swz is not None and swz["kernels"] and swz["counters"]
    for row in swz["counters"]:
        assert set(row) <= {"head_dim", "kernel", *swizzle.SMEM_METRICS}


def test_counter_row_keeps_the_kernel_and_its_metrics_only():
    raw = {"kernel": "_fwd_kernel", "device__attribute_warp_size": 32.0}
    raw.update({m: 1.0 for m in swizzle.SMEM_METRICS})
    assert swizzle.counter_row(raw) == {
        "kernel": "_fwd_kernel",
        **{m: 1.0 for m in swizzle.SMEM_METRICS},
    }


def test_gemm_inputs_use_the_stride_asked_for():
    import torch

    a, b = alignment.gemm_inputs(k=8, lda=11, mn=4, device="cpu", dtype=torch.float32)
    assert a.shape == (4, 8) and a.stride() == (11, 1) and b.shape == (8, 4)
    with pytest.raises(ValueError, match="lda"):
        alignment.gemm_inputs(k=8, lda=7, mn=4, device="cpu", dtype=torch.float32)
