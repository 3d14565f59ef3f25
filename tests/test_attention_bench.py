"""Chapter 1 benchmark: the command runs (tiny CPU sweep), the regression guard fires."""

from __future__ import annotations

import copy
import json

import pytest

from mlinfra_lab.attention import bench
from mlinfra_lab.cli import main

pytestmark = pytest.mark.attention


def _result(ms_by_shape: dict[tuple, float]) -> dict:
    rows = [dict(provider="ours", seq=n, head_dim=d, causal=c, mode=m, ms=ms)
            for (n, d, c, m), ms in ms_by_shape.items()]
    return {"rows": rows}


def test_check_baseline_threshold():
    base = _result({(1024, 64, False, "fwd"): 1.0, (1024, 64, False, "bwd"): 2.0})
    ok = _result({(1024, 64, False, "fwd"): 1.05, (1024, 64, False, "bwd"): 1.5})
    slow = _result({(1024, 64, False, "fwd"): 1.15, (1024, 64, False, "bwd"): 2.0})
    assert bench.check_baseline(ok, base) == []
    failures = bench.check_baseline(slow, base)
    assert len(failures) == 1 and "seq=1024" in failures[0] and "fwd" in failures[0]
    assert bench.check_baseline(slow, base, tolerance=0.2) == []


def test_check_baseline_refuses_disjoint_sweeps():
    with pytest.raises(bench.BaselineError, match="no shape in common"):
        bench.check_baseline(_result({(1, 16, False, "fwd"): 1.0}),
                             _result({(2, 16, False, "fwd"): 1.0}))


def test_bench_command_runs_and_guards(tmp_path, capsys):
    """One tiny CPU sweep through the real command, against an impossibly fast baseline."""
    baseline = _result({(32, 16, False, "fwd"): 1e-6, (32, 16, False, "bwd"): 1e-6})
    (tmp_path / "base.json").write_text(json.dumps(baseline))
    out = tmp_path / "r.json"
    rc = main(["bench", "attention", "--out", str(out), "--quiet", "--seqs", "32",
               "--head-dims", "16", "--causal", "no", "--providers", "ours,eager",
               "--check-baseline", str(tmp_path / "base.json")])
    assert rc == 1, "a 1e6x slower run must fail the regression check"
    assert "REGRESSION" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert out.with_suffix(".png").is_file()
    assert {(r["provider"], r["mode"]) for r in result["rows"]} == {
        ("ours", "fwd"), ("ours", "bwd"), ("eager", "fwd"), ("eager", "bwd")}
    assert all(r["error"] is None and r["ms"] > 0 and r["tflops"] > 0 for r in result["rows"])
    assert result["config"]["seqs"] == [32] and result["device"]["torch"]
    assert result["ratios"][0]["vs_eager"] > 0


def test_bench_command_user_errors(tmp_path, capsys):
    assert main(["bench", "attention", "--providers", "ours,nope", "--quiet"]) == 2
    assert "unknown provider" in capsys.readouterr().err
    assert main(["bench", "attention", "--check-baseline", str(tmp_path / "missing.json")]) == 2


def test_committed_h200_results_are_complete_and_plot():
    files = bench.committed_results()
    assert files, "benchmarks/results/h200-attention-*.json is missing"
    result = bench.load_result(files[-1])
    assert result["device"]["device_name"] == "NVIDIA H200" and result["device"]["triton"]
    shapes = {(r["seq"], r["head_dim"], r["causal"], r["mode"]) for r in result["rows"]}
    assert len(shapes) == 5 * 2 * 2 * 2
    for shape in shapes:
        provs = {r["provider"] for r in result["rows"]
                 if (r["seq"], r["head_dim"], r["causal"], r["mode"]) == shape}
        assert provs == set(bench.PROVIDERS), f"{shape}: providers {provs}"
    assert bench.check_baseline(result, copy.deepcopy(result)) == []
    assert "sdpa_flash" in bench.format_table(result)
    bench.plot_results(result)
