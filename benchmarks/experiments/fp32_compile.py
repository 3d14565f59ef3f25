"""Compile time of the float32 attention kernels against their fixed tile, on a fresh cache.

Contract: ``python benchmarks/experiments/fp32_compile.py`` on a CUDA GPU (repository root on
PYTHONPATH) runs chapter 1's head-dim padding cell (forward at N=100/D=80 and N=37/D=96,
float32) and a forward+backward at N=100/D=80, once per candidate fp32 tile and dot precision,
each in its own process with an empty ``TRITON_CACHE_DIR``; it prints one JSON row per trial
and writes them, with the device and versions, to ``$OUT/fp32_compile.json`` (or ``./``).

Design decisions:
- Float32 runs IEEE dots, which Triton unrolls into FMAs: compile time, not run time, is
  what a reader waits for, and it grows with the tile. The kernel's pruner is patched per
  trial so only the tile (and precision) changes.
- The trials run concurrently (one per core on the 16-core device host), so absolute
  seconds include that contention; compare trials within one file. Errors are max |diff|
  against float64 `naive_attention`.
Result: ``benchmarks/results/h200-fp32-compile-2026-12-04.json``; it set the fp32 tiles of
``mlinfra_lab/attention/_flash_kernels.py``.
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import triton

TRIAL = r'''
import json, os, sys, time
import torch, triton
from mlinfra_lab.attention import _flash_kernels as fk, flash
from mlinfra_lab.attention import flash_attention, naive_attention
bm, bn, w, s, prec = json.loads(sys.argv[1])
def pruner(orig):
    dkdv = orig.kwargs["BLOCK_M"] < orig.kwargs["BLOCK_N"]
    c = triton.Config({"BLOCK_M": bn if dkdv else bm, "BLOCK_N": bm if dkdv else bn}, num_warps=w, num_stages=s)
    return lambda configs, named_args, **kw: [c]
fk._pruner = pruner
flash._precision = lambda dt: prec if dt == torch.float32 else "tf32"
torch.manual_seed(0)
out = {}
for n, d in [(100, 80), (37, 96)]:
    q, k, v = (torch.randn(1, 2, n, d, dtype=torch.float32, device="cuda") for _ in range(3))
    t0 = time.time(); o = flash_attention(q, k, v, causal=True); torch.cuda.synchronize()
    ref = naive_attention(*(t.double() for t in (q, k, v)), causal=True)
    out[f"fwd_n{n}_d{d}_s"] = round(time.time() - t0, 1)
    out[f"fwd_n{n}_d{d}_err"] = float((o.double() - ref).abs().max())
q, k, v = (torch.randn(1, 2, 100, 80, dtype=torch.float32, device="cuda", requires_grad=True) for _ in range(3))
t0 = time.time(); flash_attention(q, k, v, causal=True).sum().backward(); torch.cuda.synchronize()
out["fwd_bwd_n100_d80_s"] = round(time.time() - t0, 1)
qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
naive_attention(qd, kd, vd, causal=True).sum().backward()
out["bwd_err"] = max(float((a.grad.double() - b.grad).abs().max()) for a, b in ((q, qd), (k, kd), (v, vd)))
print(json.dumps(out))
'''
trials = [(64, 32, 4, 2, "ieee"), (64, 32, 4, 1, "ieee"), (32, 32, 4, 1, "ieee"), (32, 16, 4, 1, "ieee"),
          (32, 16, 2, 1, "ieee"), (64, 32, 4, 2, "tf32x3"), (32, 32, 4, 1, "tf32x3")]
procs = []
for t in trials:
    env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp())
    t0 = time.time()
    procs.append((t, t0, subprocess.Popen([sys.executable, "-c", TRIAL, json.dumps(t)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
rows = []
for t, t0, p in procs:
    so, se = p.communicate(timeout=500)
    row = {"trial": t, "wall_s": round(time.time() - t0, 1)}
    try:
        row.update(json.loads(so.strip().splitlines()[-1]))
    except Exception:
        row["error"] = se[-1500:]
    rows.append(row)
    print(json.dumps(row), flush=True)

meta = {"kind": "fp32-compile", "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "trial": "[block_m, block_n, warps, stages, precision]",
        "concurrent_trials": len(trials), "rows": rows}
json.dump(meta, open(os.path.join(os.environ.get("OUT", "."), "fp32_compile.json"), "w"), indent=1)
