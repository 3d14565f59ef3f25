"""Version 5 (the Gluon forward, `mlinfra_lab.attention._gluon_fwd`) checked and timed on a Hopper GPU.

Usage (on the GPU machine, from the repository root)::

    python benchmarks/experiments/gluon_fwd_experiment.py --out results.json
    python benchmarks/experiments/gluon_fwd_experiment.py --compile-only   # any machine: sm_90 builds

For each configuration in `CONFIGS` and each head dim / causal flag it checks O and the LSE
against float32 attention (odd batch x heads, several lengths), each check in a child process
with a time limit (`child_checks`: a wrong barrier phase hangs a kernel; ``--jobs`` children
at once), then times the forward on the benchmark's sweep (16k tokens x 2048 features, bf16)
side by side with version 1, SDPA's FlashAttention-2 and cuDNN backends, in the same
process, ``--passes`` times per shape (every other pass in reverse provider order; ``tflops``
is the best pass, ``tflops_passes`` keeps each). A configuration that fails to compile, to
match or to answer in time is reported and skipped, never timed. Times are
`triton.testing.do_bench` medians; the JSON records device, versions and date, and is
rewritten after every shape, so a run cut off by its time limit keeps what it finished.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from child_checks import check_in_children, run_header, write_json  # this folder's helpers

from mlinfra_lab.attention._gluon_fwd import GluonConfig, compile_for_hopper, gluon_forward
from mlinfra_lab.attention.studies.machine_code import disassemble, multiplies_under_qk, softmax_in_flight

G = GluonConfig
# Round 4: the early rescale (`GluonConfig.early_rescale`, the ``-er`` forms): O is rescaled
# by the last tile's alpha right after S_j = Q K_j^T is issued, as FlashAttention-3's loop
# does, instead of after P V is waited for. In the table configuration's SASS (Triton 3.6)
# the 128 multiplies of that rescale sat after the softmax with no matmul in flight; in the
# ``-er`` build they sit among the Q K^T matmul instructions (`machine_code.multiplies_under_qk`
# counts them: 0 and 120). Rounds 1-3 are in benchmarks/results/h200-gluon-configs-2026-12-04-run*.json
# and h100-gluon-fwd-r3-2026-12-05.json (round 3: the ``-ps`` forms lost at D=128).
# Prediction for round 4 (written before it ran): at D=128 and N >= 4k, overlap-er-m128n64w4s2
# runs 1.03-1.06x the table's overlap-m128n64w4s2 (128 of about 420 issue slots per tile move
# under Q K^T; the second program on each SM already hides part of them), which would lift it
# from 0.90-0.94x cuDNN to about 0.95-0.98x. The 8-warp and 64-row forms keep S and O at half
# the registers; their softmax already runs under P V (SASS), and the rescale moves too.
CONFIGS = {
    64: [
        G(128, 128, 8, 2, False),
        G(128, 64, 4, 2, True),
        G(128, 64, 4, 2, True, early_rescale=True),
        G(128, 128, 8, 2, True, early_rescale=True),
    ],
    128: [
        G(128, 64, 4, 2, True),
        G(128, 64, 4, 2, True, early_rescale=True),
        G(128, 64, 4, 2, True, p_smem=True, early_rescale=True),
        G(128, 128, 8, 2, True),
        G(128, 128, 8, 2, True, early_rescale=True),
        G(64, 128, 4, 2, True, early_rescale=True),  # non-causal only (causal: BLOCK_M % BLOCK_N)
    ],
}
LENGTHS = (1024, 2048, 4096, 8192, 16384)
TOKENS, FEATURES = 16384, 2048


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 attention and its base-2 log-sum-exp (the kernels' LSE convention)."""
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(
            torch.ones(n, n, device=q.device, dtype=torch.bool).triu(1), float("-inf")
        )
    lse2 = torch.logsumexp(s, -1) / math.log(2)
    return torch.softmax(s, -1) @ v.float(), lse2


def check(cfg: GluonConfig, d: int, causal: bool) -> dict:
    """Max errors of O and LSE against float32, over a few shapes (odd batch x heads)."""
    worst_o = worst_lse = 0.0
    for b, h, n in ((1, 3, 128), (2, 3, 384), (1, 5, 1024), (2, 2, 2048)):
        if n % cfg.block_m or n % cfg.block_n:
            continue
        g = torch.Generator(device="cuda").manual_seed(n + d)
        q, k, v = (
            torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(3)
        )
        scale = d**-0.5
        o, lse = gluon_forward(q, k, v, causal, scale, cfg)
        ref_o, ref_lse = reference(q, k, v, causal, scale)
        worst_o = max(worst_o, (o.float() - ref_o).abs().max().item())
        worst_lse = max(worst_lse, (lse.view(b, h, n) - ref_lse).abs().max().item())
    return {
        "max_err_o": worst_o,
        "max_err_lse": worst_lse,
        "ok": worst_o < 2e-2 and worst_lse < 1e-2,
    }


def flops(b: int, h: int, n: int, d: int, causal: bool) -> float:
    return 4 * b * h * n * n * d / (2 if causal else 1)


def time_shape(d: int, n: int, causal: bool, fns: dict) -> dict:
    from triton.testing import do_bench

    b, h = TOKENS // n, FEATURES // d
    g = torch.Generator(device="cuda").manual_seed(n + d)
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)
    )
    out = {}
    for name, fn in fns.items():
        try:
            ms = do_bench(
                lambda fn=fn: fn(q, k, v, causal), warmup=25, rep=100, return_mode="median"
            )
            out[name] = flops(b, h, n, d, causal) / ms * 1e-9
        except Exception as err:  # noqa: BLE001 - a provider refusing a shape is a result
            out[name] = f"error: {str(err).splitlines()[0][:200]}"
    return out


def child_name(d: int, causal: bool, cfg: GluonConfig) -> str:
    return f"d{d}-{'causal' if causal else 'full'}-{cfg.name}"


def from_child_name(name: str) -> tuple[int, bool, GluonConfig]:
    for d, cfgs in CONFIGS.items():
        for cfg in cfgs:
            for causal in (False, True):
                if child_name(d, causal, cfg) == name:
                    return d, causal, cfg
    raise KeyError(name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--compile-only", action="store_true", help="build for sm_90, no GPU")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one config's check, in a child
    parser.add_argument("--limit", type=float, default=120, help="seconds per configuration check")
    parser.add_argument("--jobs", type=int, default=8, help="checks at once (child processes)")
    parser.add_argument("--passes", type=int, default=2, help="timings per provider and shape")
    args = parser.parse_args()

    if args.compile_only:
        for d, cfgs in CONFIGS.items():
            for cfg in cfgs:
                for causal in (False, True):
                    k = compile_for_hopper(d, causal, cfg)
                    lines = disassemble(k)
                    share = softmax_in_flight(lines)
                    during = "-" if share is None else f"{share:.0%}"
                    print(
                        f"D={d} causal={causal} {cfg.name}: smem {k.metadata.shared} B, "
                        f"exp2s while P V is in flight (SASS): {during}, "
                        f"multiplies while Q K^T is: {multiplies_under_qk(lines)}"
                    )
        return 0
    if args.child:
        d, causal, cfg = from_child_name(args.child)
        with torch.no_grad():
            entry = {"head_dim": d, "causal": causal, "config": cfg.name}
            entry.update(check(cfg, d, causal))
        print(json.dumps(entry))
        return 0

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from mlinfra_lab.attention.flash import flash_attention

    def sdpa_with(backend: SDPBackend) -> Callable[..., torch.Tensor]:
        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
            with sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=causal)

        return call

    result = {
        **run_header(),
        "python": platform.python_version(),
        "tokens": TOKENS,
        "features": FEATURES,
        "dtype": "bfloat16",
        "passes": args.passes,
        "checks": [],
        "rows": [],
    }
    # each check in a child with a time limit: a wrong barrier phase in a new form hangs its
    # kernel, and only killing the process frees the GPU (child_checks)
    names = [
        child_name(d, causal, cfg)
        for d, cfgs in CONFIGS.items()
        for cfg in cfgs
        for causal in (False, True)
        if not (causal and cfg.block_m % cfg.block_n)  # never launched: it would wait forever
    ]
    checks, passed = check_in_children(__file__, names, args.limit, jobs=args.jobs)
    result["checks"] = checks
    write_json(args.out, result)
    good: dict[tuple[int, bool], dict[str, GluonConfig]] = {}
    for name in passed:
        d, causal, cfg = from_child_name(name)
        good.setdefault((d, causal), {})[cfg.name] = cfg
    with torch.no_grad():
        for d in CONFIGS:
            for causal in (False, True):
                for n in LENGTHS:
                    fns = {"v1": lambda q, k, v, c: flash_attention(q, k, v, causal=c, version=1)}
                    for name, cfg in good.get((d, causal), {}).items():
                        if n % cfg.block_m == 0:
                            fns[name] = lambda q, k, v, c, cfg=cfg: gluon_forward(
                                q, k, v, c, q.shape[-1] ** -0.5, cfg
                            )[0]
                    fns["sdpa_flash"] = sdpa_with(SDPBackend.FLASH_ATTENTION)
                    fns["sdpa_cudnn"] = sdpa_with(SDPBackend.CUDNN_ATTENTION)
                    row = {"head_dim": d, "seq": n, "causal": causal}
                    # each pass times every provider once, the second in reverse order, so a
                    # drift of the clock over the shape shows as spread, not as a ranking
                    passes = []
                    for i in range(args.passes):
                        order = dict(reversed(fns.items())) if i % 2 else fns
                        passes.append(time_shape(d, n, causal, order))
                    row["tflops_passes"] = passes
                    row["tflops"] = {
                        k: (
                            max(p[k] for p in passes)
                            if all(isinstance(p[k], float) for p in passes)
                            else passes[0][k]
                        )
                        for k in fns
                    }
                    print(json.dumps(row), flush=True)
                    result["rows"].append(row)
                    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
