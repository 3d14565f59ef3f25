"""GPU counters through NVML: unit conversion, validation, and the fallback without a GPU."""

from __future__ import annotations

import pytest
import torch

from mlinfra_lab.scaling import (
    GpuCounters,
    NvmlUnavailable,
    describe_counters,
    read_counters,
    sample_counters,
)

pytestmark = pytest.mark.scaling


def test_raw_nvml_units_become_fractions_and_watts():
    c = GpuCounters.from_raw(
        3, "NVIDIA H200", 97, 41, 80 * 2**30, 141 * 2**30, 612_500, 700_000, 55
    )
    assert (c.gpu_util, c.memory_util) == pytest.approx((0.97, 0.41))
    assert (c.power_w, c.power_limit_w) == pytest.approx((612.5, 700.0))
    assert str(c) == (
        "GPU 3 (NVIDIA H200): utilisation 97%, memory busy 41%, 80.0 of 141.0 GiB "
        "used, 612 W of 700 W, 55 C"
    )
    bare = GpuCounters.from_raw(0, "vGPU", 0, 0, 0, 2**30, None, None, None)
    assert bare.power_w is None and "power n/a" in str(bare) and " C" not in str(bare)


@pytest.mark.parametrize(
    "args, message",
    [
        ((101, 0, 0, 1), "GPU utilisation 101 is not a percentage"),
        ((0, -1, 0, 1), "memory utilisation -1 is not a percentage"),
        ((0, 0, 5, 4), "memory used 5 is not within"),
    ],
)
def test_impossible_readings_are_refused(args, message):
    util, mem_util, used, total = args
    with pytest.raises(ValueError, match=message):
        GpuCounters.from_raw(0, "x", util, mem_util, used, total, None, None, None)


def test_counters_here_or_a_fallback_that_says_why():
    ran = []
    if torch.cuda.is_available():  # `make test-gpu`: the driver is there, so are the counters
        counters = read_counters()
        assert counters and all(0 <= c.gpu_util <= 1 for c in counters)
        result, samples = sample_counters(lambda: ran.append(1) or "done", interval_s=0.05)
        assert result == "done" and samples and len(samples[0]) == len(counters)
        assert describe_counters().startswith("GPU 0 (")
        return
    with pytest.raises(NvmlUnavailable, match="no NVIDIA driver|not installed"):
        read_counters()
    with pytest.raises(NvmlUnavailable):
        sample_counters(lambda: ran.append(1))
    assert ran == [], "without NVML the workload must not run unmeasured"
    assert describe_counters().startswith("no NVML device: ")
    with pytest.raises(ValueError, match="interval_s must be positive"):
        sample_counters(lambda: None, interval_s=0)
