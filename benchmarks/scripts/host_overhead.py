"""Is a short attention forward bound by the GPU or by the Python that launches it?

Usage (on a GPU machine, from the repository root)::

    python benchmarks/scripts/host_overhead.py --out host-overhead.json

For each provider and shape it launches the forward ``CALLS`` times back to back and reports
three numbers per call: the host's wall time to issue the launches (``host_us``: Python, the
autograd function, the launcher; no synchronisation inside the loop), the GPU's time for the
same calls (``gpu_us``: CUDA events around the loop), and the benchmark's own timing of one
call (``bench_us``: `triton.testing.do_bench`, the L2 cache cleared before each call). When
``host_us`` is at or above ``gpu_us`` the GPU waits for Python between kernels. Each shape
first runs its providers for half a second, so the GPU is at its working clock. Inputs require grad, as in
`mlinfra-lab bench attention`; ``--no-grad`` times the bare forward instead.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--no-grad", action="store_true", help="inputs without requires_grad")
    args = parser.parse_args()
    import triton
    from triton.testing import do_bench

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
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "requires_grad": not args.no_grad,
        "calls": CALLS,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
