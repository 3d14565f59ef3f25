"""`attention.study`: the default kernel's runs are chosen by what each run recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlinfra_lab.attention.flash import DEFAULT_VERSION
from mlinfra_lab.attention.studies import study

pytestmark = pytest.mark.attention

DEVICE = {"device_name": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0"}


def _row(provider: str, tiles: str | None, mode: str = "fwd", ms: float = 1.0) -> dict:
    return {
        "provider": provider,
        "batch": 4,
        "heads": 16,
        "seq": 4096,
        "head_dim": 128,
        "causal": False,
        "mode": mode,
        "ms": ms,
        "tflops": 400.0,
        "tiles": tiles,
    }


def _run(date: str, tiles: str, extra: list[dict] | None = None) -> dict:
    rows = [_row("ours", tiles), _row("ours", "dkdv: BLOCK_M: 64", "bwd"), _row("sdpa_flash", None)]
    return {
        "benchmark": "attention",
        "date": date,
        "device": DEVICE,
        "complete": True,
        "config": {"providers": ["ours", "ours_v1", "sdpa_flash"]},
        "matmul_tflops": 700.0,
        "rows": rows + (extra or []),
        "ratios": [{"seq": 4096, "vs_sdpa_flash": 1.5, "vs_ours_v1": 1.1}],
    }


@pytest.fixture
def committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(study.results, "committed", lambda p="*": sorted(tmp_path.glob(p)))
    return tmp_path


def test_row_version_reads_the_tiles_record() -> None:
    assert study.row_version(_row("ours", "v5 gluon overlap-m128n64w4s2")) == 5
    assert study.row_version(_row("ours", "v1 BLOCK_M: 128, BLOCK_N: 64")) == 1
    assert study.row_version(_row("ours", "BLOCK_M: 128, BLOCK_N: 64")) == 1  # before the prefix
    assert study.row_version(_row("ours", "dkdv: BLOCK_M: 64", "bwd")) is None
    assert study.row_version(_row("sdpa_flash", None)) is None


def test_only_runs_of_the_default_version_are_chosen_newest_by_date(committed: Path) -> None:
    other = 1 if DEFAULT_VERSION != 1 else 2
    # names sort the other way round from the dates: the choice must follow the dates
    (committed / "a-new.json").write_text(
        json.dumps(_run("2026-12-06T00:00:00", f"v{other} BLOCK_M: 128"))
    )
    (committed / "b-mid.json").write_text(
        json.dumps(_run("2026-12-05T00:00:00", f"v{DEFAULT_VERSION} gluon x"))
    )
    (committed / "c-old.json").write_text(
        json.dumps(_run("2026-12-04T00:00:00", f"v{DEFAULT_VERSION} gluon y"))
    )
    (committed / "d-study.json").write_text(json.dumps({"benchmark": "attention-counters"}))
    runs = study.default_kernel_runs()
    assert [r["file"] for r in runs] == ["c-old.json", "b-mid.json"]
    assert study.newest_default_run()["file"] == "b-mid.json"


def test_no_default_run_fails_loudly(committed: Path) -> None:
    (committed / "x.json").write_text(json.dumps(_run("2026-12-06T00:00:00", "v0 other")))
    with pytest.raises(study.NoDefaultRunError, match="mlinfra-lab bench attention"):
        study.newest_default_run()


def test_default_only_drops_the_other_versions_of_ours() -> None:
    run = _run("2026-12-05", "v5 gluon x", [_row("ours_v1", "v1 BLOCK_M: 128")])
    kept = study.default_only(run)
    assert {r["provider"] for r in kept["rows"]} == {"ours", "sdpa_flash"}
    assert kept["config"]["providers"] == ["ours", "sdpa_flash"]
    assert "vs_ours_v1" not in kept["ratios"][0] and kept["ratios"][0]["vs_sdpa_flash"] == 1.5
    assert any(r["provider"] == "ours_v1" for r in run["rows"]), "the input is not modified"


def test_roofline_intensity_is_flops_over_the_fused_floor() -> None:
    (point,) = study.roofline(_run("2026-12-05", "v5 gluon x"))
    b, h, n, d = 4, 16, 4096, 128
    assert point["intensity"] == pytest.approx(4 * b * h * n * n * d / (4 * b * h * n * d * 2))
    bandwidth_roof = point["intensity"] * study.HBM_BYTES_PER_S["NVIDIA H200"] / 1e12
    assert point["roof"] == pytest.approx(min(700.0, bandwidth_roof))
    assert point["version"] == 5


def test_the_baseline_is_the_default_kernel_on_the_same_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results_dir, baselines = tmp_path / "results", tmp_path / "baselines"
    results_dir.mkdir()
    baselines.mkdir()
    monkeypatch.setattr(study.results, "results_dir", lambda: results_dir)
    other = 1 if DEFAULT_VERSION != 1 else 2
    old_kernel = _run("2026-12-02", f"v{other} BLOCK_M: 128")
    other_gpu = {**_run("2026-12-06", f"v{DEFAULT_VERSION} gluon x"), "device": {**DEVICE}}
    other_gpu["device"]["device_name"] = "NVIDIA H100 80GB HBM3"
    good = _run("2026-12-05", f"v{DEFAULT_VERSION} gluon x")
    for name, run in (("a.json", old_kernel), ("b.json", other_gpu), ("c.json", good)):
        (baselines / name).write_text(json.dumps(run))
    assert study.baseline_for(_run("2026-12-07", "v5 gluon y"))["file"] == "c.json"
    (baselines / "c.json").unlink()
    with pytest.raises(study.NoDefaultRunError, match="benchmarks/baselines"):
        study.baseline_for(_run("2026-12-07", "v5 gluon y"))
