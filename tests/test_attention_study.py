"""Chapter 1 GPU study: the committed H200 study file is complete and its readers work."""

from __future__ import annotations

import matplotlib
import pytest

from mlinfra_lab.attention.studies import gpu_study

matplotlib.use("Agg")
pytestmark = pytest.mark.attention


def _fake_study() -> dict:
    rows = []
    for prov, tf in (("ours_v1", 400.0), ("ours_v2", 440.0), ("sdpa_flash", 300.0)):
        for mode in ("fwd", "bwd"):
            rows.append(
                dict(
                    provider=prov,
                    seq=8192,
                    head_dim=128,
                    causal=False,
                    mode=mode,
                    tflops=tf,
                    ms=1.0,
                )
            )
    memory = [
        dict(
            provider=p, seq=n, fwd_bwd_peak_bytes=(n * n if p == "eager" else 1000 * n), error=None
        )
        for p in ("eager", "sdpa_flash", "ours")
        for n in (1024, 2048)
    ]
    memory.append(dict(provider="eager", seq=4096, fwd_bwd_peak_bytes=None, error="OOM"))
    tiles = [
        dict(
            version=1,
            block_m=bm,
            block_n=64,
            num_warps=8,
            num_stages=3,
            seq=8192,
            head_dim=128,
            tflops=tf,
            error=None if tf else "OutOfResources",
        )
        for bm, tf in ((64, 300.0), (128, 450.0), (256, None))
    ]
    return {"rows": rows, "memory": memory, "tiles": tiles}


def test_version_rows_pairs_v1_and_v2_of_one_shape():
    (row,) = gpu_study.version_rows(_fake_study(), "fwd")
    assert (row["seq"], row["head_dim"], row["causal"]) == (8192, 128, False)
    assert row["v2_over_v1"] == pytest.approx(1.1) and row["sdpa_cudnn"] is None


def test_plots_draw_every_point_and_mark_failures():
    study = _fake_study()
    ax = gpu_study.plot_memory(study)
    assert {line.get_label() for line in ax.get_lines()} == {"eager", "sdpa_flash", "ours"}
    assert any("out of memory" in t.get_text() for t in ax.texts)
    ax = gpu_study.plot_tiles(study, version=1)
    assert [p.get_height() for p in ax.patches] == [300.0, 450.0, 0.0]
    assert any(t.get_text() == "failed" for t in ax.texts)


def test_study_refuses_a_cpu(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CPU-only check")
    assert gpu_study.main(["--out", "."]) == 2
    assert "CUDA" in capsys.readouterr().err


def test_committed_study_is_complete():
    study = gpu_study.committed_study()
    assert study is not None, "benchmarks/results/h200-attention-2026-12-02-v2.json is missing"
    assert study["device"]["device_name"] == "NVIDIA H200" and study["device"]["triton"]
    assert study["correctness"] and all(c["ok"] for c in study["correctness"])
    assert {c["version"] for c in study["correctness"]} == {1, 2}
    rows = gpu_study.version_rows(study, "fwd")
    assert len(rows) == 5 * 2 * 2 and all(r["v1"] and r["v2"] and r["sdpa_flash"] for r in rows)
    mem = {(r["provider"], r["seq"]): r["fwd_bwd_peak_bytes"] for r in study["memory"]}
    # linear for ours (16x the tokens: at most ~17x the bytes), quadratic for eager
    assert mem[("ours", 16384)] < 17 * mem[("ours", 1024)]
    assert mem[("eager", 16384)] > 100 * mem[("eager", 1024)]
    assert mem[("ours", 16384)] <= 1.5 * mem[("sdpa_flash", 16384)]
    assert sum(1 for t in study["tiles"] if t["tflops"]) >= 8


def test_describe_tiles_names_each_versions_best_config():
    study = gpu_study.committed_study()
    text = gpu_study.describe_tiles(study)
    for version in (1, 2):
        rows = [r for r in study["tiles"] if r["version"] == version and r["tflops"]]
        best = max(rows, key=lambda r: r["tflops"])
        assert f"v{version} best {best['block_m']}x{best['block_n']}" in text
        assert f"{best['tflops']:.0f} TFLOP/s" in text
