"""Real processes on shared memory, and the command line."""

import json

import numpy as np
import pytest

from mlinfra_lab import staleness as st
from mlinfra_lab.cli import main

pytestmark = pytest.mark.staleness


def test_hogwild_measures_real_staleness():
    r = st.run_hogwild(st.logreg_problem(), workers=2, updates=120, lr=0.5, seed=0)
    assert r.staleness.shape == (120,) and (r.staleness >= 0).all()
    assert set(np.unique(r.worker)) <= {0, 1}
    assert r.final_loss < 0.5 * r.initial_loss


def test_hogwild_bad_arguments():
    with pytest.raises(st.StalenessConfigError):
        st.run_hogwild(st.logreg_problem(), workers=0)
    with pytest.raises(st.StalenessConfigError):
        st.run_hogwild(st.logreg_problem(), workers=2, slowdown=[0.1])


def test_bench_writes_json(tmp_path):
    out = tmp_path / "staleness.json"
    code = main(
        [
            "bench",
            "staleness",
            "--workers",
            "4",
            "--updates",
            "100",
            "--repeats",
            "1",
            "--output",
            str(out),
        ]
    )
    assert code == 0
    record = json.loads(out.read_text())
    assert record["last_run"]["updates"] == 100 and record["best_seconds"] > 0


def test_simulate_command_reports_user_errors(capsys):
    assert main(["staleness", "simulate", "--lr", "nan", "--updates", "10"]) == 2
    assert "lr must be a finite number" in capsys.readouterr().err
    assert main(["staleness", "simulate", "--updates", "20", "--policy", "zhang"]) == 0
    assert json.loads(capsys.readouterr().out)["updates"] == 20
