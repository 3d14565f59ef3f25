"""Version 5's committed H200 runs, read by chapter 1 (`attention.case_study`): the tables
and ranges are recomputed here from the raw rows, so a helper that misreads a file fails."""

from __future__ import annotations

import pytest

from mlinfra_lab.attention.studies import case_study

pytestmark = pytest.mark.attention


def test_configuration_runs_were_checked_and_name_their_best():
    runs = case_study.committed_config_runs()
    assert len(runs) >= 2, "the configuration search ran at least twice"
    for run in runs:
        assert run["device"] == "NVIDIA H200" and run["triton"] and run["date"]
        assert run["checks"] and all(c["ok"] for c in run["checks"]), run["file"]
        table = case_study.config_table(run)
        assert len(table) == 20
        for r in table:
            assert r["best_tflops"] == max(r["configs"].values())
            assert r["configs"][r["best"]] == r["best_tflops"]
    gains = case_study.schedule_gain(runs)
    raw = [
        row["tflops"]["overlap-m128n64w4s2"] / row["tflops"]["plain-m128n64w4s2"]
        for run in runs
        for row in run["rows"]
        if row["head_dim"] == 128 and "plain-m128n64w4s2" in row["tflops"]
    ]
    assert gains == pytest.approx(raw) and gains


def test_default_sweeps_say_which_kernel_ran_and_their_ranges_hold():
    runs = case_study.committed_default_runs()
    assert len(runs) >= 2, "the default kernel was swept at least twice"
    rows = []
    for run in runs:
        table = case_study.default_table(run)
        assert len(table) == 20
        raw = {
            (r["head_dim"], r["causal"], r["seq"], r["provider"]): r["tflops"]
            for r in run["rows"]
            if r["mode"] == "fwd"
        }
        for r in table:
            key = (r["head_dim"], r["causal"], r["seq"])
            assert r["over_v1"] == pytest.approx(raw[(*key, "ours")] / raw[(*key, "ours_v1")])
            assert r["ran"].startswith(("v5 gluon", "v1 "))
        rows += table
    ranges = case_study.default_ranges(runs)
    below = [r for r in rows if r["over_sdpa_flash"] < 1.25]
    assert ranges["below_bar"] == len(below) and ranges["runs"] == len(runs)
    assert sum(ranges["below_bar_per_run"]) == len(below)
    assert ranges["flash_lo"] == min(r["over_sdpa_flash"] for r in rows)
    v5 = [r["over_v1"] for r in rows if r["ran"].startswith("v5")]
    assert (ranges["v1_lo"], ranges["v1_hi"]) == (min(v5), max(v5))
    long128 = [r["over_sdpa_cudnn"] for r in rows if r["head_dim"] == 128 and r["seq"] >= 4096]
    assert ranges["cudnn128_lo"] == min(long128)
    assert case_study.plot_default_ratios(runs) is not None
    with pytest.raises(ValueError, match="no default-kernel sweep"):
        case_study.default_ranges([])
