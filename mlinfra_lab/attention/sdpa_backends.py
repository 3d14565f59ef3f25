"""Which kernel runs behind `scaled_dot_product_attention`, and what each backend costs.

Contract: `sdpa_backends(q, k, v, causal)` calls PyTorch's SDPA with its default choice and
pinned to each backend of `BACKENDS` with `torch.nn.attention.sdpa_kernel`, and returns one
`BackendTiming` per choice: the median forward time, the largest difference from the MATH
backend's output, and the ATen kernel that ran, or, for a backend that cannot run these
inputs on this device, the error PyTorch raised.

Design decisions:
- The kernel's name is read from a profiler record of one call, not derived from the
  dispatcher's rules (dtype, head dim, mask, device, dropout), which change between
  releases: what ran is what the profiler saw. The operator-level
  `torch.autograd.profiler.profile` suffices and starts in milliseconds; `torch.profiler`
  (kernels, traces: chapter 2) first imports the compiler stack, seconds on a laptop.
- A pinned backend that cannot run raises ("No available kernel"); pinning exists to make
  that loud instead of silently falling back, so the error is recorded, not swallowed.
- Times are medians of `repeats` calls after one warm-up, synchronised on a GPU. On a CPU
  they show what materialising the N x N scores costs (MATH) against a fused kernel, not
  anything about Tensor Cores; the GPU numbers of the course are in the committed
  benchmark (`mlinfra-lab bench attention`, which pins the same backends).
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass

import torch

from mlinfra_lab.profiling import quiet_kineto

__all__ = ["BACKENDS", "BackendTiming", "sdpa_backends"]

BACKENDS = ("default", "MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")


@dataclass(frozen=True)
class BackendTiming:
    """One SDPA backend on one input: its kernel and time, or why it could not run."""

    backend: str  # "default" (the dispatcher's choice) or an `SDPBackend` name
    kernel: str | None  # the ATen operator that ran, e.g. aten::_scaled_dot_product_..._for_cpu
    ms: float | None  # median forward milliseconds
    max_abs_diff: float | None  # against the MATH backend's output
    error: str | None  # first line of the error for a backend that cannot run here

    def __str__(self) -> str:
        if self.error:
            return f"{self.backend:20s} cannot run here: {self.error}"
        return (
            f"{self.backend:20s} {self.ms:8.2f} ms  max |diff| vs MATH {self.max_abs_diff:.1e}"
            f"  kernel {self.kernel}"
        )


def _kernel_name(call: object) -> str | None:
    """The most specific attention operator in a profiler record of one call."""
    with quiet_kineto(), torch.autograd.profiler.profile() as prof:
        call()  # type: ignore[operator]
    names = [
        e.name
        for e in prof.function_events
        if "attention" in e.name and e.name != "aten::scaled_dot_product_attention"
    ]
    return names[0] if names else None


def _median_ms(call: object, repeats: int) -> float:
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    call()  # type: ignore[operator]
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()  # type: ignore[operator]
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def sdpa_backends(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    backends: tuple[str, ...] = BACKENDS,
    repeats: int = 3,
) -> list[BackendTiming]:
    """Time SDPA on (q, k, v) (each (B, H, N, D)) with each backend of `backends`, in order."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    unknown = [b for b in backends if b != "default" and not hasattr(SDPBackend, b)]
    if unknown or repeats < 1:
        raise ValueError(
            f"unknown backends {unknown} (choose from {BACKENDS}) or repeats {repeats} < 1"
        )
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        reference = sdpa(q, k, v, is_causal=causal)
    out = []
    for name in backends:

        def call(name: str = name) -> torch.Tensor:
            if name == "default":
                return sdpa(q, k, v, is_causal=causal)
            with sdpa_kernel(getattr(SDPBackend, name)):
                return sdpa(q, k, v, is_causal=causal)

        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # each refusing backend also warns its reason
                diff = (call().float() - reference.float()).abs().max().item()
                kernel = _kernel_name(call)
                ms = _median_ms(call, repeats)
        except RuntimeError as err:
            out.append(BackendTiming(name, None, None, None, str(err).strip().splitlines()[0]))
            continue
        out.append(BackendTiming(name, kernel, ms, diff, None))
    return out
