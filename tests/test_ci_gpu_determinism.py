"""Chapter 3: the GPU benchmark of deterministic algorithms, on the CPU path and on CUDA.

No test asserts a time. On the CPU the code path runs at toy sizes (every kernel there is
already repeatable); on a CUDA device the deterministic setting must make two runs agree.
"""

import pytest
import torch

from mlinfra_lab.ci import NoCudaDeviceError, measure_gpu_determinism_cost

pytestmark = pytest.mark.ci


def test_the_cpu_path_runs_and_reports_both_settings():
    out = measure_gpu_determinism_cost(device="cpu", steps=2, rounds=2, batch=8, width=2)
    assert out["device"] == "cpu" and out["steps"] == 2
    for setting in ("default", "deterministic"):
        assert out[setting]["repeatable"] is True  # CPU kernels here have no atomics
        assert out[setting]["q1_ms"] <= out[setting]["median_ms"] <= out[setting]["q3_ms"]
    assert out["ratio_deterministic"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a CPU-only host")
def test_without_cuda_the_benchmark_says_where_to_run_it():
    with pytest.raises(NoCudaDeviceError, match="needs a CUDA device"):
        measure_gpu_determinism_cost()
    with pytest.raises(ValueError, match="need steps >= 2"):
        measure_gpu_determinism_cost(device="cpu", steps=1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_deterministic_algorithms_make_two_runs_agree():
    out = measure_gpu_determinism_cost(steps=5, rounds=2, batch=64, width=16)
    assert out["deterministic"]["repeatable"]
