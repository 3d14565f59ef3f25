"""Chapter 1 benchmark: the command runs (tiny CPU sweep), the regression guard fires."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from mlinfra_lab.attention import bench
from mlinfra_lab.cli import main

pytestmark = pytest.mark.attention


def _result(ms_by_shape: dict[tuple, float]) -> dict:
    rows = [
        dict(provider="ours", seq=n, head_dim=d, causal=c, mode=m, ms=ms)
        for (n, d, c, m), ms in ms_by_shape.items()
    ]
    return {"rows": rows}


def test_check_baseline_threshold():
    base = _result({(1024, 64, False, "fwd"): 1.0, (1024, 64, False, "bwd"): 2.0})
    ok = _result({(1024, 64, False, "fwd"): 1.05, (1024, 64, False, "bwd"): 1.5})
    slow = _result({(1024, 64, False, "fwd"): 1.15, (1024, 64, False, "bwd"): 2.0})
    assert bench.check_baseline(ok, base) == []
    failures = bench.check_baseline(slow, base)
    assert len(failures) == 1 and "seq=1024" in failures[0] and "fwd" in failures[0]
    assert bench.check_baseline(slow, base, tolerance=0.2) == []


def test_check_baseline_refuses_a_baseline_of_another_kernel():
    """A baseline of version 1 (or the Triton backward) cannot guard version 5 (or Gluon's):
    the shape fails with a re-baseline message, however fast it ran."""
    base = _result({(1024, 64, False, "fwd"): 1.0, (1024, 64, False, "bwd"): 2.0})
    base["rows"][0]["tiles"] = "BLOCK_M: 128, BLOCK_N: 64, num_warps: 8"  # a v1 run's record
    base["rows"][1]["tiles"] = "dkdv: BLOCK_M: 64, BLOCK_N: 64"  # the Triton split backward
    now = _result({(1024, 64, False, "fwd"): 0.5, (1024, 64, False, "bwd"): 1.0})
    now["rows"][0]["tiles"] = "v5 gluon overlap-m128n64w4s2"
    now["rows"][1]["tiles"] = "gluon kv-m64n64w4s2.q-m64n64w4s2"
    failures = bench.check_baseline(now, base)
    assert len(failures) == 2
    bwd, fwd = failures  # sorted by shape: "bwd" < "fwd"
    assert "fwd: this run timed kernel v5, the baseline v1" in fwd and "re-baseline" in fwd
    assert "bwd: this run timed kernel gluon, the baseline split" in bwd
    same = copy.deepcopy(now)
    assert bench.check_baseline(now, same) == []
    assert [bench.row_kernel(r) for r in base["rows"]] == ["v1", "split"]


def test_check_baseline_refuses_disjoint_sweeps():
    with pytest.raises(bench.BaselineError, match="no shape in common"):
        bench.check_baseline(
            _result({(1, 16, False, "fwd"): 1.0}), _result({(2, 16, False, "fwd"): 1.0})
        )


def test_bench_command_runs_and_guards(tmp_path, capsys):
    """One tiny CPU sweep through the real command, against an impossibly fast baseline."""
    baseline = _result({(32, 16, False, "fwd"): 1e-6, (32, 16, False, "bwd"): 1e-6})
    (tmp_path / "base.json").write_text(json.dumps(baseline))
    out = tmp_path / "r.json"
    rc = main(
        [
            "bench",
            "attention",
            "--out",
            str(out),
            "--quiet",
            "--seqs",
            "32",
            "--head-dims",
            "16",
            "--causal",
            "no",
            "--providers",
            "ours,eager",
            "--check-baseline",
            str(tmp_path / "base.json"),
        ]
    )
    assert rc == 1, "a 1e6x slower run must fail the regression check"
    assert "REGRESSION" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert out.with_suffix(".png").is_file()
    assert {(r["provider"], r["mode"]) for r in result["rows"]} == {
        ("ours", "fwd"),
        ("ours", "bwd"),
        ("eager", "fwd"),
        ("eager", "bwd"),
    }
    assert all(r["error"] is None and r["ms"] > 0 and r["tflops"] > 0 for r in result["rows"])
    assert result["config"]["seqs"] == [32] and result["device"]["torch"]
    assert result["ratios"][0]["vs_eager"] > 0 and result["complete"] is True


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU path (the GPU run is committed)")
def test_flex_anchor_and_repeats_on_cpu(tmp_path):
    """FlexAttention runs as an anchor (eager on a CPU), every timing is kept, and the ratios
    carry their spread over the repeats."""
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "bench",
                "attention",
                "--out",
                str(out),
                "--quiet",
                "--seqs",
                "32",
                "--head-dims",
                "16",
                "--causal",
                "yes",
                "--providers",
                "ours,flex",
                "--repeats",
                "2",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    rows = {(r["provider"], r["mode"]): r for r in result["rows"]}
    assert "no backward on a CPU" in rows["flex", "bwd"]["error"]
    timed = [r for key, r in rows.items() if key != ("flex", "bwd")]
    assert all(r["error"] is None and len(r["ms_runs"]) == 2 for r in timed)
    assert rows["flex", "fwd"]["compile_s"] > 0
    (fwd,) = [e for e in result["ratios"] if e["mode"] == "fwd"]
    assert 0 < fwd["vs_flex_min"] <= fwd["vs_flex_max"]


def test_check_anchor_uses_the_worst_repeat():
    def res(runs_ours, runs_flash, anchor="sdpa_flash"):
        rows = [
            dict(
                provider=p,
                seq=1024,
                head_dim=64,
                causal=False,
                mode="fwd",
                ms=sorted(r)[len(r) // 2],
                tflops=1 / sorted(r)[len(r) // 2],
                ms_runs=r,
            )
            for p, r in (("ours", runs_ours), (anchor, runs_flash))
        ]
        return {"rows": rows, "ratios": bench.ratios(rows)}

    assert bench.check_anchor(res([1.0, 1.0, 1.0], [1.3, 1.3, 1.3])) == []
    # the medians say 1.3x, but one repeat ran at 1.1x: that fails
    failures = bench.check_anchor(res([1.0, 1.0, 1.0], [1.3, 1.1, 1.3]))
    assert len(failures) == 1 and "1.10x" in failures[0]
    with pytest.raises(bench.BaselineError, match="no fwd timing of sdpa_cudnn"):
        bench.check_anchor(res([1.0], [1.3]), "sdpa_cudnn")
    # FlexAttention's bar (`--min-vs-flex`, 1.0x): level passes, one slower repeat fails
    assert bench.check_anchor(res([1.0, 1.0], [1.0, 1.05], "flex"), "flex", 1.0) == []
    failures = bench.check_anchor(res([1.0, 1.0], [1.05, 0.95], "flex"), "flex", 1.0)
    assert len(failures) == 1 and "0.95x flex" in failures[0]


def test_bench_command_user_errors(tmp_path, capsys):
    assert main(["bench", "attention", "--providers", "ours,nope", "--quiet"]) == 2
    assert "unknown provider" in capsys.readouterr().err
    assert main(["bench", "attention", "--providers", "ours,ours_v3,ours_atomic", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "['ours_atomic', 'ours_v3']" in err and "removed" in err and "687b216" in err
    assert main(["bench", "attention", "--check-baseline", str(tmp_path / "missing.json")]) == 2
    assert main(["bench", "attention", "--repeats", "0", "--quiet"]) == 2
    assert "--repeats must be at least 1" in capsys.readouterr().err


def test_committed_h200_results_are_complete_and_plot():
    files = bench.committed_results()
    assert files, "benchmarks/results/h200-attention-*.json is missing"
    result = bench.load_result(files[-1])
    assert result["device"]["device_name"] == "NVIDIA H200" and result["device"]["triton"]
    shapes = {(r["seq"], r["head_dim"], r["causal"], r["mode"]) for r in result["rows"]}
    assert len(shapes) == 5 * 2 * 2 * 2
    for shape in shapes:
        provs = {
            r["provider"]
            for r in result["rows"]
            if (r["seq"], r["head_dim"], r["causal"], r["mode"]) == shape
        }
        assert provs == set(result["config"]["providers"]), f"{shape}: providers {provs}"
        assert {"ours", "sdpa_flash", "sdpa_cudnn"} <= provs
    assert bench.check_baseline(result, copy.deepcopy(result)) == []
    assert "sdpa_flash" in bench.format_table(result)
    bench.plot_results(result)
