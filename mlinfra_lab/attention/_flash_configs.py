"""Tile configurations of the Triton attention kernels, and when to search them.

Contract: `configs()` returns the forward, dK/dV and dQ kernels' tile lists for the device
found (`configs_for(capability)` for a GPU's compute capability, one small tile each under
the CPU interpreter); `_pruner(...)` is the autotuner's ``early_config_prune``: a committed
tile, a fixed tile, or the whole list (its docstring says which, when).

Design decisions: the lists are per GPU family, because shared memory per block differs
(Hopper 227 KB, Ada 99 KB, Turing 64 KB) and a tile that does not fit fails at launch; each
list's first tile fits its family at the largest head dim, since runs without a search take
it. Imports triton at its top: like `_flash_kernels`, it is imported on first use only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from mlinfra_lab import runtime

runtime.ensure_triton_mode()

import triton  # noqa: E402  (after the interpreter switch, deliberately)

__all__ = ["SHORT_SEQUENCE", "configs", "configs_for"]


def configs() -> tuple[list[Any], list[Any], list[Any]]:
    """Tile configs for the forward, dK/dV and dQ kernels on the device found: one small
    fixed tile each under the CPU interpreter, else `configs_for` this GPU's capability."""
    if runtime.triton_interpreted():  # small tiles: cheap to interpret, many tiles per test
        return [_cfg(32, 16, 4, 1)], [_cfg(16, 32, 4, 1)], [_cfg(32, 16, 4, 1)]
    return configs_for(torch.cuda.get_device_capability())


def _cfg(bm: int, bn: int, warps: int, stages: int) -> Any:
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)


def configs_for(capability: tuple[int, int]) -> tuple[list[Any], list[Any], list[Any]]:
    """Tile configs for the forward, dK/dV and dQ kernels on a GPU of this compute capability.

    Every list holds more than one config: Triton's autotuner calls the pruner
    (`_pruner`: float32's own tile, ``MLINFRA_ATTENTION_AUTOTUNE=0``) only then, and runs a
    lone config as it is, float32 included (a 128 x 64 IEEE tile took over 60 s to compile).
    Without a search (short sequences, ``MLINFRA_ATTENTION_AUTOTUNE=0``) the first config
    runs, so each list's first config must fit the family's shared memory at the largest
    head dim (BLOCK_D = 128): a tile that does not fit fails at launch (OutOfResources).
    Constraints (causal; each kernel states its own with ``tl.static_assert``): forward and dQ
    need BLOCK_M % BLOCK_N == 0 (their diagonal loop steps by BLOCK_N from a multiple of
    BLOCK_M); dK/dV needs BLOCK_N % BLOCK_M == 0.
    """
    major = capability[0]
    if major == 9:  # Hopper: 128-row tiles for two warpgroups, pipelined loads
        fwd = [
            _cfg(128, 64, 4, 3),
            _cfg(128, 64, 8, 3),
            _cfg(128, 128, 8, 2),
            _cfg(128, 128, 8, 3),
            _cfg(64, 64, 4, 4),
            _cfg(128, 64, 8, 4),
            _cfg(128, 32, 4, 4),
        ]
        dkdv = [
            _cfg(32, 128, 4, 3),
            _cfg(64, 128, 8, 3),
            _cfg(64, 64, 4, 3),
            _cfg(64, 128, 8, 2),
            _cfg(32, 64, 4, 4),
        ]
        dq = [
            _cfg(128, 32, 4, 3),
            _cfg(128, 64, 8, 3),
            _cfg(64, 64, 4, 3),
            _cfg(128, 64, 8, 2),
            _cfg(64, 32, 4, 4),
        ]
        return fwd, dkdv, dq
    if major < 8:
        # Turing (Colab's free T4, compute capability 7.5): 64 KB of shared memory per block.
        # Compiled for sm_75 at BLOCK_D = 128, the Ampere list's backward tiles need 80-96 KB
        # and fail at launch; these need 40-48 KB (the forward's 32-48 KB).
        return (
            [_cfg(64, 32, 4, 2), _cfg(32, 32, 4, 2)],
            [_cfg(32, 32, 4, 1), _cfg(16, 32, 4, 1)],
            [_cfg(32, 32, 4, 1), _cfg(32, 16, 4, 1)],
        )
    # Ampere and Ada (A100, A10G, L4, RTX 30/40): tiles that fit Ada's 99 KB per block
    # (compiled for sm_86 at BLOCK_D = 128: 28-72 KB).
    return (
        [_cfg(64, 32, 4, 2), _cfg(64, 64, 4, 2)],
        [_cfg(32, 64, 4, 2), _cfg(64, 64, 4, 2)],
        [_cfg(64, 32, 4, 2), _cfg(64, 64, 4, 2)],
    )


# Below this many tokens a launch is dominated by its fixed cost: no tile is worth a search.
SHORT_SEQUENCE = 256


def _config(tile: dict[str, int]) -> Any:
    return triton.Config(
        {"BLOCK_M": tile["BLOCK_M"], "BLOCK_N": tile["BLOCK_N"]},
        num_warps=tile["num_warps"],
        num_stages=tile["num_stages"],
    )


def _pruner(fp32_config: Any, kernel: str) -> Callable[..., list[Any]]:
    """An ``early_config_prune`` that autotunes only where the search pays for itself.

    In order: float32 inputs (IEEE-precision dots: not Tensor Core speed, slow to compile, used for
    accuracy demos) run `fp32_config`, a small single-stage tile: IEEE dots unroll into
    FMAs, so compile time grows with the tile (on the H200, fresh cache, forward and
    backward at D=80: 54 s at 64 x 32 with 2 stages, 8 s at 32 x 16 with 1 stage, same
    error; ``benchmarks/results/h200-fp32-compile-2026-12-04.json``).
    ``MLINFRA_ATTENTION_AUTOTUNE=0`` in the environment keeps only the list's first config
    (tests on a GPU: one compile per shape class instead of a dozen).
    A shape with an entry in the committed tile table (`tile_table`: best of repeated
    measurements on this GPU) runs that tile: no search, the same tile in every run.
    Sequences of at most `SHORT_SEQUENCE` tokens run the list's first config. Each then
    costs one compile instead of one per config plus timing runs (a chapter cell with two
    fp32 shapes took 205 s on the H200 while autotuning). Everything else autotunes.
    """
    from mlinfra_lab.attention import tile_table

    def prune(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        args = {**named_args, **kwargs}
        if args.get("PRECISION") == "ieee":
            return [fp32_config]
        if os.environ.get("MLINFRA_ATTENTION_AUTOTUNE", "1") == "0":
            return configs[:1]
        q = args.get("Q")
        if q is not None and q.is_cuda:
            tile = tile_table.lookup(
                kernel,
                torch.cuda.get_device_name(q.device),
                str(q.dtype).removeprefix("torch."),
                int(args["HEAD_DIM"]),
                bool(args["CAUSAL"]),
                max(int(args["n_q"]), int(args["n_k"])),
            )
            if tile is not None:
                return [_config(tile)]
        if max(int(args["n_q"]), int(args["n_k"])) <= SHORT_SEQUENCE:
            return configs[:1]
        return configs

    return prune
