"""Where am I running? Device detection, problem-size presets and the Triton interpreter switch.

Contract: every notebook and command asks this module which device to use and how big a
problem to run, so that the same code runs a few seconds on a laptop CPU and at full size
on a GPU.

Design decisions:
- The GPU is the real path, the CPU a first-class one: `sizes(topic)` returns a preset for
  the device found, small enough on the CPU that a chapter executes in minutes.
- Triton kernels run on the CPU under the Triton interpreter, which must be switched on
  *before* `triton` is imported. `ensure_triton_mode()` does that once, respects a value
  the user set themselves, and raises `TritonAlreadyImportedError` when it is too late to
  switch, instead of letting a kernel launch fail later with an obscure CUDA error.
- Triton has wheels for Linux only (the course's lock installs it there): on macOS the
  kernels of chapter 1 and lab 1 cannot run, not even interpreted, and `describe()` says so.
- Nothing happens at import time: `torch` is imported inside the functions that need it,
  so `mlinfra-lab --help` and the grading tools start quickly.
- `describe()` does not import torch (about 2 s) where no GPU can be present: on Linux,
  when torch is not imported yet and no GPU device file exists (NVIDIA's ``/dev/nvidia*``,
  ROCm's ``/dev/kfd``, WSL2's ``/dev/dxg``), CUDA cannot be available, and torch's version
  is read from its installed metadata. Every notebook's set-up cell calls it, so a lab that
  never uses torch (lab 0) starts without it, and so does each of its graded submissions.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "RuntimeInfo",
    "TritonAlreadyImportedError",
    "UnknownTopicError",
    "describe",
    "device",
    "ensure_triton_mode",
    "half_dtype",
    "on_gpu",
    "sizes",
    "triton_interpreted",
]

TRITON_INTERPRET = "TRITON_INTERPRET"
# What `describe()` says where the triton package is missing (it has wheels for Linux only):
# which parts of the course need it, so a macOS reader knows before a cell fails.
NO_TRITON = (
    "no triton (wheels for Linux only: the Triton kernels of chapter 1 and lab 1 need Linux "
    "or Colab; the other chapters and labs do not use Triton)"
)

# Problem-size presets per topic. Each chapter owns its entry: the CPU column keeps the
# notebook under a few minutes on 2 cores (the Triton interpreter runs kernels in numpy),
# the GPU column is sized for an H100/H200-class device.
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "attention": {
        "cpu": {"batch": 1, "heads": 2, "seq": 128, "head_dim": 32, "dtype": "float32"},
        "gpu": {"batch": 4, "heads": 16, "seq": 4096, "head_dim": 128, "dtype": "bfloat16"},
    },
    "scaling": {
        "cpu": {"world_sizes": [1, 2], "steps": 5, "allreduce_max_mb": 1, "allreduce_iters": 3},
        "gpu": {"world_sizes": [1], "steps": 20, "allreduce_max_mb": 256, "allreduce_iters": 20},
    },
    "ci": {  # runs: in-process repeats (ms each); fresh_runs: new processes (~5 s each)
        "cpu": {"steps": 20, "examples": 100, "runs": 8, "fresh_runs": 2},
        "gpu": {"steps": 20, "examples": 100, "runs": 8, "fresh_runs": 3},
    },
    "tracking": {  # the store runs on the CPU either way: same sizes on both
        "cpu": {
            "runs": 200,
            "metrics": 5,
            "steps": 50,
            "inline_runs": 200,
            "blob_bytes": 256 * 1024,
            "retention_days": 365,
            "json_runs": 100_000,
            "search_runs": 100_000,  # the benchmark's search size, bulk-filled with plain SQL
            "s3_sizes": [64 << 10, 1 << 20, 8 << 20],  # blobs read cold and cached from S3
            "s3_repeats": 5,
        },
        "gpu": {
            "runs": 200,
            "metrics": 5,
            "steps": 50,
            "inline_runs": 200,
            "blob_bytes": 256 * 1024,
            "retention_days": 365,
            "json_runs": 100_000,
            "search_runs": 100_000,  # the benchmark's search size, bulk-filled with plain SQL
            "s3_sizes": [64 << 10, 1 << 20, 8 << 20],  # blobs read cold and cached from S3
            "s3_repeats": 5,
        },
    },
    "staleness": {  # the simulator runs on the CPU either way; a GPU box just runs longer
        "cpu": {"workers": 8, "updates": 300, "corr_updates": 1500, "hogwild_updates": 300},
        "gpu": {"workers": 8, "updates": 600, "corr_updates": 3000, "hogwild_updates": 600},
    },
}


class UnknownTopicError(MlinfraError, KeyError):
    """Raised by `sizes()` for a topic that has no preset."""


class TritonAlreadyImportedError(MlinfraError, RuntimeError):
    """Raised when the interpreter is needed but `triton` was imported before the switch."""


@dataclass(frozen=True)
class RuntimeInfo:
    """What `describe()` reports: enough to say where a number came from."""

    device: str  # "cuda" or "cpu"
    device_name: str  # e.g. "NVIDIA H200" or the CPU's platform string
    capability: str | None  # CUDA compute capability "9.0", None on the CPU
    torch: str
    triton: str | None  # None when triton is not installed
    triton_interpreter: bool
    python: str
    cpu_count: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        cap = f", sm_{self.capability.replace('.', '')}" if self.capability else ""
        tri = f"triton {self.triton}" if self.triton else NO_TRITON
        mode = " (interpreter)" if self.triton_interpreter else ""
        return (
            f"{self.device}: {self.device_name}{cap} | torch {self.torch} | {tri}{mode} | "
            f"python {self.python} | {self.cpu_count} CPU cores"
        )


def on_gpu() -> bool:
    """True when a CUDA device is usable by torch."""
    import torch

    return bool(torch.cuda.is_available())


def device() -> str:
    """The device string the course uses: ``"cuda"`` when a GPU is present, else ``"cpu"``."""
    return "cuda" if on_gpu() else "cpu"


def half_dtype(capability: tuple[int, int] | None = None) -> Any:
    """The 16-bit torch dtype for this GPU's work (or for a GPU of ``capability``).

    bfloat16 where the GPU computes in it natively (compute capability 8.0 or newer: A100,
    L4, H100/H200), float16 on older GPUs (Colab's free T4 is 7.5): there bfloat16 is emulated
    in float32, slowly, and SDPA's fused kernels refuse it. Without a GPU: float16, the only
    16-bit type the Triton CPU interpreter has.
    """
    import torch

    if capability is None:
        if not on_gpu():
            return torch.float16
        capability = torch.cuda.get_device_capability()
    return torch.bfloat16 if capability[0] >= 8 else torch.float16


def triton_interpreted() -> bool:
    """True when Triton kernels will run in the interpreter (the env var is set and truthy)."""
    return os.environ.get(TRITON_INTERPRET, "0").strip().lower() in ("1", "true", "yes", "on")


def ensure_triton_mode() -> bool:
    """Switch on the Triton interpreter when no GPU is present; return whether it is on.

    Call before the first ``import triton``. A value the user set in the environment wins.
    Raises `TritonAlreadyImportedError` if triton is already imported without the
    interpreter on a machine that has no GPU, because the switch cannot take effect then.
    """
    if TRITON_INTERPRET in os.environ:
        return triton_interpreted()
    if on_gpu():
        return False
    if "triton" in sys.modules:
        raise TritonAlreadyImportedError(
            "triton was imported before mlinfra_lab could switch on its CPU interpreter. "
            "Restart the kernel and import mlinfra_lab.attention (or set TRITON_INTERPRET=1) "
            "before importing triton."
        )
    os.environ[TRITON_INTERPRET] = "1"
    return True


def _triton_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("triton")
    except PackageNotFoundError:
        return None


def _no_gpu_device_file() -> bool:
    """True on Linux when no GPU device file exists, so torch cannot see a GPU (see the
    module docstring); False elsewhere, where only torch can tell."""
    if not sys.platform.startswith("linux"):
        return False
    dev = Path("/dev")
    return not (any(dev.glob("nvidia[0-9]*")) or (dev / "kfd").exists() or (dev / "dxg").exists())


def _cpu_info(torch_version: str) -> RuntimeInfo:
    return RuntimeInfo(
        device="cpu",
        device_name=platform.processor() or platform.machine(),
        capability=None,
        torch=torch_version,
        triton=_triton_version(),
        triton_interpreter=triton_interpreted(),
        python=platform.python_version(),
        cpu_count=os.cpu_count() or 1,
    )


def describe() -> RuntimeInfo:
    """Describe the runtime: device, torch/triton versions, CUDA capability, interpreter."""
    if "torch" not in sys.modules and _no_gpu_device_file():
        from importlib.metadata import PackageNotFoundError, version

        try:
            return _cpu_info(version("torch"))
        except PackageNotFoundError:
            pass  # torch importable without metadata (a source build on the path): ask it
    import torch

    if not torch.cuda.is_available():
        return _cpu_info(torch.__version__)
    major, minor = torch.cuda.get_device_capability()
    return RuntimeInfo(
        device="cuda",
        device_name=torch.cuda.get_device_name(),
        capability=f"{major}.{minor}",
        torch=torch.__version__,
        triton=_triton_version(),
        triton_interpreter=triton_interpreted(),
        python=platform.python_version(),
        cpu_count=os.cpu_count() or 1,
    )


def sizes(topic: str, device_kind: str | None = None) -> dict[str, Any]:
    """Problem-size preset for `topic` on this device (or on `device_kind`: "cpu"/"gpu").

    Returns a fresh dict, so a notebook may change it without touching the preset.
    """
    if topic not in PRESETS:
        raise UnknownTopicError(
            f"no size preset for topic {topic!r}; known topics: {', '.join(sorted(PRESETS))}"
        )
    kind = device_kind or ("gpu" if on_gpu() else "cpu")
    if kind not in ("cpu", "gpu"):
        raise ValueError(f"device_kind must be 'cpu' or 'gpu', got {kind!r}")
    return dict(PRESETS[topic][kind])
