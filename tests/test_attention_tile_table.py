"""The committed tile table: lookups by shape, pinning a tile, and the sweep that writes it."""

from __future__ import annotations

import json

import pytest
import torch

from mlinfra_lab.attention import pinning, tile_table
from mlinfra_lab.attention.studies import tile_sweep

pytestmark = pytest.mark.attention

TILE_A = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
TILE_B = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4}


def _table() -> dict:
    def entry(seq: int, tile: dict) -> dict:
        return {
            "kernel": "fwd",
            "gpu": "NVIDIA H200",
            "dtype": "bfloat16",
            "head_dim": 128,
            "causal": False,
            "seq": seq,
            "tile": tile,
        }

    return {"entries": [entry(1024, TILE_A), entry(4096, TILE_B)]}


def test_lookup_picks_the_nearest_measured_length_within_a_factor_of_two():
    look = lambda seq, **kw: tile_table.lookup(  # noqa: E731
        kw.get("kernel", "fwd"),
        kw.get("gpu", "NVIDIA H200"),
        "bfloat16",
        kw.get("d", 128),
        kw.get("causal", False),
        seq,
        table=_table(),
    )
    assert look(1024) == TILE_A and look(1500) == TILE_A and look(3000) == TILE_B
    assert look(8192) == TILE_B  # 2x the longest measured: still its tile
    assert look(300) is None and look(16384) is None  # outside every bucket: autotune
    assert look(1024, gpu="NVIDIA A100") is None and look(1024, d=96) is None
    assert look(1024, causal=True) is None and look(1024, kernel="dq") is None


def test_the_environment_can_switch_the_table_off(monkeypatch):
    monkeypatch.setenv("MLINFRA_ATTENTION_TILE_TABLE", "0")
    assert (
        tile_table.lookup("fwd", "NVIDIA H200", "bfloat16", 128, False, 1024, table=_table())
        is None
    )


def test_committed_table_is_well_formed():
    table = tile_table.load_table()
    for e in table["entries"]:
        assert e["kernel"] in ("fwd", "dkdv", "dq") and e["seq"] > 0
        assert set(e["tile"]) == {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"}
        assert str(e["tile"]) in e["candidates"] and len(e["candidates"][str(e["tile"])]) >= 3
    if table["entries"]:
        assert table["device"]["device_name"] and table["device"]["triton"] and table["date"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU path (the GPU sweep is committed)")
def test_sweep_writes_a_table_that_lookup_reads(tmp_path):
    """The sweep on the CPU interpreter (one candidate per kernel there): every kernel of
    every shape gets an entry with its timings, and the table answers a lookup."""
    out = tmp_path / "table.json"
    assert (
        tile_sweep.main(["--out", str(out), "--repeats", "2", "--seqs", "32", "--head-dims", "16"])
        == 0
    )
    table = json.loads(out.read_text())
    assert {(e["kernel"], e["causal"]) for e in table["entries"]} == {
        (k, c) for k in ("fwd", "dkdv", "dq") for c in (False, True)
    }
    assert all(
        len(t) == 2 and min(t) > 0 for e in table["entries"] for t in e["candidates"].values()
    )
    tile = tile_table.lookup("dq", "cpu", "float32", 16, True, 32, table=table)
    assert tile == next(
        e["tile"] for e in table["entries"] if (e["kernel"], e["causal"]) == ("dq", True)
    )


def test_a_forced_tile_is_the_one_that_runs():
    from mlinfra_lab.attention._flash_kernels import kernels
    from mlinfra_lab.attention.flash import flash_attention

    tile = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, 1, 40, 16, generator=g, device=device) for _ in range(3))
    with pinning.force("fwd", tile):
        out = flash_attention(q, k, v)
        assert kernels()["fwd"].best_config.kwargs["BLOCK_M"] == 16
    ref = torch.softmax(q @ k.transpose(-1, -2) / 4, -1) @ v
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    flash_attention(q, k, v)  # after the block: the usual (float32) tile again
    assert kernels()["fwd"].best_config.kwargs["BLOCK_M"] == 32


def test_a_causal_tile_that_breaks_the_diagonal_loop_is_refused_by_the_kernel():
    """The tile constraints live in the kernels (`tl.static_assert`): a causal forward tile
    with BLOCK_M not a multiple of BLOCK_N fails with the constraint's text, never silently."""
    from mlinfra_lab.attention.flash import flash_attention

    device = "cuda" if torch.cuda.is_available() else "cpu"
    q = torch.randn(1, 1, 64, 16, device=device)
    # Exception: the interpreter wraps it in InterpreterError, the compiler in CompilationError
    with pytest.raises(Exception, match="BLOCK_M % BLOCK_N == 0"):
        with pinning.force("fwd", {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}):
            flash_attention(q, q, q, causal=True)


def test_restrict_needs_a_tile_and_restores_the_list():
    from mlinfra_lab.attention._flash_kernels import kernels

    before = list(kernels()["dq"].configs)
    with pytest.raises(ValueError, match="at least one tile"):
        with pinning.restrict("dq", []):
            pass
    with pinning.restrict("dq", [{"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}]):
        assert len(kernels()["dq"].configs) == 1
    assert kernels()["dq"].configs == before


def test_poisoned_buffers_start_as_nan_and_a_correct_kernel_overwrites_them():
    from mlinfra_lab.attention import flash

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with flash.poisoned_buffers():
        assert torch.isnan(flash._empty_like(torch.zeros(4, device=device))).all()
        g = torch.Generator(device=device).manual_seed(1)
        q, k, v = (
            torch.randn(1, 2, 37, 16, generator=g, device=device).requires_grad_() for _ in range(3)
        )
        out = flash.flash_attention(q, k, v, causal=True)
        out.backward(torch.ones_like(out))
    assert not any(torch.isnan(t).any() for t in (out, q.grad, k.grad, v.grad))
    assert flash._POISON is False  # reset after the block
