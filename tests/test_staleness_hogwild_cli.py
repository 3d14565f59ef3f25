"""Real processes on shared memory, and the command line."""

import dataclasses
import json
import multiprocessing

import numpy as np
import pytest
import torch

from mlinfra_lab import staleness as st
from mlinfra_lab.cli import main

pytestmark = pytest.mark.staleness


def test_hogwild_measures_real_staleness():
    r = st.run_hogwild(st.logreg_problem(), workers=2, updates=120, lr=0.5, seed=0)
    assert r.staleness.shape == (120,) and (r.staleness >= 0).all()
    assert set(np.unique(r.worker)) <= {0, 1}
    assert r.final_loss < 0.5 * r.initial_loss


@pytest.mark.parametrize("method", ["spawn"])
def test_hogwild_runs_under_spawn(method):
    """The start method a CUDA process needs (no fork) trains the same problem."""
    r = st.run_hogwild(
        st.logreg_problem(), workers=2, updates=60, lr=0.5, seed=0, start_method=method
    )
    assert r.staleness.shape == (60,) and (r.staleness >= 0).all()
    assert r.final_loss < r.initial_loss


@dataclasses.dataclass(frozen=True)
class _FailsInWorker(st.Problem):
    """A problem whose gradient raises in a worker process only (the parent's warm-up works)."""

    def batched_grads(self, params, idx):
        if multiprocessing.parent_process() is not None:
            raise ValueError("planted failure in the worker")
        return super().batched_grads(params, idx)


def test_hogwild_worker_error_is_quoted():
    base = st.logreg_problem()
    failing = _FailsInWorker(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    with pytest.raises(st.HogwildWorkerError, match="planted failure in the worker"):
        st.run_hogwild(failing, workers=2, updates=20, lr=0.5, seed=0)


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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_hogwild_after_cuda_is_initialised():
    """A GPU notebook has a CUDA context before chapter 5's Hogwild cell: workers must not fork."""
    torch.zeros(1, device="cuda")  # what a notebook's first cell does on a GPU
    assert torch.cuda.is_initialized()
    r = st.run_hogwild(st.logreg_problem(), workers=3, updates=60, lr=0.5, seed=0)
    assert r.staleness.shape == (60,) and (r.staleness >= 0).all()
