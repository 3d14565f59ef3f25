"""`profiling.quiet_kineto`: Kineto's progress lines go, every other stderr line stays."""

from __future__ import annotations

import os

import pytest
import torch

from mlinfra_lab.profiling import NOISE, quiet_kineto

pytestmark = pytest.mark.attention

START = b"USDT:2026-12-05 16:08:44 26270:26270 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
STAGE = b"STAGE:2026-12-05 15:50:25 8558:8558 SyncActivityProfilerHandler.cpp:60] Completed Stage\n"


def test_the_pattern_matches_only_the_progress_formats() -> None:
    assert NOISE.match(START.decode()) and NOISE.match(STAGE.decode())
    for kept in (
        "ERROR:2026-12-05 16:08:44 1:1 CuptiActivityProfiler.cpp:10] CUPTI failed",
        "USDT is a probe mechanism",
        "[W kineto] something went wrong",
    ):
        assert not NOISE.match(kept)


def test_native_writes_are_filtered_and_the_rest_is_kept(capfd: pytest.CaptureFixture) -> None:
    with quiet_kineto():
        os.write(2, START)
        os.write(2, b"a native error line\n")
        os.write(2, STAGE)
    err = capfd.readouterr().err
    assert "a native error line" in err
    assert "USDT:" not in err and "STAGE:" not in err


def test_a_profiled_call_prints_no_progress_line(capfd: pytest.CaptureFixture) -> None:
    x = torch.randn(1, 2, 16, 8)
    with quiet_kineto(), torch.autograd.profiler.profile() as prof:
        torch.nn.functional.scaled_dot_product_attention(x, x, x)
    assert any("attention" in e.name for e in prof.function_events)
    assert "USDT:" not in capfd.readouterr().err


def test_an_exception_in_the_block_restores_stderr(capfd: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError), quiet_kineto():
        os.write(2, b"kept before the error\n")
        raise ValueError("boom")
    os.write(2, b"after the block\n")
    err = capfd.readouterr().err
    assert "kept before the error" in err and "after the block" in err
