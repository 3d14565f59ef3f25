"""FlashAttention's backward in Gluon: four tile configurations checked and timed on Hopper.

Status: run once on an H100 (2026-12-05, benchmarks/results/h100-gluon-bwd-2026-12-05.json):
every configuration as accurate as the Triton kernels; 64x64 tiles with 4 warps won and are
now the package's default backward on Hopper (`mlinfra_lab.attention._gluon_bwd`, whose
kernels this script imports). Before that it was compiled for sm_90 on a CPU
(`--compile-only`, which also runs ptxas on every kernel and reports registers, spills and
the SASS schedule). The SASS keeps
the dK/dV kernel's exp2s under the in-flight dP^T in every configuration (Triton 3.6's
ptxas), unlike version 5's forward at its table tile; the causal 8-warp 64x128 dK/dV tiles
spill inside the loop, the 32x128 one does not. To run it again::

    python benchmarks/experiments/gluon_bwd_experiment.py --out bwd.json    # on the H200
    python benchmarks/experiments/gluon_bwd_experiment.py --compile-only    # any machine

Why: the Triton backward (``flash._backward``, "split": a dK/dV kernel and a dQ kernel,
7 matmuls) runs at 0.74-0.76x cuDNN at D=128 on the H200; issue 13 asks for 0.85x. Version 5
showed what Gluon buys the forward (1.13-1.37x version 1 at D=128): matmuls issued
asynchronously where the kernel says, tiles streamed by TMA into rings behind mbarriers.
This script applies the same schedule to the backward's two kernels and keeps the split
(no atomics), so the two are compared one for one with the Triton kernels they would
replace.

- ``attn_bwd_dkdv``: one program per BLOCK_N keys of one head, K and V in shared memory
  for the whole program; query tiles (Q, dO) stream through a ring of STAGES slots. Per tile,
  transposed as in FA2/FA3 so dK and dV accumulate in place: S^T = K Q^T and dP^T = V dO^T
  issued back to back (async); wait for S^T only, P^T = exp2(S^T * scale*log2e - lse), then
  dV += P^T dO issued while dP^T may still run; wait for dP^T, dS^T = P^T (dP^T - delta),
  dK += dS^T Q; the slot is refilled once both of its matmuls are done. dK is scaled once at
  the end, and dK, dV leave by TMA through K's and V's buffers.
- ``attn_bwd_dq``: version 5's forward loop with the backward's algebra: Q and dO loaded
  once, K and V tiles in rings; S = Q K^T and dP = dO V^T issued together, P and dS
  as above, dQ += dS K.
- delta = rowsum(dO * O) comes from the Triton kernel the split backward already uses.
- Causal programs run heaviest first; only tiles on the diagonal are masked.
- Shape rules as version 5's (bf16/fp16, D 64/128, N a multiple of every tile, and for
  causal the diagonal tile must hold whole tiles of the other side: BLOCK_N % BLOCK_M == 0
  in dK/dV, BLOCK_M % BLOCK_N == 0 in dQ; the forward's hang came from breaking that rule).

Prediction (written before any run): at D=128 the Gluon dK/dV kernel 1.15-1.35x the Triton
one and the dQ kernel 1.1-1.3x, so the whole backward 0.85-0.95x cuDNN at N >= 4k (the Triton
split backward measured 0.74-0.76x), since version 5's schedule gave the forward 1.13-1.37x.
Risks, from the sm_90 build on a CPU: the 8-warp dK/dV kernel at D=128 holds two float32
accumulators and two scores tiles in 248-255 registers a thread (32-48 bytes spilled when
causal), one program per SM; the S^T/dP^T pair in flight costs 32 registers more than issuing
them one at a time.

Checks (each configuration in a child process with a time limit: a wrong barrier phase
hangs a kernel, and a hung kernel cannot be interrupted from Python): dQ, dK, dV against a
float32 autograd reference on a few shapes, next to the Triton split backward's own error
on the same inputs; a configuration passes when its worst error is at most twice the Triton
kernel's plus 1e-3 (so it is as accurate as the kernel the test suite accepts) and
no gradient holds a NaN (outputs start as NaN, so an element never written shows).
Timings: the backward alone at D 64 and 128, N 1k-16k, causal and not, the benchmark's
sweep (16k tokens x 2048 features): each configuration, the Triton split backward (launched
the same way, without autograd), and cuDNN through autograd (as the benchmark times it).
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from child_checks import check_in_children, run_header, write_json  # this folder's helpers
from sm90_report import ptxas_report  # this folder's helper
from triton.experimental.gluon import language as gl

# the kernels moved into the package once this script had checked and timed them (2026-12-05)
from mlinfra_lab.attention._gluon_bwd_kernels import attn_bwd_dkdv, attn_bwd_dq
from mlinfra_lab.attention.studies.machine_code import disassemble, schedule

LOG2E = 1.4426950408889634
TOKENS, FEATURES = 16384, 2048

# (name, dK/dV: BLOCK_M, BLOCK_N, warps, STAGES; dQ: BLOCK_M, BLOCK_N, warps, STAGES)
CONFIGS = [
    ("kv-m64n128w8s2.q-m128n64w8s2", (64, 128, 8, 2), (128, 64, 8, 2)),
    ("kv-m64n128w8s3.q-m128n64w8s3", (64, 128, 8, 3), (128, 64, 8, 3)),
    ("kv-m64n64w4s2.q-m64n64w4s2", (64, 64, 4, 2), (64, 64, 4, 2)),
    ("kv-m32n128w8s3.q-m128n128w8s2", (32, 128, 8, 3), (128, 128, 8, 2)),
]


def _layout(block: list[int], dtype: torch.dtype = torch.bfloat16) -> gl.NVMMASharedLayout:
    gdtype = gl.bfloat16 if dtype == torch.bfloat16 else gl.float16
    return gl.NVMMASharedLayout.get_default_for(block, gdtype)


def shape_problem(n: int, causal: bool, config: tuple) -> str | None:
    """Why `config` cannot take N tokens (None when it can): the tiles must divide N, and a
    causal diagonal tile must hold whole tiles of the other side (else a program waits forever)."""
    _, (kv_m, kv_n, _, _), (q_m, q_n, _, _) = config
    if any(n % t for t in (kv_m, kv_n, q_m, q_n)):
        return f"N={n} is not a multiple of every tile"
    if causal and (kv_n % kv_m or q_m % q_n):
        return "causal needs BLOCK_N % BLOCK_M == 0 (dK/dV) and BLOCK_M % BLOCK_N == 0 (dQ)"
    return None


def gluon_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    sm_scale: float,
    config: tuple,
    poison: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of contiguous ``[B, H, N, D]`` bf16/fp16 inputs, given the forward's O and
    base-2 LSE ``[B*H, N]`` (flash's convention). ``poison``: outputs start as NaN, so an
    element no program writes shows (the check's setting; timing leaves it off)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from mlinfra_lab.attention.flash import _launch_delta

    b, h, n, d = q.shape
    why = shape_problem(n, causal, config)
    if why:
        raise ValueError(why)
    _, (kv_m, kv_n, kv_w, kv_s), (q_m, q_n, q_w, q_s) = config
    rows = b * h * n
    delta = torch.empty_like(lse)
    _launch_delta(o, do, delta, b * h)
    make = (lambda t: torch.full_like(t, float("nan"))) if poison else torch.empty_like
    dq, dk, dv = (make(t) for t in (q, k, v))

    def desc(t: torch.Tensor, block_rows: int) -> TensorDescriptor:
        block = [block_rows, d]
        return TensorDescriptor(t.view(rows, d), [rows, d], [d, 1], block, _layout(block, t.dtype))

    qk_scale = sm_scale * LOG2E
    attn_bwd_dkdv[(n // kv_n, b * h)](
        desc(q, kv_m),
        desc(k, kv_n),
        desc(v, kv_n),
        desc(do, kv_m),
        desc(dk, kv_n),
        desc(dv, kv_n),
        lse,
        delta,
        n,
        qk_scale,
        sm_scale,
        HEAD_DIM=d,
        BLOCK_M=kv_m,
        BLOCK_N=kv_n,
        STAGES=kv_s,
        CAUSAL=causal,
        num_warps=kv_w,
    )
    attn_bwd_dq[(n // q_m, b * h)](
        desc(q, q_m),
        desc(k, q_n),
        desc(v, q_n),
        desc(do, q_m),
        desc(dq, q_m),
        lse,
        delta,
        n,
        qk_scale,
        sm_scale,
        HEAD_DIM=d,
        BLOCK_M=q_m,
        BLOCK_N=q_n,
        STAGES=q_s,
        CAUSAL=causal,
        num_warps=q_w,
    )
    return dq, dk, dv


def compile_only() -> list[dict]:
    """Build every kernel of every configuration for sm_90 (no GPU): shared memory, and
    ptxas's registers and spills."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    out = []
    for name, kv, qcfg in CONFIGS:
        for d in (64, 128):
            for causal in (False, True):
                for kind, kernel, (bm, bn, warps, stages) in (
                    ("dkdv", attn_bwd_dkdv, kv),
                    ("dq", attn_bwd_dq, qcfg),
                ):

                    def desc(r: int, d: int = d) -> str:
                        return f"tensordesc<bf16[{r}, {d}],{_layout([r, d])!r}>"

                    m_rows, n_rows = desc(bm), desc(bn)
                    if kind == "dkdv":
                        descs = {"q_desc": m_rows, "k_desc": n_rows, "v_desc": n_rows}
                        descs.update(do_desc=m_rows, dk_desc=n_rows, dv_desc=n_rows)
                    else:
                        descs = {"q_desc": m_rows, "k_desc": n_rows, "v_desc": n_rows}
                        descs.update(do_desc=m_rows, dq_desc=m_rows)
                    sig = dict(descs, LSE="*fp32", DELTA="*fp32", n_ctx="i32")
                    sig.update(qk_scale="fp32", sm_scale="fp32")
                    consts = dict(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, CAUSAL=causal)
                    sig.update({key: "constexpr" for key in consts})
                    compiled = triton.compile(
                        GluonASTSource(kernel, sig, consts),
                        target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": warps},
                    )
                    row = {
                        "config": name,
                        "kernel": kind,
                        "head_dim": d,
                        "causal": causal,
                        "smem_bytes": compiled.metadata.shared,
                        "ptxas": ptxas_report(compiled.asm["ptx"]),
                        # M matmul, W<n> wait, E exp2, S/L spill (mlinfra_lab.attention.studies.machine_code)
                        "sass": schedule(disassemble(compiled)),
                    }
                    print(json.dumps(row), flush=True)
                    out.append(row)
    return out


def _inputs(b: int, h: int, n: int, d: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [
        torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)
    ]


def check_one(name: str) -> dict:
    """Child process: one configuration's gradients against float32 autograd, next to the
    Triton split backward's on the same inputs."""
    from mlinfra_lab.attention.flash import _backward, _forward

    config = next(c for c in CONFIGS if c[0] == name)
    worst = {"gluon": 0.0, "triton": 0.0}
    nan = False
    for d in (64, 128):
        for causal in (False, True):
            for b, h, n in ((1, 3, 128), (2, 3, 512), (1, 2, 2048)):
                if shape_problem(n, causal, config):
                    continue
                q, k, v, do = _inputs(b, h, n, d, n + d)
                scale = d**-0.5
                o, lse = _forward(q, k, v, causal, scale, version=1)
                ref = [t.detach().float().requires_grad_() for t in (q, k, v)]
                s = (ref[0] @ ref[1].transpose(-1, -2)) * scale
                if causal:
                    s = s.masked_fill(torch.ones(n, n, device="cuda").triu(1).bool(), -torch.inf)
                (torch.softmax(s, -1) @ ref[2]).backward(do.float())
                got = gluon_backward(do, q, k, v, o, lse, causal, scale, config, poison=True)
                base = _backward(do, q, k, v, o, lse, causal, scale, "split")
                for key, grads in (("gluon", got), ("triton", base)):
                    for g, r in zip(grads, ref, strict=True):
                        nan = nan or bool(g.isnan().any())
                        worst[key] = max(worst[key], (g.float() - r.grad).abs().max().item())
    ok = not nan and worst["gluon"] <= 2 * worst["triton"] + 1e-3
    return {"max_err": worst["gluon"], "max_err_triton": worst["triton"], "nan": nan, "ok": ok}


def time_shape(d: int, n: int, causal: bool, good: list[str]) -> dict:
    """Backward TFLOP/s of one shape of the sweep: each passing configuration, the Triton
    split backward (launched the same way, without autograd), cuDNN through autograd."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    from triton.testing import do_bench

    from mlinfra_lab.attention.flash import _backward, _forward

    b, h = TOKENS // n, FEATURES // d
    q, k, v, do = _inputs(b, h, n, d, n)
    scale = d**-0.5
    o, lse = _forward(q, k, v, causal, scale, version=1)
    fns = {"triton_split": lambda: _backward(do, q, k, v, o, lse, causal, scale, "split")}
    for name in good:
        config = next(c for c in CONFIGS if c[0] == name)
        if not shape_problem(n, causal, config):
            fns[name] = lambda cfg=config: gluon_backward(do, q, k, v, o, lse, causal, scale, cfg)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = sdpa(*leaves, is_causal=causal)
    fns["sdpa_cudnn"] = lambda: out.backward(do, retain_graph=True)
    flops = 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)
    tf = {}
    for name, fn in fns.items():
        try:
            kw = {"grad_to_none": leaves} if name == "sdpa_cudnn" else {}
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median", **kw)
            tf[name] = flops / ms * 1e-9
        except Exception as err:  # noqa: BLE001 - a refusal is a result
            tf[name] = f"error: {str(err).splitlines()[0][:200]}"
    return {"head_dim": d, "seq": n, "causal": causal, "tflops_bwd": tf}


def time_all(good: list[str], result: dict, out: Path | None) -> None:
    """The backward alone over the benchmark's sweep (16k tokens x 2048 features), into
    ``result["rows"]``; the file is rewritten after every shape."""
    for d in (128, 64):  # D=128 first: the shapes the target is about
        for causal in (False, True):
            for n in (1024, 4096, 16384):
                row = time_shape(d, n, causal, good)
                print(json.dumps(row), flush=True)
                result["rows"].append(row)
                write_json(out, result)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--compile-only", action="store_true", help="build for sm_90, no GPU")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one config's check, in a child
    parser.add_argument("--limit", type=float, default=150, help="seconds per configuration check")
    parser.add_argument("--jobs", type=int, default=4, help="checks at once (child processes)")
    args = parser.parse_args()
    if args.compile_only:
        rows = compile_only()
        if args.out:
            args.out.write_text(json.dumps({"compiled": rows}, indent=1) + "\n")
        return 0
    if args.child:
        print(json.dumps(check_one(args.child)))
        return 0
    # the check's Triton reference runs one tile per kernel: an autotune of the split
    # backward (a dozen compiles per shape) would eat the child's time limit
    env = dict(os.environ, MLINFRA_ATTENTION_AUTOTUNE="0")
    names = [c[0] for c in CONFIGS]
    checks, good = check_in_children(__file__, names, args.limit, env, jobs=args.jobs)
    result = dict(run_header(), checks=checks, rows=[])
    write_json(args.out, result)
    time_all(good, result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
