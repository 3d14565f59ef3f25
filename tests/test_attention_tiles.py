"""`time_forward_tile`: config validation and the CPU refusal (CPU); one timed config (GPU)."""

from __future__ import annotations

import math

import pytest
import torch

from mlinfra_lab.attention import (
    TileConfigError,
    TileTiming,
    TileTimingNeedsGPUError,
    time_forward_tile,
)
from mlinfra_lab.attention.tiles import check_tile_config

pytestmark = pytest.mark.attention


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((48, 64), {}, "block_m=48"),
        ((64, 8), {}, "block_n=8"),
        ((512, 64), {}, "block_m=512"),
        ((64, 64, 3), {}, "num_warps=3"),
        ((64, 64, 32), {}, "num_warps=32"),
        ((64, 64, 4, 0), {}, "num_stages=0"),
        ((64, 128), {"causal": True}, "multiple of block_n"),
        ((64, 64), {"seq": 0}, "seq=0"),
        ((64, 64), {"head_dim": 256}, "head_dim=256"),
        ((64, 64), {"version": 5}, "version=5"),
    ],
)
def test_invalid_configs_are_refused_with_advice(args, kwargs, match):
    with pytest.raises(TileConfigError, match=match):
        check_tile_config(*args, **kwargs)
    with pytest.raises(TileConfigError, match=match):  # before any GPU check
        time_forward_tile(*args, **kwargs)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_a_removed_version_says_where_its_code_is(version):
    from mlinfra_lab.attention import RemovedKernelError

    with pytest.raises(RemovedKernelError, match=f"kernel version {version} was removed.*687b216"):
        check_tile_config(64, 64, version=version)


@pytest.mark.parametrize(
    "args, kwargs",
    [((128, 64, 8, 3), {}), ((64, 128, 4, 2), {}), ((128, 32), {"causal": True, "head_dim": 80})],
)
def test_valid_configs_pass_the_check(args, kwargs):
    assert check_tile_config(*args, **kwargs) is None


def test_cpu_refuses_to_time_with_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TileTimingNeedsGPUError, match="needs a CUDA GPU"):
        time_forward_tile(128, 64, 8, 3, batch=1, heads=1, seq=128)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_times_one_config_and_matches_the_autotuned_kernel():
    t = time_forward_tile(
        64,
        32,
        4,
        2,
        batch=1,
        heads=4,
        seq=1000,
        head_dim=80,
        causal=True,
        warmup_ms=5,
        rep_ms=20,
    )
    assert isinstance(t, TileTiming)
    assert t.error is None, t.error
    assert t.ms > 0 and t.tflops > 0
    # bf16 outputs of two tile orders: a few bf16 ulps of values of order 1
    assert not math.isnan(t.max_abs_diff) and t.max_abs_diff < 3e-2, t.max_abs_diff


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_reports_an_oversized_config_as_an_error_not_an_exception():
    t = time_forward_tile(
        256, 256, 4, 6, batch=1, heads=2, seq=512, head_dim=128, warmup_ms=5, rep_ms=20
    )
    assert t.error is not None and t.ms is None and t.tflops is None
