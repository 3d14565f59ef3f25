"""Shared memory on Hopper, read from the compiler and the counters: which swizzle the taught
kernel's operand tiles use, and how many shared-memory wavefronts and bank conflicts it costs.

Contract: `shared_layouts(ir)` parses the shared-memory layout attributes of a Triton GPU IR
text (``.ttgir``) into dicts, e.g. ``{"name": "#shared", "kind": "nvmma_shared",
"swizzlingByteWidth": 128, ...}``; `alloc_layouts(ir)` lists which layout each
``local_alloc`` of the kernel uses, with its tensor shape (both tested on the CPU with IR
text). ``python -m mlinfra_lab.attention.studies.swizzle --out FILE`` (a CUDA GPU with
``ncu``) compiles the taught forward kernel (version 1) at D = 64 and 128 in bf16, keeps the
shared-memory lines of its IR, and measures with Nsight Compute the forward's shared-memory
wavefronts, instructions and bank conflicts (`SMEM_METRICS`). `committed_swizzle()` reads
the newest committed file.

Design decisions:
- The IR is read from Triton's own cache: the run points ``TRITON_CACHE_DIR`` at an empty
  folder, so the only ``_fwd_kernel*.ttgir`` files there are the ones this run compiled.
- On Hopper the K and V tiles reach ``wgmma`` from shared memory in an ``nvmma_shared``
  layout: rows of 128 bytes whose 16-byte chunks are XOR-permuted by the row index (the
  32/64/128-byte swizzle modes of TMA and wgmma). Padding a row, the pre-Hopper fix of the
  scalar bank model, would break the layout the instruction expects, so the swizzle is the
  only remedy; the counters then show whether any conflict is left.
- The counters are the load/store unit's: ``wgmma`` reads its shared-memory operands without
  load instructions, so those wavefronts count the other traffic (copies into shared memory,
  the softmax's and the epilogue's shuffles).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "HEAD_DIMS",
    "SMEM_METRICS",
    "alloc_layouts",
    "committed_swizzle",
    "counter_row",
    "run",
    "shared_layouts",
]

HEAD_DIMS = (64, 128)
_MODULE = "mlinfra_lab.attention.studies.swizzle"  # also when run as __main__
SHAPE = dict(batch=4, heads=16, seq=4096)
SMEM_METRICS = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
    "gpu__time_duration.sum",
)
_ATTR = re.compile(r"^(#\w+)\s*=\s*#(?:ttg|triton_gpu)\.(\w*shared\w*)<\{(.*)\}>\s*$")
_ALLOC = re.compile(r"local_alloc\b.*?->\s*!ttg\.memdesc<([^,>]+(?:x[^,>]+)*),\s*(#\w+)")


def _value(text: str) -> Any:
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text.startswith("["):
        return [int(x) for x in re.findall(r"-?\d+", text)]
    return text


def shared_layouts(ir: str) -> list[dict[str, Any]]:
    """Every shared-memory layout attribute defined at the top of a ``.ttgir`` text."""
    layouts = []
    for line in ir.splitlines():
        match = _ATTR.match(line.strip())
        if not match:
            continue
        name, kind, body = match.groups()
        fields = {}
        for part in re.split(r",\s*(?![^\[]*\])", body):
            if "=" in part:
                key, value = part.split("=", 1)
                fields[key.strip()] = _value(value)
        layouts.append({"name": name, "kind": kind, **fields})
    return layouts


def alloc_layouts(ir: str) -> list[dict[str, Any]]:
    """The shape, element type and layout name of each shared-memory buffer allocated."""
    allocs = []
    for match in _ALLOC.finditer(ir):
        dims = match.group(1).split("x")
        allocs.append(
            {"shape": [int(x) for x in dims[:-1]], "dtype": dims[-1], "layout": match.group(2)}
        )
    return allocs


def _inputs(d: int) -> tuple[Any, Any, Any]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(d)
    b, h, n = SHAPE["batch"], SHAPE["heads"], SHAPE["seq"]
    return tuple(  # type: ignore[return-value]
        torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)
    )


def _target(d: int) -> None:
    """ncu's target: one profiled forward of version 1 at head dim `d`, after a warm-up."""
    import torch

    from mlinfra_lab.attention.flash import flash_attention

    q, k, v = _inputs(d)
    with torch.no_grad():
        flash_attention(q, k, v, version=1)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        flash_attention(q, k, v, version=1)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def counter_row(row: dict[str, Any]) -> dict[str, Any]:
    """One ncu row reduced to the kernel's name and `SMEM_METRICS` (ncu's raw page also
    lists every device attribute, which says nothing about the kernel)."""
    return {k: v for k, v in row.items() if k == "kernel" or k in SMEM_METRICS}


def _counters(d: int) -> list[dict[str, Any]]:
    from mlinfra_lab.attention.studies.counters import _ncu

    return _ncu(["_target", str(d)], SMEM_METRICS, timeout=300, module=_MODULE)


def run() -> dict[str, Any]:
    """Compile and profile the taught forward kernel (needs a CUDA GPU and ``ncu``)."""

    cache = tempfile.mkdtemp(prefix="triton-cache-")
    os.environ["TRITON_CACHE_DIR"] = cache  # before the kernel compiles: only our kernels
    os.environ["MLINFRA_ATTENTION_AUTOTUNE"] = "0"  # the committed tile table, one compile
    kernels = []
    for d in HEAD_DIMS:
        before = set(Path(cache).rglob("_fwd_kernel*.ttgir"))
        subprocess.run(
            [sys.executable, "-m", _MODULE, "_target", str(d)],
            check=True,
            timeout=300,
        )
        for path in sorted(set(Path(cache).rglob("_fwd_kernel*.ttgir")) - before):
            ir = path.read_text()
            kernels.append(
                {
                    "head_dim": d,
                    "ir_file": path.name,
                    "layouts": shared_layouts(ir),
                    "allocs": alloc_layouts(ir),
                    "shared_lines": [ln for ln in ir.splitlines() if "shared" in ln][:40],
                }
            )
    counters = []
    for d in HEAD_DIMS:
        try:
            for row in _counters(d):
                counters.append({"head_dim": d, **counter_row(row)})
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            counters.append({"head_dim": d, "error": str(err)[-500:]})
    from mlinfra_lab.attention.studies.counters import device_with_ncu

    info = device_with_ncu()
    return {
        "benchmark": "attention-swizzle",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": info,
        "shape": dict(SHAPE, dtype="bfloat16", causal=False, kernel="forward version 1"),
        "kernels": kernels,
        "counters": counters,
    }


def committed_swizzle() -> dict[str, Any] | None:
    """The newest committed ``benchmarks/results/DEVICE-swizzle-DATE.json``, or None."""
    from mlinfra_lab import results

    files = results.committed("*-swizzle-*.json")
    if not files:
        return None
    data = json.loads(files[-1].read_text())
    data["file"] = files[-1].name
    return data


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_target"]:
        _target(int(argv[1]))
        return 0
    parser = argparse.ArgumentParser(
        description="Read the shared-memory layouts of the taught forward kernel from Triton's "
        "IR and count its shared-memory wavefronts with Nsight Compute (CUDA GPU, ncu)."
    )
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    args.out.write_text(json.dumps(run(), indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
