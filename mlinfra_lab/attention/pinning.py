"""Pin the attention kernels' tiles for a block of code: time one tile, or search a few.

Contract: inside ``with restrict(kernel, tiles):`` the autotuner of `kernel` (``fwd``,
``dkdv`` or ``dq``) chooses among `tiles` only; ``with force(kernel, tile):`` runs exactly
that tile. Both restore the kernel's own list on exit. Used by `tile_sweep` (which
writes the tile table), `tiles.time_forward_tile` and `gpu_study`: every timed launch goes
through `flash_attention`, the launcher users call.

Design decisions:
- The autotuner's config list is swapped, not the kernel: a lone config runs as it is (Triton
  skips the pruner and the search), so a forced tile is exactly what runs, with the
  launcher's own grid, strides and batch chunks.
- The autotuner's cache is cleared on entry and exit: it keeps its first choice per shape for
  the life of the process, which would otherwise leak a pinned tile into later calls.
- Not thread-safe, by design: it is a measuring tool for one process.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["force", "restrict"]


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
