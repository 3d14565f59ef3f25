"""Is a short attention forward bound by the GPU or by the Python that launches it?

Usage (on a GPU machine, from the repository root)::

    python benchmarks/experiments/host_overhead.py --out host-overhead.json

For each provider and shape it launches the forward ``CALLS`` times back to back and reports
three numbers per call: the host's wall time to issue the launches (``host_us``: Python, the
autograd function, the launcher; no synchronisation inside the loop), the GPU's time for the
same calls (``gpu_us``: CUDA events around the loop), and the benchmark's own timing of one
call (``bench_us``: `triton.testing.do_bench`, the L2 cache cleared before each call). When
``host_us`` is at or above ``gpu_us`` the GPU waits for Python between kernels. Each shape
first runs its providers for half a second, so the GPU is at its working clock. Inputs require grad, as in
`mlinfra-lab bench attention`; ``--no-grad`` times the bare forward instead.

``--breakdown`` (not yet run on a GPU) peels the default forward's launch path one layer at a
time at the shape where it was host-bound (D=128, causal, 1k tokens): the public call, the same
without autograd, version 5's launcher with its checks, without them, Triton's launcher alone
(descriptors and outputs built once), the four descriptors alone, the two allocations alone;
and version 1's public call, its autotuner, the raw kernel at the tile the autotuner chose. The
differences between rungs say where the ~200 us per call go, so a leaner path cuts the right one.
(Run on an H100 on 2026-12-05: benchmarks/results/h100-host-breakdown-2026-12-05.json.)

``--breakdown-backward`` does the same for the default backward (`breakdown_backward`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from mlinfra_lab.attention.providers import _provider_fn

CALLS = 200
SHAPES = [(16, 16, 1024, 128, True), (16, 32, 1024, 64, True), (16, 16, 1024, 128, False)]
PROVIDERS = ("ours", "ours_v1", "sdpa_flash", "sdpa_cudnn")


def warm(fn: Callable[[], object], seconds: float = 0.5) -> None:
    """Run `fn` for `seconds` (the GPU leaves its idle clock), then synchronise."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
    torch.cuda.synchronize()


def per_call_us(fn: Callable[[], object]) -> tuple[float, float]:
    """(host µs, GPU µs) per call over CALLS back-to-back calls, after a warm-up."""
    warm(fn)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    host = (time.perf_counter() - t0) / CALLS * 1e6
    end.record()
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) * 1e3 / CALLS


def breakdown() -> list[dict]:
    """Host and GPU us per call of each rung of the launch path (see the module doc)."""
    from mlinfra_lab.attention import _gluon_fwd as g
    from mlinfra_lab.attention import flash
    from mlinfra_lab.attention._flash_kernels import _fwd_kernel

    b, h, n, d, causal = SHAPES[0]
    scale = d**-0.5
    gen = torch.Generator(device="cuda").manual_seed(n + d)
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(3)
    )
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    cfg = g.pick_config(d, causal, n)
    assert cfg is not None and g.unusable(q, k, v, causal, scale, cfg) is None, "no v5 here"
    o = torch.empty_like(q)
    lse = torch.empty((b * h, n), device="cuda", dtype=torch.float32)

    def descriptors() -> list:
        return g.descriptors(q, k, v, o, cfg)

    descs = descriptors()
    grid = (n // cfg.block_m, b * h)
    consts = g.launch_options(cfg, d, causal)
    kernel = g._kernel()
    flash.flash_attention(q, k, v, causal=causal, version=1)  # v1: autotune once
    best = flash._kernels()["fwd"].best_config
    common = dict(CAUSAL=causal, HEAD_DIM=d, BLOCK_D=d, PRECISION="tf32")
    tile = dict(best.kwargs, num_warps=best.num_warps, num_stages=best.num_stages)
    v1_grid = (n // best.kwargs["BLOCK_M"], b * h)
    v1_args = (q, k, v, o, lse, n, n, scale * flash.LOG2E, n * d, n * d, d)
    ladder = {
        "v5 flash_attention (inputs require grad)": lambda: flash.flash_attention(
            *leaves, causal=causal
        ),
        "v5 flash_attention (no grad)": lambda: flash.flash_attention(q, k, v, causal=causal),
        "v5 _gluon_fwd.gluon_forward (checks + launch)": lambda: g.gluon_forward(
            q, k, v, causal, scale, cfg
        ),
        "v5 _gluon_fwd.launch (no checks)": lambda: g.launch(q, k, v, causal, scale, cfg),
        "v5 kernel[grid] (descriptors, outputs built once)": lambda: kernel[grid](
            *descs, lse, n, scale * flash.LOG2E, **consts
        ),
        "v5 four TensorDescriptors alone": descriptors,
        "two output allocations alone": lambda: (torch.empty_like(q), torch.empty_like(lse)),
        "v1 flash_attention(version=1) (no grad)": lambda: flash.flash_attention(
            q, k, v, causal=causal, version=1
        ),
        "v1 autotuner[grid] (tile cached)": lambda: flash._kernels()["fwd"][
            lambda m: (n // m["BLOCK_M"], b * h)
        ](*v1_args, **common),
        f"v1 raw kernel[grid] at {tile}": lambda: _fwd_kernel[v1_grid](*v1_args, **common, **tile),
    }
    out = []
    for step, fn in ladder.items():
        host, gpu = per_call_us(fn)
        row = {"step": step, "host_us": round(host, 1), "gpu_us": round(gpu, 1)}
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


BACKWARD_SHAPES = [(16, 16, 1024, 128, True), (8, 16, 2048, 128, True)]


def breakdown_backward() -> list[dict]:
    """Host and GPU us per call of each rung of the default backward's path, at causal D=128
    with 1k tokens (where its timing spread over 20% between repeats and ran as long as at 2k)
    and at 2k: the public ``backward()``, `flash._backward`, the Gluon launcher given delta,
    the delta kernel alone, each Gluon kernel with its descriptors built once, and the eleven
    descriptors alone. Where a rung's host time is at or above its GPU time, the GPU waits."""
    out = []
    for shape in BACKWARD_SHAPES:
        for step, fn, leaves in _backward_rungs(*shape):
            for leaf in leaves:
                leaf.grad = None
            host, gpu = per_call_us(fn)
            row = {"shape": list(shape), "step": step, "host_us": round(host, 1)}
            row["gpu_us"] = round(gpu, 1)
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def _backward_fresh(out: torch.Tensor, do: torch.Tensor, leaves: list[torch.Tensor]) -> None:
    """One backward into fresh gradients, as the benchmark's ``grad_to_none`` does."""
    for leaf in leaves:
        leaf.grad = None
    out.backward(do, retain_graph=True)


def _backward_rungs(b: int, h: int, n: int, d: int, causal: bool) -> list[tuple]:
    """(name, call, leaves whose grads to clear) for each rung of `breakdown_backward`."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from mlinfra_lab.attention import _gluon_bwd as gb
    from mlinfra_lab.attention import _gluon_fwd as g
    from mlinfra_lab.attention import flash

    scale = d**-0.5
    gen = torch.Generator(device="cuda").manual_seed(n + d)
    q, k, v, do = (
        torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(4)
    )
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o_graph = flash.flash_attention(*leaves, causal=causal)
    o, lse = g.gluon_forward(q, k, v, causal, scale)
    cfg = gb.pick_config(d, causal, n)
    assert cfg is not None and gb.unusable(q, k, do, causal, cfg) is None, "no Gluon backward"
    delta = torch.empty_like(lse)
    flash._launch_delta(o, do, delta, b * h)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    rows = b * h * n
    (kv_m, kv_n, kv_w, kv_s), (q_m, q_n, q_w, q_s) = cfg.dkdv, cfg.dq

    def desc(t: torch.Tensor, r: int) -> TensorDescriptor:
        layout = g._layout((r, d), t.dtype)
        return TensorDescriptor(t.view(rows, d), [rows, d], [d, 1], [r, d], layout)

    def all_descs() -> list:
        kv = [desc(q, kv_m), desc(k, kv_n), desc(v, kv_n), desc(do, kv_m)]
        kv += [desc(dk, kv_n), desc(dv, kv_n)]
        return kv + [desc(q, q_m), desc(k, q_n), desc(v, q_n), desc(do, q_m), desc(dq, q_m)]

    descs = all_descs()
    dkdv, dq_kernel = gb._kernels()
    tail = (lse, delta, n, scale * flash.LOG2E, scale)
    common = dict(HEAD_DIM=d, CAUSAL=causal)
    kv_opts = dict(BLOCK_M=kv_m, BLOCK_N=kv_n, STAGES=kv_s, num_warps=kv_w, **common)
    q_opts = dict(BLOCK_M=q_m, BLOCK_N=q_n, STAGES=q_s, num_warps=q_w, **common)
    return [
        (
            "public backward(): o.backward(do, retain_graph=True), grads cleared first",
            lambda: _backward_fresh(o_graph, do, leaves),
            leaves,
        ),
        (
            "flash._backward (gluon, delta included)",
            lambda: flash._backward(do, q, k, v, o, lse, causal, scale, "gluon", False),
            [],
        ),
        (
            "_gluon_bwd.launch (delta given)",
            lambda: gb.launch(do, q, k, v, lse, delta, causal, scale, cfg),
            [],
        ),
        ("delta kernel alone", lambda: flash._launch_delta(o, do, delta, b * h), []),
        (
            "dK/dV kernel[grid] (descriptors built once)",
            lambda: dkdv[(n // kv_n, b * h)](*descs[:6], *tail, **kv_opts),
            [],
        ),
        (
            "dQ kernel[grid] (descriptors built once)",
            lambda: dq_kernel[(n // q_m, b * h)](*descs[6:], *tail, **q_opts),
            [],
        ),
        ("eleven TensorDescriptors alone", all_descs, []),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--no-grad", action="store_true", help="inputs without requires_grad")
    parser.add_argument("--breakdown", action="store_true", help="peel the launch path apart")
    parser.add_argument(
        "--breakdown-backward", action="store_true", help="peel the default backward apart"
    )
    args = parser.parse_args()
    from triton.testing import do_bench

    if args.breakdown_backward:
        _write(args.out, {**_header(), "calls": CALLS, "breakdown_backward": breakdown_backward()})
        return 0
    if args.breakdown:
        result = {**_header(), "shape": SHAPES[0], "calls": CALLS, "breakdown": breakdown()}
        _write(args.out, result)
        return 0
    rows = []
    for b, h, n, d, causal in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(n + d)
        q, k, v = (
            torch.randn(
                b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g
            ).requires_grad_(not args.no_grad)
            for _ in range(3)
        )
        for name in PROVIDERS:
            fn = _provider_fn(name, n, causal, "cuda")
            call = lambda fn=fn, c=causal, t=(q, k, v): fn(*t, c)  # noqa: E731
            host, gpu = per_call_us(call)
            bench = do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
            row = dict(provider=name, batch=b, heads=h, seq=n, head_dim=d, causal=causal)
            row.update(host_us=round(host, 1), gpu_us=round(gpu, 1), bench_us=round(bench, 1))
            rows.append(row)
            print(json.dumps(row))
    _write(args.out, {**_header(), "requires_grad": not args.no_grad, "calls": CALLS, "rows": rows})
    return 0


def _header() -> dict:
    """Device, versions and date: what every result file of this script starts with."""
    import triton

    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _write(out: Path | None, result: dict) -> None:
    if out:
        out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
