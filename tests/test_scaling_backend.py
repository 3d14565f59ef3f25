"""The process-group backend: NCCL only where every local rank has a GPU of its own."""

import pytest
import torch

from mlinfra_lab.errors import MlinfraError
from mlinfra_lab.scaling import RunConfig, profile
from mlinfra_lab.scaling.harness import BackendError, resolve_backend


def _gpus(monkeypatch, n: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)


@pytest.mark.parametrize(
    ("gpus", "ranks", "expected"),
    [
        (0, 1, "gloo"),
        (0, 2, "gloo"),
        (1, 1, "nccl"),
        (1, 2, "gloo"),  # a Colab: two ranks would share its one GPU
        (8, 4, "nccl"),
        (8, 8, "nccl"),
        (8, 9, "gloo"),
    ],
)
def test_auto_picks_nccl_only_with_a_gpu_per_rank(monkeypatch, gpus, ranks, expected):
    _gpus(monkeypatch, gpus)
    assert resolve_backend("auto", ranks) == expected
    assert resolve_backend("gloo", ranks) == "gloo"


def test_nccl_with_too_few_gpus_says_what_to_do(monkeypatch):
    _gpus(monkeypatch, 1)
    with pytest.raises(BackendError, match="one GPU per rank: 2 ranks, 1 GPU") as err:
        resolve_backend("nccl", 2)
    assert isinstance(err.value, MlinfraError) and "gloo" in str(err.value)
    with pytest.raises(BackendError, match="unknown backend 'mpi'"):
        resolve_backend("mpi", 1)


def test_profile_refuses_nccl_before_starting_any_rank(monkeypatch):
    _gpus(monkeypatch, 0)
    with pytest.raises(BackendError, match="0 GPU"):
        profile(RunConfig(steps=1, warmup=0, backend="nccl"), 2, show_progress=False)
