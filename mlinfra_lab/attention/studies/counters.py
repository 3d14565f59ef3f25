"""The chapter's two memory models checked against the GPU's own counters (Nsight Compute).

Contract: ``python -m mlinfra_lab.attention.studies.counters --out FILE`` (a GPU with ``ncu`` and
CuPy) measures, and writes as JSON beside the models' predictions:
- DRAM bytes read and written by one forward pass of unfused attention (`naive_attention`)
  and of our kernel at several sequence lengths, against `hbm_traffic`;
- shared-memory wavefronts per load instruction of one warp reading a tile row, a column, a
  padded column and a swizzled column, against `bank_conflict_degree`.
`parse_ncu_csv(text)` reads ``ncu --csv --page raw`` output (tested on the CPU).

``python -m mlinfra_lab.attention.studies.counters --kernels --out FILE`` profiles instead the
kernels of one forward and one backward of our default kernel and of cuDNN's (SDPA pinned to
CUDNN_ATTENTION) at the sweep's D=128, N=8k point (`PROFILE_SHAPE`, bf16, causal and not):
per kernel its time, DRAM bytes, tensor-pipe and issue utilisation, occupancy, registers and
its warp stall reasons (Nsight Compute's ``PROFILE_SECTIONS``), so the gap to cuDNN is
explained by counters. `kernel_summary(row)` condenses one kernel's raw metrics (CPU-tested).

Design decisions:
- Each measurement is its own ``ncu`` run of a small target (this module with ``_dram`` or
  ``_banks``), started with ``--profile-from-start off``: compiling, autotuning and warm-up
  happen before the target calls ``cudaProfilerStart``, so only the measured pass is counted.
  ``--clock-control none`` leaves the clocks as they are; ncu flushes the caches before each
  kernel (its default), so every kernel starts with a cold L2, as the model assumes.
- DRAM: ``dram__bytes_read.sum`` and ``dram__bytes_write.sum``, summed over every kernel of
  the pass (the unfused version is several kernels: matmul, scale, softmax, matmul).
- Banks: the warp's 32 word addresses come from `tile_addresses`, the same function the
  chapter feeds the model; a CuPy kernel reads them through a ``volatile`` pointer in a loop,
  so every iteration is one shared-memory load. The measured degree is
  ``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum`` over
  ``smsp__sass_inst_executed_op_shared_ld.sum``: how many passes one load took.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "BANK_CASES",
    "DRAM_METRICS",
    "PROFILE_SECTIONS",
    "PROFILE_SHAPE",
    "SMEM_METRICS",
    "committed_counters",
    "device_with_ncu",
    "kernel_summary",
    "parse_ncu_csv",
    "plot_counters",
    "profile_kernels",
    "run",
]

DRAM_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
SMEM_METRICS = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
)
# name -> tile_addresses(...) arguments: the accesses the chapter's bank section discusses
BANK_CASES: dict[str, dict[str, Any]] = {
    "row, fp32 32x32": dict(rows=32, cols=32, elem_bytes=4, read="row"),
    "column, fp32 32x32": dict(rows=32, cols=32, elem_bytes=4, read="column"),
    "column, fp32 32x32, pad 1": dict(rows=32, cols=32, elem_bytes=4, read="column", pad_elems=1),
    "column, fp32 32x32, swizzle": dict(
        rows=32, cols=32, elem_bytes=4, read="column", swizzle=True
    ),
    "column, fp32 32x16": dict(rows=32, cols=16, elem_bytes=4, read="column"),
    "column, fp32 32x34": dict(rows=32, cols=34, elem_bytes=4, read="column"),
    "column, fp16 32x64": dict(rows=32, cols=64, elem_bytes=2, read="column"),
    "column, fp16 32x64, pad 2": dict(rows=32, cols=64, elem_bytes=2, read="column", pad_elems=2),
}
# The kernel profile (`profile_kernels`): the benchmark sweep's D=128, N=8k point
# (16k tokens x 2048 features), the Nsight Compute sections that hold throughput, pipe
# utilisation, occupancy and stall reasons, and DRAM bytes and time named explicitly.
PROFILE_SHAPE = dict(batch=2, heads=16, seq=8192, head_dim=128)
PROFILE_PROVIDERS = ("ours", "sdpa_cudnn")
PROFILE_SECTIONS = (
    "SpeedOfLight",
    "ComputeWorkloadAnalysis",
    "MemoryWorkloadAnalysis",
    "WarpStateStats",
    "SchedulerStats",
    "Occupancy",
    "LaunchStats",
)
PROFILE_METRICS = ("gpu__time_duration.sum", *("dram__bytes_read.sum", "dram__bytes_write.sum"))
DRAM_SHAPE = dict(batch=4, heads=16, head_dim=64)  # bf16; the sequence length varies
DRAM_SEQS = (512, 1024, 2048, 4096, 8192)
ITERS = 1024  # loads per thread in the bank kernel


def parse_ncu_csv(text: str) -> list[dict[str, float | str]]:
    """Rows of ``ncu --csv --page raw``: one dict per kernel, metric values as floats."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV table in this output (was the kernel profiled at all?)")
    rows = []
    for row in csv.DictReader(lines[start:]):
        if not row.get("ID", "").strip().isdigit():  # the units row
            continue
        parsed: dict[str, float | str] = {"kernel": row.get("Kernel Name", "")}
        for key, value in row.items():
            if "__" in (key or ""):
                try:
                    parsed[key] = float(value.replace(",", ""))
                except ValueError:
                    parsed[key] = value
        rows.append(parsed)
    return rows


def _ncu(
    target: list[str],
    metrics: tuple[str, ...],
    sections: tuple[str, ...] = (),
    timeout: float = 600,
    module: str = "mlinfra_lab.attention.studies.counters",
) -> list[dict[str, float | str]]:
    """``ncu``'s raw page for one run of ``python -m module *target`` (which brackets the
    profiled pass with ``cudaProfilerStart``/``Stop``), one dict per kernel."""
    cmd = ["ncu", "--profile-from-start", "off", "--clock-control", "none"]
    cmd += ["--csv", "--page", "raw", "--metrics", ",".join(metrics)]
    for section in sections:
        cmd += ["--section", section]
    cmd += [sys.executable, "-m", module, *target]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"ncu failed ({done.returncode}): {done.stderr[-2000:]}")
    return parse_ncu_csv(done.stdout)


def device_with_ncu() -> dict[str, Any]:
    """`runtime.describe()` of this machine plus the Nsight Compute version (``ncu``)."""
    from mlinfra_lab import runtime

    info = runtime.describe().as_dict()
    version = subprocess.run(["ncu", "--version"], capture_output=True, text=True).stdout
    info["ncu"] = version.strip().splitlines()[-1] if version.strip() else None
    return info


def _dram_target(provider: str, seq: int) -> None:
    import torch

    from mlinfra_lab.attention.flash import flash_attention
    from mlinfra_lab.attention.reference import naive_attention

    fn = {"ours": flash_attention, "unfused": naive_attention}[provider]
    g = torch.Generator(device="cuda").manual_seed(seq)
    b, h, d = DRAM_SHAPE["batch"], DRAM_SHAPE["heads"], DRAM_SHAPE["head_dim"]
    q, k, v = (
        torch.randn(b, h, seq, d, device="cuda", dtype=torch.bfloat16, generator=g)
        for _ in range(3)
    )
    with torch.no_grad():
        fn(q, k, v)  # compile / autotune, outside the profiled range
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        fn(q, k, v)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


MARKER_KERNEL = "spin_kernel"  # torch.cuda._sleep's kernel: between the forward and backward


def _profile_target(provider: str, causal: bool) -> None:
    """ncu's target: one forward and one backward of `provider` at `PROFILE_SHAPE`, after
    two untimed rounds (compiles, autotuning); a `MARKER_KERNEL` launch separates them."""
    import torch

    from mlinfra_lab.attention.providers import _provider_fn

    b, h, n, d = (PROFILE_SHAPE[k] for k in ("batch", "heads", "seq", "head_dim"))
    g = torch.Generator(device="cuda").manual_seed(n + d)
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    fn = _provider_fn(provider, n, causal, "cuda")
    for _ in range(2):
        fn(q, k, v, causal).backward(do)
        q.grad = k.grad = v.grad = None
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    out = fn(q, k, v, causal)
    torch.cuda._sleep(1000)
    out.backward(do)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


_STALL = re.compile(r"^smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
_SUMMARY = {
    "time_us": ("gpu__time_duration.sum", 1e-3),
    "dram_read_bytes": ("dram__bytes_read.sum", 1),
    "dram_write_bytes": ("dram__bytes_write.sum", 1),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    "memory_throughput_pct": (
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        1,
    ),
    "dram_throughput_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", 1),
    "issue_active_pct": ("sm__inst_issued.avg.pct_of_peak_sustained_active", 1),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active", 1),
    "registers_per_thread": ("launch__registers_per_thread", 1),
    "block_size": ("launch__block_size", 1),
    "grid_size": ("launch__grid_size", 1),
    "warps_per_scheduler": ("smsp__warps_active.avg.per_cycle_active", 1),
    "eligible_warps_per_scheduler": ("smsp__warps_eligible.avg.per_cycle_active", 1),
    "issued_per_scheduler_cycle": ("smsp__issue_active.avg.per_cycle_active", 1),
}


def kernel_summary(row: dict[str, float | str]) -> dict[str, Any]:
    """One profiled kernel's raw metrics condensed: time, DRAM bytes, throughputs, the
    tensor pipes' utilisation (every ``*pipe_tensor*`` metric's SM average as a percentage of
    peak), occupancy, registers, and the stall reasons (cycles a warp waits per issued
    instruction, by reason, largest first). Metrics the profile lacks are left out."""
    out: dict[str, Any] = {"kernel": row.get("kernel", "")}
    for key, (metric, factor) in _SUMMARY.items():
        value = row.get(metric)
        if isinstance(value, float):
            out[key] = value * factor
    out["tensor_pipes_pct"] = {
        name: value
        for name, value in row.items()
        if "pipe_tensor" in name
        and name.endswith(".avg.pct_of_peak_sustained_active")
        and isinstance(value, float)
    }
    stalls = {}
    for name, value in row.items():
        match = _STALL.match(name)
        if match and isinstance(value, float) and value > 0:
            stalls[match.group(1)] = value
    out["stalls_per_issue"] = dict(sorted(stalls.items(), key=lambda kv: -kv[1]))
    return out


def profile_kernels(causal: tuple[bool, ...] = (False, True)) -> dict[str, Any]:
    """Nsight Compute profiles of our default kernel's and cuDNN's forward and backward at
    `PROFILE_SHAPE` (see the module doc): per kernel its mode (``fwd``/``bwd``), summary
    (`kernel_summary`) and every raw metric, per (provider, causal) the kernels' total time
    and DRAM bytes per mode. Needs a GPU and ``ncu`` on the PATH."""

    if shutil.which("ncu") is None:
        raise RuntimeError(
            "ncu (Nsight Compute) is not on the PATH; it ships with the CUDA toolkit"
        )
    runs = []
    for c in causal:
        for provider in PROFILE_PROVIDERS:
            entry: dict[str, Any] = {"provider": provider, "causal": c, **PROFILE_SHAPE}
            try:
                rows = _ncu(
                    ["_profile", provider, str(int(c))], PROFILE_METRICS, PROFILE_SECTIONS, 300
                )
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as err:
                entry["error"] = str(err)[-2000:]
                runs.append(entry)
                continue
            mode, kernels = "fwd", []
            for row in rows:
                if MARKER_KERNEL in str(row.get("kernel", "")):
                    mode = "bwd"
                    continue
                numeric = {k: v for k, v in row.items() if isinstance(v, float)}
                kernels.append({"mode": mode, **kernel_summary(row), "metrics": numeric})
            entry["kernels"] = kernels
            entry["totals"] = {
                m: {
                    "time_us": sum(k.get("time_us", 0.0) for k in kernels if k["mode"] == m),
                    "dram_bytes": sum(
                        k.get("dram_read_bytes", 0.0) + k.get("dram_write_bytes", 0.0)
                        for k in kernels
                        if k["mode"] == m
                    ),
                    "kernels": sum(1 for k in kernels if k["mode"] == m),
                }
                for m in ("fwd", "bwd")
            }
            runs.append(entry)
            print(json.dumps({k: entry[k] for k in ("provider", "causal", "totals")}), flush=True)
    info = device_with_ncu()
    return {
        "benchmark": "attention-kernel-counters",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": info,
        "dtype": "bfloat16",
        "sections": list(PROFILE_SECTIONS),
        "runs": runs,
    }


_BANK_SRC = r"""
extern "C" __global__ void smem_read(const int* word, float* out, int iters) {
    __shared__ float tile[2048];
    for (int i = threadIdx.x; i < 2048; i += blockDim.x) tile[i] = (float)i;
    __syncthreads();
    volatile float* t = tile;
    int w = word[threadIdx.x];
    float acc = 0.f;
    for (int it = 0; it < iters; ++it) acc += t[w];
    out[threadIdx.x] = acc;
}
"""


def _bank_words(case: dict[str, Any]) -> list[int]:
    from mlinfra_lab.attention.banks import tile_addresses

    return [a // 4 for a in tile_addresses(**case)]


def _banks_target() -> None:
    import cupy as cp

    kernel = cp.RawKernel(_BANK_SRC, "smem_read")
    out = cp.zeros(32, dtype=cp.float32)
    for case in BANK_CASES.values():  # warm-up: compile, first launch
        kernel((1,), (32,), (cp.asarray(_bank_words(case), dtype=cp.int32), out, cp.int32(1)))
    cp.cuda.runtime.deviceSynchronize()
    cp.cuda.runtime.profilerStart()
    for case in BANK_CASES.values():  # one launch per case, in BANK_CASES order
        kernel((1,), (32,), (cp.asarray(_bank_words(case), dtype=cp.int32), out, cp.int32(ITERS)))
    cp.cuda.runtime.deviceSynchronize()
    cp.cuda.runtime.profilerStop()


def run() -> dict[str, Any]:
    """Both measurements with their models (needs a GPU, ``ncu`` on the PATH and CuPy)."""
    from mlinfra_lab.attention.banks import bank_conflict_degree, tile_addresses
    from mlinfra_lab.attention.traffic import hbm_traffic

    if shutil.which("ncu") is None:
        raise RuntimeError(
            "ncu (Nsight Compute) is not on the PATH; it ships with the CUDA toolkit"
        )
    dram = []
    for provider in ("unfused", "ours"):
        for n in DRAM_SEQS:
            kernels = _ncu(["_dram", provider, str(n)], DRAM_METRICS)
            b, h, d = DRAM_SHAPE["batch"], DRAM_SHAPE["heads"], DRAM_SHAPE["head_dim"]
            dram.append(
                {
                    "provider": provider,
                    "seq": n,
                    **DRAM_SHAPE,
                    "dtype": "bfloat16",
                    "kernels": [k["kernel"] for k in kernels],
                    "read_bytes": sum(float(k[DRAM_METRICS[0]]) for k in kernels),
                    "write_bytes": sum(float(k[DRAM_METRICS[1]]) for k in kernels),
                    "model_bytes": hbm_traffic(b, h, n, d, 2, fused=provider == "ours"),
                    "model_bytes_kv_rereads": (
                        hbm_traffic(b, h, n, d, 2, True, block_m=128)
                        if provider == "ours"
                        else None
                    ),
                }
            )
    banks = []
    for (name, case), k in zip(BANK_CASES.items(), _ncu(["_banks"], SMEM_METRICS), strict=True):
        loads = float(k[SMEM_METRICS[1]])
        banks.append(
            {
                "case": name,
                **case,
                "model_degree": bank_conflict_degree(tile_addresses(**case)),
                "measured_degree": float(k[SMEM_METRICS[0]]) / loads if loads else None,
                "wavefronts": k[SMEM_METRICS[0]],
                "load_instructions": loads,
                "bank_conflicts": k[SMEM_METRICS[2]],
            }
        )
    info = device_with_ncu()
    return {
        "benchmark": "attention-counters",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": info,
        "dram": dram,
        "banks": banks,
        "bank_loop_iterations": ITERS,
    }


def committed_counters() -> dict[str, Any] | None:
    """The newest committed counters file (``benchmarks/results/DEVICE-counters-DATE.json``),
    or None when none is committed."""
    from mlinfra_lab import results

    files = results.committed("*-counters-*.json")
    return json.loads(files[-1].read_text()) if files else None


def plot_counters(result: dict[str, Any]) -> Any:
    """Two panels: DRAM bytes measured against `hbm_traffic` per sequence length (unfused and
    ours), and wavefronts per shared-memory load against `bank_conflict_degree` per case."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for provider, color in (("unfused", "tab:red"), ("ours", "tab:blue")):
        rows = sorted(
            (r for r in result["dram"] if r["provider"] == provider), key=lambda r: r["seq"]
        )
        seqs = [r["seq"] for r in rows]
        ax1.plot(
            seqs,
            [(r["read_bytes"] + r["write_bytes"]) / 1e9 for r in rows],
            "o-",
            color=color,
            label=f"{provider}: measured (ncu)",
        )
        ax1.plot(
            seqs,
            [r["model_bytes"] / 1e9 for r in rows],
            "--",
            color=color,
            label=f"{provider}: model",
        )
        if provider == "ours":
            ax1.plot(
                seqs,
                [r["model_bytes_kv_rereads"] / 1e9 for r in rows],
                ":",
                color=color,
                label="ours: model with K/V re-read per query block",
            )
    ax1.set(
        xscale="log",
        yscale="log",
        xlabel="sequence length",
        ylabel="DRAM GB per forward",
        title="HBM traffic: hbm_traffic against dram__bytes",
    )
    ax1.set_xscale("log", base=2)
    ax1.legend(fontsize=7)
    names = [b["case"] for b in result["banks"]]
    x = range(len(names))
    ax2.bar(
        [i - 0.2 for i in x],
        [b["model_degree"] for b in result["banks"]],
        0.4,
        label="model: bank_conflict_degree",
    )
    ax2.bar(
        [i + 0.2 for i in x],
        [b["measured_degree"] for b in result["banks"]],
        0.4,
        label="measured: wavefronts per load",
    )
    ax2.set_xticks(list(x), names, rotation=35, ha="right", fontsize=7)
    ax2.set(ylabel="passes per warp load", title="shared-memory bank conflicts")
    ax2.legend(fontsize=7)
    fig.suptitle(
        f"{result['device']['device_name']}, {result['device'].get('ncu') or 'ncu'}, "
        f"{result['date'][:10]}",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--out FILE`` runs everything; ``_dram``/``_banks`` are ncu's targets."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_dram"]:
        _dram_target(argv[1], int(argv[2]))
        return 0
    if argv[:1] == ["_banks"]:
        _banks_target()
        return 0
    if argv[:1] == ["_profile"]:
        _profile_target(argv[1], bool(int(argv[2])))
        return 0
    p = argparse.ArgumentParser(
        prog="python -m mlinfra_lab.attention.studies.counters",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument(
        "--out",
        required=True,
        help="result JSON, e.g. "
        "benchmarks/results/h200-counters-YYYY-MM-DD.json (not h200-attention-*: "
        "that pattern is the benchmark's)",
    )
    p.add_argument(
        "--kernels",
        action="store_true",
        help="profile our default kernel's and cuDNN's forward and backward kernels at D=128, "
        "N=8k instead (time, DRAM bytes, tensor-pipe use, occupancy, stall reasons); write "
        "benchmarks/results/DEVICE-ncu-kernels-DATE.json",
    )
    p.add_argument(
        "--causal",
        choices=("yes", "no", "both"),
        default="both",
        help="with --kernels: causal, non-causal or both (default: both)",
    )
    args = p.parse_args(argv)
    if args.kernels:
        which = {"yes": (True,), "no": (False,), "both": (False, True)}[args.causal]
        result = profile_kernels(which)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
        return 0
    result = run()
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
