"""Chapter 1 kernel: `flash_attention` (Triton; the CPU interpreter here) against float64.

The bar, from the issue: for the output and each gradient, our error against a float64
reference is at most twice the error of eager PyTorch in the same dtype, plus a small
floor. Outputs and gradients are poisoned with NaN first, so an element the kernel never
writes fails. Sizes are tiny: the interpreter runs every program in numpy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

from mlinfra_lab import runtime
from mlinfra_lab.attention import (
    AttentionInputError,
    flash_attention,
    flash_attention_lse,
    naive_attention,
    tiled_attention,
)

pytestmark = pytest.mark.attention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# (batch, heads, seq_q, seq_k, head_dim, causal, dtype): seq 1/17/100/257, head dims
# 16..128 and 80/96, different query/key lengths, tails that are not a multiple of a tile.
CASES = [
    (1, 1, 1, 1, 16, False, torch.float32),
    (1, 2, 1, 1, 64, True, torch.float16),
    (2, 3, 17, 17, 16, False, torch.float32),
    (2, 3, 17, 17, 32, True, torch.float16),
    (1, 2, 100, 100, 80, True, torch.float16),
    (1, 2, 100, 100, 64, False, torch.float32),
    (1, 1, 257, 257, 16, True, torch.float16),
    (1, 1, 257, 257, 32, False, torch.float16),
    (1, 1, 33, 100, 128, False, torch.float16),
    (1, 1, 100, 17, 96, False, torch.float32),
    (2, 1, 64, 64, 128, True, torch.float16),
]
# On a GPU also bfloat16 and longer sequences (skipped under the interpreter).
GPU_CASES = [
    (2, 3, 17, 17, 64, True, torch.bfloat16),
    (1, 2, 257, 257, 80, False, torch.bfloat16),
    (2, 4, 1000, 1000, 128, True, torch.bfloat16),
    (1, 4, 300, 2048, 128, False, torch.bfloat16),
    (2, 4, 2048, 2048, 64, True, torch.float16),
    (1, 2, 4096, 4096, 96, True, torch.bfloat16),
]


def _rms(x: torch.Tensor) -> float:
    return x.double().pow(2).mean().sqrt().item()


def _check(name: str, ours: torch.Tensor, eager: torch.Tensor, ref: torch.Tensor, dtype) -> None:
    assert not torch.isnan(ours).any(), f"{name}: NaN in the kernel's result (unwritten element?)"
    err, eager_err = _rms(ours.double() - ref), _rms(eager.double() - ref)
    floor = 2 * torch.finfo(dtype).eps * max(_rms(ref), 1.0)
    assert err <= 2 * eager_err + floor, (
        f"{name}: rms error {err:.3e} > 2 x eager {eager_err:.3e} + floor {floor:.1e}"
    )


def _poison_allocations(monkeypatch) -> None:
    """The launchers allocate O, dQ, dK, dV and delta with torch.empty_like: fill those
    with NaN, so an element the kernels never write shows up as NaN in the result."""
    real_empty_like = torch.empty_like

    def poisoned(t, *args, **kwargs):
        out = real_empty_like(t, *args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(torch, "empty_like", poisoned)


def _grads(fn, q, k, v, do, causal):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = fn(*leaves, causal=causal)
    out.backward(do.to(out.dtype))
    return [out.detach()] + [x.grad for x in leaves]


@pytest.mark.parametrize(
    "b,h,n_q,n_k,d,causal,dtype",
    CASES + [pytest.param(*c, marks=pytest.mark.gpu) for c in GPU_CASES],
)
def test_flash_matches_float64_reference(b, h, n_q, n_k, d, causal, dtype, monkeypatch):
    _poison_allocations(monkeypatch)
    _check_against_float64(flash_attention, (b, h, n_q, n_k, d, causal, dtype), 1000, "")


def _check_against_float64(fn, case, seed, label) -> list[torch.Tensor]:
    """Output and gradients of `fn` on seeded inputs of `case`, each checked with `_check`
    against float64; returns ours (out, dq, dk, dv)."""
    b, h, n_q, n_k, d, causal, dtype = case
    if DEVICE == "cpu" and (dtype == torch.bfloat16 or n_k > 300):
        pytest.skip("GPU-only case (the interpreter has no bfloat16 and is slow)")
    g = torch.Generator().manual_seed(seed * n_q + d)  # fresh inputs per case
    q, k, v = (torch.randn(b, h, n, d, generator=g) for n in (n_q, n_k, n_k))
    do = torch.randn(b, h, n_q, d, generator=g)
    q, k, v, do = (x.to(DEVICE, dtype) for x in (q, k, v, do))
    ours = _grads(fn, q, k, v, do, causal)
    eager = _grads(naive_attention, q, k, v, do, causal)
    ref = _grads(naive_attention, *(x.double() for x in (q, k, v, do)), causal)
    for name, a, e, r in zip(("out", "dq", "dk", "dv"), ours, eager, ref, strict=True):
        _check(name + label, a, e, r, dtype)
    return ours


def test_backward_switch(monkeypatch):
    from mlinfra_lab.attention.flash import BACKWARDS, DEFAULT_BACKWARD, resolve_backward

    assert BACKWARDS == ("split", "gluon")
    monkeypatch.delenv("MLINFRA_ATTENTION_BACKWARD", raising=False)
    assert resolve_backward() == DEFAULT_BACKWARD == "gluon"
    monkeypatch.setenv("MLINFRA_ATTENTION_BACKWARD", "split")
    assert resolve_backward() == "split" and resolve_backward("gluon") == "gluon"
    with pytest.raises(AttentionInputError, match="'fast' does not exist; use one of split, gluon"):
        resolve_backward("fast")


def test_poisoning_is_active(monkeypatch):
    _poison_allocations(monkeypatch)
    assert torch.isnan(torch.empty_like(torch.zeros(3))).all()


def test_flash_writes_every_output_element(monkeypatch):
    _poison_allocations(monkeypatch)
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 45, 48, generator=g).to(DEVICE) for _ in range(3))
    for causal in (False, True):
        out = flash_attention(q, k, v, causal=causal)
        assert not torch.isnan(out).any(), "some output elements were never written"
        torch.testing.assert_close(out, naive_attention(q, k, v, causal), rtol=1e-4, atol=1e-4)


def test_lse_matches_tiled_reference():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 40, 32, generator=g).to(DEVICE) for _ in range(3))
    _, lse = flash_attention_lse(q, k, v, causal=True, sm_scale=0.5)
    _, ref = tiled_attention(q, k, v, causal=True, sm_scale=0.5, return_lse=True)
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 40)
    torch.testing.assert_close(lse, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "shape_k,dtype,kwargs,match",
    [
        ((1, 1, 8, 8), torch.float32, {}, "not supported"),  # head dim 8 < 16
        ((1, 1, 8, 256), torch.float32, {}, "not supported"),
        ((1, 1, 9, 32), torch.float32, {"causal": True}, "causal"),
    ],
)
def test_flash_input_errors(shape_k, dtype, kwargs, match):
    q = torch.zeros(1, 1, 8, shape_k[-1], dtype=dtype, device=DEVICE)
    k = torch.zeros(shape_k, dtype=dtype, device=DEVICE)
    with pytest.raises(AttentionInputError, match=match):
        flash_attention(q, k, k, **kwargs)


@pytest.mark.skipif(DEVICE != "cpu", reason="interpreter-only limit")
def test_interpreter_refuses_bfloat16_with_advice():
    runtime.ensure_triton_mode()
    x = torch.zeros(1, 1, 4, 16, dtype=torch.bfloat16)
    with pytest.raises(AttentionInputError, match="float16 or float32"):
        flash_attention(x, x, x)


# Version 5 (Gluon, Hopper only): lengths that are multiples of its tiles, head dims 64/128.
V5_GPU_CASES = [
    (2, 3, 128, 128, 64, True, torch.bfloat16),
    (1, 5, 384, 384, 128, False, torch.bfloat16),
    (2, 4, 1024, 1024, 128, True, torch.float16),
    (1, 2, 2048, 2048, 64, False, torch.bfloat16),
    (2, 4, 1024, 1024, 64, True, torch.bfloat16),  # the table says v1: the fallback config
    (1, 2, 4096, 4096, 128, True, torch.bfloat16),
]


@pytest.mark.gpu
@pytest.mark.parametrize("b,h,n_q,n_k,d,causal,dtype", V5_GPU_CASES)
def test_version_5_matches_float64_reference(b, h, n_q, n_k, d, causal, dtype, monkeypatch):
    """The Gluon forward (and the shared backward on its LSE) against float64; it must
    really run (no fallback warning, its configuration recorded), and its LSE must match."""
    from mlinfra_lab.attention import _gluon_fwd
    from mlinfra_lab.attention.flash import KernelVersionWarning

    if DEVICE == "cpu" or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("version 5 runs on Hopper only")
    _poison_allocations(monkeypatch)
    _gluon_fwd.LAST_CONFIG.clear()
    v5 = lambda q, k, v, causal: flash_attention(q, k, v, causal=causal, version=5)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelVersionWarning)  # a fallback to v1 would warn
        _check_against_float64(v5, (b, h, n_q, n_k, d, causal, dtype), 5000, " (v5)")
    assert _gluon_fwd.LAST_CONFIG.get("fwd"), "version 5 did not launch"
    g = torch.Generator().manual_seed(n_q + d)
    q, k, v = (torch.randn(b, h, n_q, d, generator=g).to(DEVICE, dtype) for _ in "qkv")
    _, lse = flash_attention_lse(q, k, v, causal=causal, version=5)
    _, lse_ref = tiled_attention(q.double(), k.double(), v.double(), causal=causal, return_lse=True)
    torch.testing.assert_close(lse.double(), lse_ref.double().view_as(lse), rtol=0, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, True)])
def test_version_5_untabled_forms_match_float64(d, causal):
    """The ``-ps`` form (P staged in shared memory for P V, branch-free causal mask) and the
    ``-er`` form (O rescaled while Q K^T runs), in the configurations the experiment times,
    give the same O and LSE as float64, on odd batch x heads."""
    from mlinfra_lab.attention._gluon_fwd import GluonConfig, gluon_forward

    if DEVICE == "cpu" or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("version 5 runs on Hopper only")
    g = torch.Generator().manual_seed(d + causal)
    q, k, v = (torch.randn(3, 5, 1024, d, generator=g).to(DEVICE, torch.bfloat16) for _ in "qkv")
    for cfg in (
        GluonConfig(128, 64, 8, 2, True, p_smem=True),
        GluonConfig(64, 64, 4, 2, True, p_smem=True),
        GluonConfig(128, 64, 4, 2, True, early_rescale=True),
        GluonConfig(128, 64, 4, 2, True, p_smem=True, early_rescale=True),
        GluonConfig(128, 128, 8, 2, True, early_rescale=True),
    ):
        o, lse = gluon_forward(q, k, v, causal, d**-0.5, cfg)
        ref, ref_lse = tiled_attention(
            q.double(), k.double(), v.double(), causal=causal, return_lse=True
        )
        torch.testing.assert_close(o.double(), ref, rtol=0, atol=2e-2, msg=cfg.name)
        lse_nat = lse.double().view_as(ref_lse) / 1.4426950408889634  # base 2 -> natural
        torch.testing.assert_close(lse_nat, ref_lse.double(), rtol=0, atol=2e-2, msg=cfg.name)


# The Gluon backward (Hopper only, the default there): shapes its table gives it, odd batch x
# heads, both head dims, causal and not, a length past its causal D=64 bucket (Triton runs).
GLUON_BWD_GPU_CASES = [
    (2, 3, 128, 128, 64, True, torch.bfloat16),
    (1, 5, 384, 384, 128, False, torch.bfloat16),
    (3, 1, 1024, 1024, 128, True, torch.float16),
    (1, 3, 2048, 2048, 64, False, torch.bfloat16),
    (1, 2, 4096, 4096, 128, True, torch.bfloat16),
]


@pytest.mark.gpu
@pytest.mark.parametrize("b,h,n_q,n_k,d,causal,dtype", GLUON_BWD_GPU_CASES)
def test_gluon_backward_matches_float64_reference(b, h, n_q, n_k, d, causal, dtype, monkeypatch):
    """The default backward on Hopper is the Gluon one: it must really run (its configuration
    recorded, no fallback warning), write every gradient element, and match float64."""
    from mlinfra_lab.attention import _gluon_bwd
    from mlinfra_lab.attention.flash import KernelVersionWarning

    if DEVICE == "cpu" or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon backward runs on Hopper only")
    monkeypatch.delenv("MLINFRA_ATTENTION_BACKWARD", raising=False)
    _poison_allocations(monkeypatch)
    _gluon_bwd.LAST_CONFIG.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelVersionWarning)
        _check_against_float64(
            flash_attention, (b, h, n_q, n_k, d, causal, dtype), 7000, " (gluon)"
        )
    assert _gluon_bwd.LAST_CONFIG.get("bwd"), "the Gluon backward did not launch"


def test_gluon_backward_elsewhere_runs_split_and_says_why_when_asked(monkeypatch):
    """Asked for by name where it cannot run, the Gluon backward warns and the Triton split
    kernels answer, with the same gradients as asking for "split"; as the default it falls
    back without a word."""
    from mlinfra_lab.attention.flash import KernelVersionWarning

    monkeypatch.delenv("MLINFRA_ATTENTION_BACKWARD", raising=False)
    g = torch.Generator().manual_seed(13)
    q, k, v, do = (torch.randn(1, 2, 20, 80, generator=g).to(DEVICE) for _ in "qkvo")

    def grads(**kw):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        flash_attention(*leaves, **kw).backward(do)
        return [t.grad for t in leaves]

    why = "needs a Hopper GPU" if DEVICE == "cpu" else "dtype torch.float32"
    with pytest.warns(KernelVersionWarning, match=why):
        asked = grads(backward="gluon")
    split = grads(backward="split")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        default = grads()
    for a, s_, d_ in zip(asked, split, default, strict=True):
        torch.testing.assert_close(a, s_, rtol=0, atol=0)
        torch.testing.assert_close(d_, s_, rtol=0, atol=0)


def test_gluon_backward_shape_rules_and_table():
    """The rules that keep a launch from hanging or reading out of bounds, one by one, and
    every configuration the table or the fallback can launch passes them."""
    from mlinfra_lab.attention._gluon_bwd import (
        BWD_TABLE,
        FALLBACK_CONFIG,
        GluonBwdConfig,
        pick_config,
        shape_problem,
    )

    cfg = GluonBwdConfig((64, 64, 4, 2), (64, 64, 4, 2))
    ok = ((2, 4, 1024, 64), 1024, torch.bfloat16, True, cfg)
    assert shape_problem(*ok) is None
    bad = {
        "float32": dict(dtype=torch.float32),
        "head dim 80": dict(shape=(2, 4, 1024, 80)),
        "lengths differ": dict(n_k=512),
        "not a multiple": dict(shape=(2, 4, 1000, 64), n_k=1000),
        "grid": dict(shape=(70000, 1, 128, 64), n_k=128),
        # a causal diagonal program that owns no whole tile of the other side would hang
        "BLOCK_N % BLOCK_M": dict(config=GluonBwdConfig((128, 64, 8, 2), (64, 64, 4, 2))),
        "BLOCK_M % BLOCK_N": dict(config=GluonBwdConfig((64, 64, 4, 2), (64, 128, 4, 2))),
    }
    names = ("shape", "n_k", "dtype", "causal", "config")
    for why, change in bad.items():
        args = dict(zip(names, ok, strict=True)) | change
        assert why in (shape_problem(**args) or ""), why
    for (d, causal), rows in BWD_TABLE.items():
        bounds = [n for n, _ in rows]
        assert bounds == sorted(bounds), f"({d}, {causal}): length buckets out of order"
        for c in [c for _, c in rows if c] + [FALLBACK_CONFIG]:
            assert shape_problem((1, 1, 4096, d), 4096, torch.bfloat16, causal, c) is None
    assert pick_config(64, True, 16384) is None and pick_config(128, True, 16384) is not None
    assert pick_config(96, False, 1024) is None


def test_gluon_backward_compiles_for_hopper_with_its_schedule():
    """Both Gluon backward kernels of the table's configuration build for sm_90 here, without
    a GPU: tiles arrive by TMA, the matmuls are wgmma, and each kernel waits with a matmul
    still in flight (``wgmma.wait_group 1``: dP^T under the softmax, dV under dP^T)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    script = """
import json, re
from mlinfra_lab.attention._gluon_bwd import compile_for_hopper, pick_config
seen = {}
for kind, k in compile_for_hopper(128, True, pick_config(128, True, 4096)).items():
    ptx = k.asm["ptx"]
    waits = sorted(set(re.findall(r"wgmma.wait_group.sync.aligned\\s+(\\d+)", ptx)))
    seen[kind] = [waits, "cp.async.bulk.tensor" in ptx, "wgmma.mma_async" in ptx]
print(json.dumps(seen))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, not interpret
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(seen) == {"dkdv", "dq"}
    for kind, (waits, tma, wgmma) in seen.items():
        assert tma and wgmma, f"{kind}: TMA copy {tma}, wgmma {wgmma}"
        assert "1" in waits, f"{kind}: no wait with a matmul in flight ({waits})"


def test_version_5_elsewhere_runs_v1_and_says_why_when_asked(monkeypatch):
    """Asked for by name where it cannot run, v5 warns and v1 answers; the default (v5 where
    its table says so) falls back without a word, since nothing was asked for."""
    from mlinfra_lab.attention.flash import KernelVersionWarning

    monkeypatch.delenv("MLINFRA_ATTENTION_KERNEL", raising=False)
    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(1, 2, 20, 80, generator=g).to(DEVICE) for _ in "qkv")
    why = "needs a Hopper GPU" if DEVICE == "cpu" else "dtype torch.float32"
    with pytest.warns(KernelVersionWarning, match=why):
        out = flash_attention(q, k, v, version=5)
    torch.testing.assert_close(out, naive_attention(q, k, v), rtol=1e-4, atol=1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(flash_attention(q, k, v), out, rtol=0, atol=0)


def test_version_5_shape_rules():
    """The rules that keep a launch from hanging or reading out of bounds, one by one."""
    from mlinfra_lab.attention._gluon_fwd import GluonConfig, shape_problem

    cfg = GluonConfig(128, 64, 4, 2)
    ok = ((2, 4, 1024, 64), 1024, torch.bfloat16, True, 0.125, cfg)
    assert shape_problem(*ok) is None
    bad = {
        "float32": dict(dtype=torch.float32),
        "scale > 0": dict(sm_scale=-0.1),
        "head dim 80": dict(shape=(2, 4, 1024, 80)),
        "lengths differ": dict(n_k=512),
        "not a multiple": dict(shape=(2, 4, 1000, 64), n_k=1000),
        "grid": dict(shape=(2, 4, 0, 64), n_k=0),
        # the tile that hung the GPU: the first causal program would own no whole key tile
        "BLOCK_M % BLOCK_N": dict(config=GluonConfig(64, 128, 4, 2)),
    }
    names = ("shape", "n_k", "dtype", "causal", "sm_scale", "config")
    for why, change in bad.items():
        args = dict(zip(names, ok, strict=True)) | change
        assert why in (shape_problem(**args) or ""), why


def test_version_5_table_holds_only_configs_that_can_run():
    """Every configuration the table or the fallback can launch passes the shape rules for
    the head dim and mask it is used with (a causal tile that could hang cannot enter)."""
    from mlinfra_lab.attention._gluon_fwd import FALLBACK_CONFIG, GLUON_TABLE, shape_problem

    for (d, causal), rows in GLUON_TABLE.items():
        bounds = [n for n, _ in rows]
        assert bounds == sorted(bounds), f"({d}, {causal}): length buckets out of order"
        for cfg in [c for _, c in rows if c] + [FALLBACK_CONFIG[causal]]:
            assert shape_problem((1, 1, 4096, d), 4096, torch.bfloat16, causal, 0.1, cfg) is None


def test_version_5_descriptors_view_the_heads_as_rows():
    """The four TMA descriptors (host-side, no GPU needed to build them) see Q, K, V, O as
    ``[B*H*N, D]`` rows, Q and O in BLOCK_M-row blocks, K and V in BLOCK_N-row blocks."""
    pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    from mlinfra_lab.attention._gluon_fwd import GLUON_TABLE, descriptors

    cfg = next(c for _, c in GLUON_TABLE[(128, True)] if c)
    q, k, v, o = (torch.zeros(2, 3, 512, 128, dtype=torch.bfloat16) for _ in range(4))
    got = [
        (list(d.shape), list(d.block_shape), d.base.data_ptr())
        for d in descriptors(q, k, v, o, cfg)
    ]
    rows = 2 * 3 * 512
    assert got == [
        ([rows, 128], [cfg.block_m, 128], q.data_ptr()),
        ([rows, 128], [cfg.block_n, 128], k.data_ptr()),
        ([rows, 128], [cfg.block_n, 128], v.data_ptr()),
        ([rows, 128], [cfg.block_m, 128], o.data_ptr()),
    ]


def test_version_5_compiles_for_hopper_with_its_schedule():
    """Each configuration the table uses builds for sm_90 here, without a GPU, and its machine
    code has the schedule it claims: the overlap waits with one matmul still in flight
    (``wgmma.wait_group 1``), the plain schedule never does; tiles arrive by TMA."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    script = """
import json, re
from mlinfra_lab.attention._gluon_fwd import FALLBACK_CONFIG, GLUON_TABLE, compile_for_hopper
seen = []
for (d, causal), rows in GLUON_TABLE.items():
    for cfg in {c for _, c in rows if c} | {FALLBACK_CONFIG[causal]}:
        ptx = compile_for_hopper(d, causal, cfg).asm["ptx"]
        waits = sorted(set(re.findall(r"wgmma.wait_group.sync.aligned\\s+(\\d+)", ptx)))
        seen.append([d, causal, cfg.overlap, waits, "cp.async.bulk.tensor" in ptx])
print(json.dumps(seen))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, not interpret
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(seen) >= 4
    for d, causal, overlap, waits, tma in seen:
        assert tma, f"D={d} causal={causal}: no TMA copy in the PTX"
        assert ("1" in waits) == overlap, f"D={d} causal={causal} overlap={overlap}: {waits}"


# The largest shared memory one block may ask for, per GPU family (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability"): Turing 64 KB, Ada/consumer Ampere 99 KB.
SHARED_MEMORY_LIMITS = {(7, 5): 64 * 1024, (8, 6): 99 * 1024}


def test_every_tile_fits_its_gpu_familys_shared_memory():
    """Each tile the autotuner may launch on a T4 (Colab's free GPU, sm_75) or an Ada/Ampere
    card (sm_86: the smallest limit of the 8.x family) builds for that GPU here, without one,
    and asks for no more shared memory than a block may have there, at the largest head dim
    (BLOCK_D = 128; head dims 80 and 96 pad to it). A tile over the limit fails at launch with
    OutOfResources: chapter 1's backward cell did so on a T4 with the Ampere list (80-96 KB)."""
    script = """
import inspect, json, sys
import triton
from triton.backends.compiler import GPUTarget
from mlinfra_lab.attention import _flash_kernels as fk

POINTERS = {"Q", "K", "V", "Out", "DO", "DK", "DV", "DQ"}
kernels = {"fwd": fk._fwd_kernel, "dkdv": fk._bwd_dkdv_kernel, "dq": fk._bwd_dq_kernel}
rows = []
for cap, dtype in (((7, 5), "fp16"), ((8, 6), "bf16")):
    for (name, kernel), cfgs in zip(kernels.items(), fk.configs_for(cap)):
        for cfg in cfgs:
            consts = dict(CAUSAL=True, HEAD_DIM=128, BLOCK_D=128, PRECISION="tf32", **cfg.kwargs)
            sig = {}
            for arg in inspect.signature(kernel.fn).parameters:
                if arg in consts:
                    sig[arg] = "constexpr"
                elif arg in POINTERS:
                    sig[arg] = "*" + dtype
                elif arg in ("LSE", "DELTA"):
                    sig[arg] = "*fp32"
                else:
                    sig[arg] = "fp32" if "scale" in arg else "i32"
            compiled = triton.compile(
                triton.compiler.ASTSource(kernel, sig, consts),
                target=GPUTarget("cuda", cap[0] * 10 + cap[1], 32),
                options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
            )
            rows.append([list(cap), name, cfg.kwargs, compiled.metadata.shared])
print(json.dumps(rows))
"""
    env = dict(os.environ, TRITON_INTERPRET="0")  # compile for the GPU, not the interpreter
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert {tuple(cap) for cap, *_ in rows} == set(SHARED_MEMORY_LIMITS)
    for cap, kernel, tile, smem in rows:
        limit = SHARED_MEMORY_LIMITS[tuple(cap)]
        assert smem <= limit, f"sm_{cap[0]}{cap[1]} {kernel} {tile}: {smem} B > {limit} B"


def test_flash_version_switch(monkeypatch):
    from mlinfra_lab.attention.flash import DEFAULT_VERSION, KERNEL_VERSIONS, resolve_version

    assert KERNEL_VERSIONS == (1, 5)
    monkeypatch.delenv("MLINFRA_ATTENTION_KERNEL", raising=False)
    assert resolve_version() == DEFAULT_VERSION and resolve_version(1) == 1
    monkeypatch.setenv("MLINFRA_ATTENTION_KERNEL", "v1")
    assert resolve_version() == 1
    monkeypatch.setenv("MLINFRA_ATTENTION_KERNEL", "5")
    assert resolve_version() == 5
    with pytest.raises(AttentionInputError, match=r"7 does not exist; use one of \(1, 5\)"):
        resolve_version(7)
    monkeypatch.setenv("MLINFRA_ATTENTION_KERNEL", "fast")
    with pytest.raises(AttentionInputError, match="'fast' does not exist"):
        resolve_version()


# The variants removed after losing on the H200: (how it is asked for, what the message names)
REMOVED = [
    ({"version": 2}, None, "version=2: kernel version 2", "h200-attention-2026-12-02-v2.json"),
    ({"version": 3}, None, "version=3: kernel version 3", "h200-fwd-versions-2026-12-04-run"),
    ({"version": 4}, None, "version=4: kernel version 4", "h200-fwd-overlap-2026-12-04-run"),
    ({}, ("KERNEL", "v3"), "MLINFRA_ATTENTION_KERNEL=v3: kernel version 3", "fwd-versions"),
    ({}, ("KERNEL", "4"), "MLINFRA_ATTENTION_KERNEL=4: kernel version 4", "fwd-overlap"),
    ({"backward": "atomic"}, None, "backward='atomic': the 'atomic'", "h200-bwd-atomic-2026"),
    ({}, ("BACKWARD", "atomic"), "MLINFRA_ATTENTION_BACKWARD=atomic", "h200-bwd-atomic-2026"),
]


@pytest.mark.parametrize("kwargs,env,names,result_file", REMOVED)
def test_a_removed_variant_says_what_it_measured_and_where_its_code_is(
    kwargs, env, names, result_file, monkeypatch
):
    """Asking for a removed kernel, by argument or environment, raises `RemovedKernelError`
    (an `AttentionInputError`) that names what was asked, its result file, the commit holding
    its code and what to use instead; nothing runs."""
    from mlinfra_lab.attention import RemovedKernelError

    monkeypatch.delenv("MLINFRA_ATTENTION_KERNEL", raising=False)
    monkeypatch.delenv("MLINFRA_ATTENTION_BACKWARD", raising=False)
    if env:
        monkeypatch.setenv(f"MLINFRA_ATTENTION_{env[0]}", env[1])
    x = torch.zeros(1, 1, 16, 16, device=DEVICE)
    with pytest.raises(RemovedKernelError) as caught:
        flash_attention(x, x, x, **kwargs)
    message = str(caught.value)
    assert isinstance(caught.value, AttentionInputError)
    assert message.startswith(names) and "was removed" in message, message
    assert "benchmarks/results/h200-" in message and result_file in message, message
    assert "git commit 687b216" in message and "git show 687b216:" in message, message
    instead = "set it to 1" if env and env[0] == "KERNEL" else "set it to split"
    if not env:
        instead = "version=1" if "version" in kwargs else 'backward="split"'
    assert instead in message, message


def test_autotune_is_skipped_for_fp32_and_short_sequences(monkeypatch):
    """The pruner keeps the tile search for long low-precision runs only (one compile else)."""
    from mlinfra_lab.attention import _flash_configs as fk

    monkeypatch.delenv("MLINFRA_ATTENTION_AUTOTUNE", raising=False)  # make test-gpu sets it

    configs = ["first", "second", "third"]
    prune = fk._pruner("fp32-tile", "fwd")
    long = {"n_q": 4096, "n_k": 4096}
    assert prune(configs, long, PRECISION="tf32") == configs
    assert prune(configs, long, PRECISION="ieee") == ["fp32-tile"]
    assert prune(configs, {"n_q": 100, "n_k": 100}, PRECISION="tf32") == ["first"]
    assert prune(configs, {"n_q": 100, "n_k": 4096}, PRECISION="tf32") == configs


def test_a_shape_in_the_tile_table_runs_its_tile_without_a_search(monkeypatch):
    """On a GPU named in the committed table, a shape of a measured bucket gets the table's
    tile as the only candidate; float32 and MLINFRA_ATTENTION_AUTOTUNE=0 keep their rules."""
    from types import SimpleNamespace

    from mlinfra_lab.attention import _flash_configs as fk
    from mlinfra_lab.attention import tile_table

    monkeypatch.delenv("MLINFRA_ATTENTION_AUTOTUNE", raising=False)
    tile = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3}
    table = {
        "entries": [
            {
                "kernel": "fwd",
                "gpu": "NVIDIA H200",
                "dtype": "bfloat16",
                "head_dim": 128,
                "causal": True,
                "seq": 4096,
                "tile": tile,
            }
        ]
    }
    monkeypatch.setattr(tile_table, "load_table", lambda: table)
    monkeypatch.setattr(fk.torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    q = SimpleNamespace(is_cuda=True, device="cuda:0", dtype=torch.bfloat16)
    args = {"Q": q, "n_q": 4096, "n_k": 4096, "HEAD_DIM": 128, "CAUSAL": True}
    (picked,) = fk._pruner("fp32-tile", "fwd")(["first", "second"], args, PRECISION="tf32")
    assert picked.kwargs == {"BLOCK_M": 128, "BLOCK_N": 128}
    assert (picked.num_warps, picked.num_stages) == (8, 3)
    other = dict(args, HEAD_DIM=96)  # no entry: the search runs
    assert fk._pruner("fp32-tile", "fwd")(["first", "second"], other, PRECISION="tf32") == [
        "first",
        "second",
    ]
    assert fk._pruner("fp32-tile", "dq")(["first", "second"], args, PRECISION="tf32") == [
        "first",
        "second",
    ]
    assert fk._pruner("fp32-tile", "fwd")(["a", "b"], args, PRECISION="ieee") == ["fp32-tile"]


def test_autotune_off_keeps_float32_on_its_own_tile(monkeypatch):
    """MLINFRA_ATTENTION_AUTOTUNE=0 keeps every GPU list longer than one config, so the pruner
    still runs: Triton launches a lone config without pruning, and float32 then compiled a
    128 x 64 IEEE tile for over a minute (chapter 1's head-dim cell timed out on the H200)."""
    from mlinfra_lab.attention import _flash_configs as fk

    monkeypatch.setenv("MLINFRA_ATTENTION_AUTOTUNE", "0")
    for capability in ((9, 0), (8, 9), (8, 0), (7, 5)):
        assert all(len(cfgs) > 1 for cfgs in fk.configs_for(capability)), capability
    prune = fk._pruner("fp32-tile", "fwd")
    long = {"n_q": 4096, "n_k": 4096}
    assert prune(["first", "second"], long, PRECISION="tf32") == ["first"]
    assert prune(["first", "second"], long, PRECISION="ieee") == ["fp32-tile"]


def test_batch_chunks_past_the_grid_row_limit_give_the_same_result(monkeypatch):
    """batch x heads above CUDA's 65,535 grid rows is launched in batch chunks (the H200
    refused 512 x 128 heads in one launch); the chunked result equals the one-launch one."""
    from mlinfra_lab.attention import flash

    g = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(3, 2, 40, 16, generator=g).to(DEVICE) for _ in range(4))

    def run():
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = flash_attention(*leaves, causal=True)
        out.backward(do)
        return [out.detach()] + [t.grad for t in leaves]

    whole = run()
    assert flash._batch_chunks(3, 2) == [(0, 3)]
    monkeypatch.setattr(flash, "MAX_GRID_ROWS", 2)  # one sequence of 2 heads per launch
    assert flash._batch_chunks(3, 2) == [(0, 1), (1, 2), (2, 3)]
    for a, b in zip(whole, run(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    monkeypatch.setattr(flash, "MAX_GRID_ROWS", 1)
    with pytest.raises(AttentionInputError, match="heads exceed"):
        flash._batch_chunks(3, 2)
