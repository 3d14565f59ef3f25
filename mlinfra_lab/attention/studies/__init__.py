"""Studies of chapter 1's kernels on a GPU: readers and writers of committed result files.

Each module runs as ``python -m mlinfra_lab.attention.studies.NAME --out FILE`` on a CUDA GPU
and has a ``committed_*`` reader that the chapter's cells use on any machine:
`alignment` (head dims and GEMM strides that are or are not multiples of 16 bytes) and
`swizzle` (the shared-memory layouts Triton compiles the taught kernel with, and their
counters). Nothing here is imported by the kernels. The names below are imported on first
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
