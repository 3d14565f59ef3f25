"""A committed table of the best tile per shape, so speed never hangs on one noisy autotune.

Contract: `lookup(kernel, gpu, dtype, head_dim, causal, seq)` returns the tile
(``{"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"}``) that repeated measurements chose for
this kernel (``fwd``, ``dkdv`` or ``dq``) on this GPU, or None when no entry fits; the
kernels' pruner then autotunes as before. `force(kernel, tile)` pins a tile for timing it
(used by `tile_sweep`, which writes the table, and by `tiles.time_forward_tile`);
`restrict(kernel, tiles)` shortens the search to a few (`gpu_study`).

Design decisions:
- Keyed by (GPU name, dtype, head dim, causal, sequence-length bucket): what changes the
  best tile. A length fits an entry of the nearest power of two within a factor of 2 of
  the measured lengths; head dims that were not measured (80, 96) and other GPUs autotune.
- The table is data (``tile_table.json``, next to this file, shipped in the wheel) with the
  device, versions and date of the sweep that wrote it and, per entry, every candidate's
  median times, so a reader can see how close the runner-up was.
- ``MLINFRA_ATTENTION_TILE_TABLE=0`` ignores the table (autotune everywhere).
- `force` swaps the autotuner's list for the one tile and clears its cache (which otherwise
  keeps its first choice per shape for the life of the process): the sweep times exactly
  that tile, through the same launchers a user calls.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["TABLE_PATH", "force", "load_table", "lookup", "restrict"]

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


@contextmanager
def restrict(kernel: str, tiles: list[dict[str, int]]) -> Iterator[None]:
    """Inside the block, `kernel`'s autotuner chooses among `tiles` only (one tile: it just
    runs, with no pruner and no search); its cache is cleared on entry and exit, so the
    tiles are used and no later call inherits their choice."""
    import triton

    from mlinfra_lab.attention._flash_kernels import kernels

    if not tiles:
        raise ValueError(f"restrict({kernel!r}, []) needs at least one tile")
    tuner = kernels()[kernel]
    saved = tuner.configs
    tuner.configs = [
        triton.Config(
            {"BLOCK_M": t["BLOCK_M"], "BLOCK_N": t["BLOCK_N"]},
            num_warps=t["num_warps"],
            num_stages=t["num_stages"],
        )
        for t in tiles
    ]
    tuner.cache.clear()
    try:
        yield
    finally:
        tuner.configs = saved
        tuner.cache.clear()


@contextmanager
def force(kernel: str, tile: dict[str, int]) -> Iterator[None]:
    """Run `kernel` with `tile` inside the block (`restrict` to that one tile)."""
    with restrict(kernel, [tile]):
        yield
