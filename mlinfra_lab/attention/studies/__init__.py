"""Studies of chapter 1's kernels on a GPU: readers and writers of committed result files.

Contract: each writer runs as ``python -m mlinfra_lab.attention.studies.NAME --out FILE`` on a
CUDA GPU, and each reader (``committed_*``) works on any machine, for chapter 1 and its
appendix: `alignment` (head dims and GEMM strides that are or are not multiples of 16 bytes),
`swizzle` (the shared-memory layouts Triton compiles the taught kernel with, and their
counters), `study` (the default kernel's committed runs, baselines, the roofline),
`case_study` (the appendix's kernel versions and techniques), `gpu_study` (the memory and
tile study), `counters` (Nsight Compute against the traffic and bank models; kernel profiles),
`kernel_profile` (the reader of those profiles), `machine_code` (SASS read back on a CPU) and
`tile_sweep` (which writes the kernel's tile table). Nothing here is imported by the kernels. The names below are imported on first
use, so ``python -m`` runs a module that its package has not imported yet.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "alloc_layouts",
    "committed_alignment",
    "committed_swizzle",
    "plot_alignment",
    "shared_layouts",
]

_HOME = {
    "alloc_layouts": "swizzle",
    "committed_alignment": "alignment",
    "committed_swizzle": "swizzle",
    "plot_alignment": "alignment",
    "shared_layouts": "swizzle",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
