"""The forward versions' comparison (`attention.case_study`): ratios from one run, and the
committed H200 runs the chapter reads."""

from __future__ import annotations

import pytest

from mlinfra_lab.attention.studies import case_study


def _row(provider, tflops, seq=1024, mode="fwd", d=128, causal=False):
    return dict(provider=provider, tflops=tflops, seq=seq, mode=mode, head_dim=d, causal=causal)


def test_version_table_divides_within_the_run_and_skips_what_did_not_run():
    result = {
        "rows": [
            _row("ours_v1", 400.0),
            _row("ours_v3", 380.0),
            _row("sdpa_cudnn", 500.0),
            _row("sdpa_flash", 320.0),
            _row("ours_v3", None, seq=2048),  # could not run
            _row("ours_v1", 410.0, seq=2048),
            _row("ours_v1", 300.0, mode="bwd"),
        ]
    }
    first, second = case_study.version_table(result)
    assert (first["head_dim"], first["causal"], first["seq"]) == (128, False, 1024)
    assert first["v3_over_v1"] == pytest.approx(0.95)
    assert first["v3_over_cudnn"] == pytest.approx(0.76)
    assert first["v1_over_cudnn"] == pytest.approx(0.8)
    assert "v3" not in second and second["v1"] == 410.0 and second["v1_over_cudnn"] is None
    assert [r["v1"] for r in case_study.version_table(result, "bwd")] == [300.0]


def test_committed_runs_timed_v1_and_v3_side_by_side_with_cudnn():
    runs = case_study.committed_version_runs()
    assert len(runs) >= 2, "the chapter's version-3 section needs the two committed runs"
    for run in runs:
        assert run["device"]["device_name"] == "NVIDIA H200" and run["date"]
        rows = case_study.version_table(run)
        assert {(r["head_dim"], r["causal"]) for r in rows} == {
            (64, False),
            (64, True),
            (128, False),
            (128, True),
        }
        assert all(r["v3_over_v1"] and r["v3_over_cudnn"] for r in rows)
    ax = case_study.plot_version_ratios(runs)
    assert len(ax.get_lines()) > 8  # v3 for every run and class, v2 where a run timed it


def test_the_chapter_s_summary_comes_from_the_runs_and_sets_the_lone_worst_timing_apart():
    runs = case_study.committed_version_runs()
    s = case_study.version_summary(runs)
    every_128 = sorted(
        r["v3_over_v1"]
        for run in runs
        for r in case_study.version_table(run)
        if r["head_dim"] == 128
    )
    assert s["worst"] == every_128[0] and s["d128_lo"] == every_128[1]
    assert s["d128_hi"] == every_128[-1] and s["worst"] <= s["worst_other"]
    assert s["d64_lo"] <= s["d64_hi"] and s["over_v2_1k_lo"] <= s["over_v2_1k_hi"]
    assert s["cudnn_lo"] <= s["cudnn_hi"] < 1  # still short of cuDNN (issue 13)


def test_the_v4_runs_timed_v1_and_v4_with_the_anchors_and_their_ranges_come_from_them():
    runs = case_study.committed_version_runs(case_study.OVERLAP_RUNS_PATTERN)
    assert len(runs) >= 2, "the chapter's version-4 section needs two committed runs"
    assert all("autotuned" not in run["file"] for run in runs)  # anchors in every run
    every = {64: [], 128: []}
    for run in runs:
        for r in case_study.version_table(run):
            assert r["v4_over_v1"] and r["v4_over_cudnn"] and r["sdpa_flash"]
            every[r["head_dim"]].append(r["v4_over_v1"])
    s = case_study.version_ranges(runs, 4)
    assert (s["d64_lo"], s["d64_hi"]) == (min(every[64]), max(every[64]))
    assert (s["d128_lo"], s["d128_hi"]) == (min(every[128]), max(every[128]))
    assert s["runs"] == len(runs) and s["cudnn_lo"] <= s["cudnn_hi"]
    with pytest.raises(ValueError, match="ours_v4"):
        case_study.version_ranges(case_study.committed_version_runs(), 4)  # v1-v3 runs: no v4
