"""A committed table of the best tile per shape, so speed never hangs on one noisy autotune.

Contract: `lookup(kernel, gpu, dtype, head_dim, causal, seq)` returns the tile
(``{"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"}``) that repeated measurements chose for
this kernel (``fwd``, ``dkdv`` or ``dq``) on this GPU, or None when no entry fits; the
kernels' pruner then autotunes as before. Pinning a tile to time it is `pinning`'s job.

Design decisions:
- Keyed by (GPU name, dtype, head dim, causal, sequence-length bucket): what changes the
  best tile. A length fits an entry of the nearest power of two within a factor of 2 of
  the measured lengths; head dims that were not measured (80, 96) and other GPUs autotune.
- The table is data (``tile_table.json``, next to this file, shipped in the wheel) with the
  device, versions and date of the sweep that wrote it and, per entry, every candidate's
  median times, so a reader can see how close the runner-up was.
- ``MLINFRA_ATTENTION_TILE_TABLE=0`` ignores the table (autotune everywhere).
- This module reads data only (the kernels' pruner imports it); `pinning` changes the
  kernels' lists, so the two stay apart and neither imports the other's importer.
"""

from __future__ import annotations

import json
import math
import os
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["TABLE_PATH", "load_table", "lookup"]

TABLE_PATH = Path(__file__).with_name("tile_table.json")


@cache
def load_table(path: str = str(TABLE_PATH)) -> dict[str, Any]:
    """The table file as written by `tile_sweep` (an empty table when there is none)."""
    p = Path(path)
    return json.loads(p.read_text()) if p.is_file() else {"entries": []}


def lookup(
    kernel: str,
    gpu: str,
    dtype: str,
    head_dim: int,
    causal: bool,
    seq: int,
    table: dict[str, Any] | None = None,
) -> dict[str, int] | None:
    """The measured best tile for this shape, or None (autotune) when no entry fits."""
    if os.environ.get("MLINFRA_ATTENTION_TILE_TABLE", "1") == "0":
        return None
    entries = [
        e
        for e in (table or load_table())["entries"]
        if (e["kernel"], e["gpu"], e["dtype"], e["head_dim"], e["causal"])
        == (kernel, gpu, dtype, head_dim, causal)
    ]
    if not entries or seq < 1:
        return None
    nearest = min(entries, key=lambda e: abs(math.log2(e["seq"]) - math.log2(seq)))
    if abs(math.log2(nearest["seq"]) - math.log2(seq)) > 1:
        return None
    return dict(nearest["tile"])
