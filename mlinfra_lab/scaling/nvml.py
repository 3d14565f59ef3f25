"""Device counters from NVML, the library under `nvidia-smi`: utilisation, memory, power.

Contract: `read_counters()` returns one `GpuCounters` per NVIDIA GPU of the machine;
`sample_counters(fn, interval_s)` runs `fn()` while a thread reads the counters every
`interval_s` and returns fn's result with the samples. Where there is no NVML device (no
`pynvml` module, no driver, no GPU) both raise `NvmlUnavailable`, whose message says which
and what to install; `describe_counters()` is the fallback a notebook prints: one line per
GPU, or the line "no NVML device: <why>".

Design decisions:
- The official bindings, `nvidia-ml-py` (imported as `pynvml`), not a parse of
  `nvidia-smi`'s text: the same calls that `nvidia-smi`, DCGM's exporters and most
  cluster dashboards make, with numbers in their raw units.
- Units are converted once, in `GpuCounters.from_raw` (percent -> fraction, mW -> W), so
  the conversion is testable without a GPU.
- A counter the device does not support (power on some virtual GPUs, for example) is None,
  not an error: the other counters are still worth reading.
- NVML numbers devices as the driver does, ignoring `CUDA_VISIBLE_DEVICES`; `nvml_index`
  is that number.

Caveats: NVML's utilisation is the fraction of the last sample period (about a second, by
the driver's choice) in which *some* kernel ran, not how busy the streaming multiprocessors
were; a GPU running one tiny kernel at a time shows 100%. DCGM's profiling counters (SM
activity, tensor-pipe activity) are the measure of how well a kernel uses the GPU.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "GpuCounters",
    "NvmlUnavailable",
    "describe_counters",
    "read_counters",
    "sample_counters",
]

T = TypeVar("T")


class NvmlUnavailable(MlinfraError, RuntimeError):
    """No NVML device here: the message says why (module, driver or GPU missing)."""


@dataclass(frozen=True)
class GpuCounters:
    """One reading of one GPU's counters, in SI units and fractions."""

    nvml_index: int
    name: str
    gpu_util: float  # fraction of the last sample period in which a kernel ran
    memory_util: float  # fraction of it in which device memory was read or written
    memory_used_bytes: int
    memory_total_bytes: int
    power_w: float | None  # None: the device does not report it
    power_limit_w: float | None
    temperature_c: float | None
    time_s: float  # time.monotonic() of the reading

    @classmethod
    def from_raw(
        cls,
        nvml_index: int,
        name: str,
        util_gpu_pct: float,
        util_mem_pct: float,
        mem_used: int,
        mem_total: int,
        power_mw: float | None,
        limit_mw: float | None,
        temperature_c: float | None,
        time_s: float = 0.0,
    ) -> GpuCounters:
        """From NVML's raw units: percent, bytes, milliwatts, degrees Celsius."""
        for label, pct in (("GPU utilisation", util_gpu_pct), ("memory utilisation", util_mem_pct)):
            if not 0 <= pct <= 100:
                raise ValueError(f"{label} {pct} is not a percentage (0-100)")
        if not 0 <= mem_used <= mem_total:
            raise ValueError(f"memory used {mem_used} is not within 0..total {mem_total} bytes")
        return cls(
            nvml_index,
            name,
            util_gpu_pct / 100,
            util_mem_pct / 100,
            int(mem_used),
            int(mem_total),
            None if power_mw is None else power_mw / 1e3,
            None if limit_mw is None else limit_mw / 1e3,
            temperature_c,
            time_s,
        )

    def __str__(self) -> str:
        power = (f"{self.power_w:.0f} W" if self.power_w is not None else "power n/a") + (
            f" of {self.power_limit_w:.0f} W" if self.power_limit_w is not None else ""
        )
        temp = f", {self.temperature_c:.0f} C" if self.temperature_c is not None else ""
        return (
            f"GPU {self.nvml_index} ({self.name}): utilisation {self.gpu_util:.0%}, memory "
            f"busy {self.memory_util:.0%}, {self.memory_used_bytes / 2**30:.1f} of "
            f"{self.memory_total_bytes / 2**30:.1f} GiB used, {power}{temp}"
        )


def _nvml() -> Any:
    """The initialised pynvml module, or NvmlUnavailable saying why not."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable(
            "the NVML bindings are not installed: pip install nvidia-ml-py "
            "(it is in mlinfra-lab's [course] extra)"
        ) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise NvmlUnavailable(
            f"NVML did not start ({err}): no NVIDIA driver on this machine, so no GPU to read"
        ) from None
    return pynvml


def _optional(call: Callable[[], Any]) -> Any:
    import pynvml

    try:
        return call()
    except pynvml.NVMLError_NotSupported:
        return None


def _read(nvml: Any) -> list[GpuCounters]:
    out = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        name = nvml.nvmlDeviceGetName(h)
        util = nvml.nvmlDeviceGetUtilizationRates(h)
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        out.append(
            GpuCounters.from_raw(
                i,
                name.decode() if isinstance(name, bytes) else name,
                util.gpu,
                util.memory,
                mem.used,
                mem.total,
                _optional(functools.partial(nvml.nvmlDeviceGetPowerUsage, h)),
                _optional(functools.partial(nvml.nvmlDeviceGetEnforcedPowerLimit, h)),
                _optional(
                    functools.partial(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
                ),
                time.monotonic(),
            )
        )
    return out


def read_counters() -> list[GpuCounters]:
    """One reading of every GPU's counters; `NvmlUnavailable` where there is none."""
    nvml = _nvml()
    try:
        counters = _read(nvml)
    finally:
        nvml.nvmlShutdown()
    if not counters:
        raise NvmlUnavailable("NVML started but reports no GPU")
    return counters


def sample_counters(
    fn: Callable[[], T], interval_s: float = 0.1
) -> tuple[T, list[list[GpuCounters]]]:
    """Run `fn()` while reading the counters every `interval_s`; (its result, the readings).

    Raises `NvmlUnavailable` before running `fn` where there is no NVML device.
    """
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    nvml = _nvml()
    samples: list[list[GpuCounters]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            samples.append(_read(nvml))
            stop.wait(interval_s)

    thread = threading.Thread(target=poll, name="nvml-sampler", daemon=True)
    thread.start()
    try:
        result = fn()
    finally:
        stop.set()
        thread.join()
        nvml.nvmlShutdown()
    return result, samples


def describe_counters() -> str:
    """One line per GPU, or "no NVML device: <why>" (the CPU fallback)."""
    try:
        return "\n".join(str(c) for c in read_counters())
    except NvmlUnavailable as err:
        return f"no NVML device: {err}"
