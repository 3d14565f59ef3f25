"""A model of shared-memory banks: which accesses of one warp serialise, and their cures.

Contract: `bank_conflict_degree(byte_addresses)` returns how many passes one warp's
shared-memory access takes (1 = conflict-free); `tile_addresses(...)` produces the
addresses a warp touches when it reads a row or a column of a tile stored with a given
row padding or XOR swizzle, so the two can be combined to show a conflict and its cure.

Design decisions:
- Shared memory has ``banks`` banks (32 on every NVIDIA GPU since Kepler) of
  ``bank_bytes`` bytes (4); the word at byte address ``a`` lives in bank
  ``(a // bank_bytes) % banks``. Threads reading the *same* word get it by broadcast, so
  the degree is the largest number of *distinct words* that one bank must serve.
- Tiles are row-major with a row stride of ``cols + pad`` elements. A column read (thread
  ``t`` reads element ``(t, c)``), which is what a transposed operand load does, hits one
  bank 32 times when the row stride is a multiple of 128 bytes; one padding word per row
  (4 bytes) spreads it over all banks.
- The swizzle permutes whole words within a row: word ``w`` of row ``r`` is stored at
  ``w ^ (r % words_per_row)`` (rows must hold a power-of-two number of words). No memory
  is wasted, unlike padding; this is the idea behind CUTLASS's and Triton's swizzled
  layouts, which work on 16-byte chunks rather than words.

Caveats: one scalar access per thread; wide (8- or 16-byte) accesses are split by the
hardware into phases of fewer threads, which this model does not follow. It is a model
of the rule, not a simulator of a particular GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["bank_conflict_degree", "bank_word_counts", "tile_addresses"]


def bank_word_counts(
    byte_addresses: Sequence[int], bank_bytes: int = 4, banks: int = 32
) -> list[int]:
    """For each bank, the number of distinct words the access needs from it."""
    if bank_bytes < 1 or banks < 1:
        raise ValueError(f"bank_bytes and banks must be positive, got {bank_bytes}, {banks}")
    words_per_bank: list[set[int]] = [set() for _ in range(banks)]
    for addr in byte_addresses:
        if addr < 0:
            raise ValueError(f"byte addresses must be non-negative, got {addr}")
        word = int(addr) // bank_bytes
        words_per_bank[word % banks].add(word)
    return [len(words) for words in words_per_bank]


def bank_conflict_degree(
    byte_addresses: Sequence[int], bank_bytes: int = 4, banks: int = 32
) -> int:
    """How many ways one warp's access serialises: max distinct words in one bank (>= 1).

    ``[0, 4, 8, ..., 124]`` -> 1 (32 banks, one word each); ``[0, 128, 256, ...]`` -> 32
    (all in bank 0); ``[0, 0, ...]`` -> 1 (one word, broadcast).
    """
    if len(byte_addresses) == 0:
        raise ValueError("bank_conflict_degree needs at least one address")
    return max(bank_word_counts(byte_addresses, bank_bytes, banks))


def tile_addresses(
    rows: int,
    cols: int,
    elem_bytes: int,
    read: str,
    index: int = 0,
    pad_elems: int = 0,
    swizzle: bool = False,
    threads: int = 32,
    bank_bytes: int = 4,
) -> list[int]:
    """Byte addresses a warp touches reading one row or column of a ``rows x cols`` tile.

    ``read="row"``: thread ``t`` reads element ``(index, t)``; ``read="column"``: thread
    ``t`` reads element ``(t, index)``. The tile is row-major with ``pad_elems`` unused
    elements after each row; ``swizzle=True`` XORs the word index with the row number.
    """
    if read not in ("row", "column"):
        raise ValueError(f"read must be 'row' or 'column', got {read!r}")
    if min(rows, cols, elem_bytes, threads) < 1 or pad_elems < 0:
        raise ValueError("rows, cols, elem_bytes, threads must be positive and pad_elems >= 0")
    if swizzle and pad_elems:
        raise ValueError("use padding or a swizzle, not both")
    limit = cols if read == "row" else rows
    if threads > limit:
        raise ValueError(
            f"a {read} of this tile has {limit} elements, fewer than {threads} threads"
        )
    stride = (cols + pad_elems) * elem_bytes  # bytes per stored row
    words_per_row = cols * elem_bytes // bank_bytes
    if swizzle and (words_per_row < 1 or words_per_row & (words_per_row - 1)):
        raise ValueError(
            f"the swizzle needs a power-of-two number of words per row, got {words_per_row}"
        )
    addresses = []
    for t in range(threads):
        r, c = (index, t) if read == "row" else (t, index)
        offset = c * elem_bytes
        if swizzle:
            word, within = divmod(offset, bank_bytes)
            offset = (word ^ (r % words_per_row)) * bank_bytes + within
        addresses.append(r * stride + offset)
    return addresses
