"""What deterministic algorithms cost on a GPU, and what they buy: time and repeatability of a CUDA step.

Contract: ``measure_gpu_determinism_cost(device="cuda", steps, rounds)`` trains a small
model whose step uses the CUDA operations that ``deterministic()`` changes (cuDNN
convolutions, an ``index_add_`` that sums with atomics, cuBLAS matrix products), once with
the default kernels and once inside ``deterministic()``, interleaved over `rounds`; it
returns a JSON-ready dict of per-step medians and quartiles, the ratio, and, for each
setting, whether two runs from the same seed ended with bit-identical weights. Without a
CUDA device it raises `NoCudaDeviceError`; ``device="cpu"`` runs the same code path on the
CPU (for the test suite, not for numbers).

Design decisions:
- The workload holds the three kinds of kernel the flags act on: cuDNN picks convolution
  algorithms (``benchmark=False`` and ``deterministic=True`` fix the choice), ``index_add_``
  and ``scatter_add_`` accumulate with atomic adds in whatever order the threads arrive
  (their deterministic versions sort first), and cuBLAS needs a fixed workspace
  (``CUBLAS_WORKSPACE_CONFIG``). A segment sum by ``index_add_`` stands for a graph layer,
  a mixture-of-experts combine or an embedding-bag backward.
- Interleaved rounds, as in ``determinism_cost``: each round runs both settings, so a busy
  GPU slows both; round 0 warms up (cuDNN's autotuning, the allocator) and is dropped.
  Steps are timed with CUDA events after a synchronise, not with the host clock alone.
- ``CUBLAS_WORKSPACE_CONFIG`` is read when cuBLAS first makes its workspace, so it is set
  (to the value ``deterministic()`` uses) before the first CUDA call when it is unset, for
  both settings alike: the measured ratio then excludes the workspace size, and the result
  records the value.
- Repeatability is the other half of the answer: a cost is only worth paying for a setting
  that makes two runs agree; both settings' two runs are compared bit for bit.
Nothing here asserts a time (tests never do); ``mlinfra-lab bench ci`` adds this section on
a machine with a CUDA device.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from mlinfra_lab.ci.seeding import CUBLAS_WORKSPACE, deterministic, seed_everything
from mlinfra_lab.errors import MlinfraError

__all__ = ["NoCudaDeviceError", "measure_gpu_determinism_cost"]

SETTINGS = ("default", "deterministic")


class NoCudaDeviceError(MlinfraError, RuntimeError):
    """No CUDA device here; the benchmark's numbers need one (pass device='cpu' to test)."""


def _model(device: str, width: int) -> Any:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, width, 3, padding=1)  # cuDNN algorithm choice
            self.conv2 = torch.nn.Conv2d(width, width, 3, padding=1)
            self.head = torch.nn.Linear(width, 10)  # cuBLAS

        def forward(self, images: Any, segments: Any, n_segments: int) -> Any:
            h = torch.relu(self.conv2(torch.relu(self.conv1(images))))  # (B, C, H, W)
            h = h.mean(dim=(2, 3))  # (B, C)
            # segment sum: rows of h added into their segment, atomics on CUDA
            pooled = h.new_zeros(n_segments, h.shape[1]).index_add_(0, segments, h)  # (S, C)
            return self.head(pooled[segments] + h)  # (B, 10)

    return Net().to(device)


def _run(device: str, steps: int, batch: int, width: int, seed: int) -> tuple[Any, list[float]]:
    """Train `steps` steps from `seed`; return the final weights and each step's time."""
    import torch

    seed_everything(seed)
    model = _model(device, width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    n_segments = max(1, batch // 8)
    times = []
    for _ in range(steps):
        images = torch.randn(batch, 3, 32, 32, generator=gen).to(device)  # (B, 3, 32, 32)
        segments = torch.randint(0, n_segments, (batch,), generator=gen).to(device)  # (B,)
        target = torch.randint(0, 10, (batch,), generator=gen).to(device)  # (B,)
        step = functools.partial(_step, model, optimizer, images, segments, n_segments, target)
        times.append(_timed(device, step))
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    return weights, times


def _step(
    model: Any, optimizer: Any, images: Any, segments: Any, n_segments: int, target: Any
) -> None:
    import torch

    loss = torch.nn.functional.cross_entropy(model(images, segments, n_segments), target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def _timed(device: str, work: Callable[[], None]) -> float:
    """Milliseconds of `work`: CUDA events on a GPU, the host clock on the CPU."""
    import torch

    if device.startswith("cuda"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        work()
        end.record()
        torch.cuda.synchronize(device)
        return float(start.elapsed_time(end))
    begin = time.perf_counter()
    work()
    return (time.perf_counter() - begin) * 1e3


def _stats(ms: list[float]) -> dict[str, float]:
    q1, median, q3 = statistics.quantiles(ms, n=4, method="inclusive")
    return {"median_ms": median, "q1_ms": q1, "q3_ms": q3}


def measure_gpu_determinism_cost(
    device: str = "cuda",
    steps: int = 20,
    rounds: int = 5,
    batch: int = 256,
    width: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Time a CUDA training step with and without ``deterministic()`` (module docstring)."""
    import contextlib

    import torch

    from mlinfra_lab import runtime

    # deterministic() reaches torch's compiler stack, which imports triton: on a machine
    # without a GPU the interpreter must be switched on before that first import
    if "triton" not in sys.modules:  # already imported: nothing left to switch
        runtime.ensure_triton_mode()

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise NoCudaDeviceError(
            "measure_gpu_determinism_cost needs a CUDA device and none is visible; run it on "
            "the GPU machine (mlinfra-lab bench ci adds it there), or pass device='cpu' to "
            "exercise the code path without meaningful numbers"
        )
    if steps < 2 or rounds < 2 or batch < 8 or width < 1:
        raise ValueError(
            f"need steps >= 2, rounds >= 2, batch >= 8 and width >= 1, got steps={steps}, "
            f"rounds={rounds}, batch={batch}, width={width}"
        )
    if device.startswith("cuda"):  # read once, when cuBLAS makes its workspace
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    times: dict[str, list[float]] = {s: [] for s in SETTINGS}
    weights: dict[str, list[Any]] = {s: [] for s in SETTINGS}
    for r in range(rounds + 1):  # round 0 warms up (autotuning, allocator) and is dropped
        for k in range(len(SETTINGS)):
            setting = SETTINGS[(r + k) % len(SETTINGS)]
            with deterministic() if setting == "deterministic" else contextlib.nullcontext():
                w, ms = _run(device, steps, batch, width, seed)
            if r:
                times[setting].extend(ms[1:])  # a run's first step allocates: dropped too
            if len(weights[setting]) < 2:
                weights[setting].append(w)
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "steps": steps,
        "rounds": rounds,
        "batch": batch,
        "width": width,
    }
    for setting in SETTINGS:
        first, second = weights[setting]
        out[setting] = {**_stats(times[setting]), "repeatable": bool(torch.equal(first, second))}
    out["ratio_deterministic"] = out["deterministic"]["median_ms"] / out["default"]["median_ms"]
    return out
