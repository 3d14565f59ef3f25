"""The two techniques chapter 1 tried (`attention.case_study`): the 5-matmul backward's
ratios from one run, and the committed H200 runs and warp-specialisation probe it reads."""

from __future__ import annotations

import pytest

from mlinfra_lab.attention.studies import case_study


def _row(provider, tflops, seq=1024, mode="bwd", d=128, causal=False):
    return dict(provider=provider, tflops=tflops, seq=seq, mode=mode, head_dim=d, causal=causal)


def test_backward_table_divides_within_the_run_and_skips_what_did_not_run():
    result = {
        "rows": [
            _row("ours_v1", 400.0),
            _row("ours_atomic", 300.0),
            _row("sdpa_cudnn", 500.0),
            _row("ours_atomic", 350.0, mode="fwd"),  # a forward row is not the backward
            _row("ours_v1", 410.0, seq=2048),
            _row("ours_atomic", None, seq=2048),  # could not run
        ]
    }
    first, second = case_study.backward_table(result)
    assert (first["head_dim"], first["causal"], first["seq"]) == (128, False, 1024)
    assert first["atomic_over_split"] == pytest.approx(0.75)
    assert first["split_over_cudnn"] == pytest.approx(0.8)
    assert second["atomic"] is None and second["atomic_over_split"] is None
    with pytest.raises(ValueError, match="ours_atomic"):
        case_study.backward_summary([{"rows": [_row("ours_v1", 1.0)]}])


def test_committed_backward_runs_timed_both_backwards_with_the_anchors_on_every_shape():
    runs = case_study.committed_backward_runs()
    assert len(runs) >= 2, "the chapter's section needs two committed runs"
    for run in runs:
        assert run["device"]["device_name"] == "NVIDIA H200" and run["date"]
        rows = case_study.backward_table(run)
        assert len(rows) == 20  # D 64/128 x causal or not x N 1k..16k
        assert all(r["atomic_over_split"] and r["split_over_cudnn"] and r["flash"] for r in rows)
    s = case_study.backward_summary(runs)
    every = sorted(r["atomic_over_split"] for run in runs for r in case_study.backward_table(run))
    assert (s["lo"], s["hi"]) == (every[0], every[-1]) and s["shapes"] == 20
    assert s["d64_lo"] <= s["d64_hi"] and s["d128_lo"] <= s["d128_hi"]
    assert s["split_cudnn_lo"] <= s["split_cudnn_hi"]
    t = case_study.atomic_traffic(runs[-1])
    assert t["atomic_mib"] == (4096 // t["block_n"]) * 4096 * 128 * 4 / 2**20 and t["dq_mib"] == 1.0
    ax = case_study.plot_backward_ratios(runs)
    assert len(ax.get_lines()) == 4 * len(runs) + 1  # each class per run, and the 1.0 line


def test_the_probe_record_says_what_compiled_and_whether_the_loop_was_split():
    record = case_study.warp_specialize_probe()
    assert record is not None and record["device"]["triton"]
    s = case_study.probe_summary(record)
    assert s["cases"] == s["w4_cases"] + s["w8_cases"] == 8
    for warps in (4, 8):
        assert 0 <= s[f"w{warps}_partitioned"] <= s[f"w{warps}_compiled"] <= s[f"w{warps}_cases"]
    if s["w4_compiled"] < s["w4_cases"]:
        assert s["compiler"], "a failed compile keeps the compiler's message"
    fake = {"cases": [dict(num_warps=4, compiled=False, compiler="boom\nmore")]}
    assert case_study.probe_summary(fake)["compiler"] == "boom"
    assert case_study.probe_summary(fake)["speedup_lo"] is None
