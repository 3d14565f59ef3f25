"""Record the committed GPU results: profiles per world size and batch, the all-reduce sweep,
and the NCCL_DEBUG=INFO log with the transport it shows.

Contract: ``python -m mlinfra_lab.scaling.record --out DIR [--world-sizes 1 2 4 8]`` writes
into DIR, per world size N, ``<prefix>-scaling-<N>gpu-b<B>.json`` (one profile per per-rank
batch; faults with ``--faults``), ``<prefix>-allreduce-<N>gpu.json`` (sweep + alpha-beta
fit) and ``<prefix>-allreduce-<N>gpu.nccl.log`` (its parsed transport is inside the sweep file).

Design decisions:
- The same `profile` and `run_allreduce_bench` as the CPU path, with `RunConfig.for_gpu()`
  (no emulation) and NCCL, so the GPU files are read by the same chapter code.
- NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and its companions) on shared hosts.
- Several per-rank batches at world size 1 measure step 2 of the course text on real
  hardware: how compute time per sample rises as the per-GPU batch shrinks.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import tempfile
from pathlib import Path

__all__ = ["record"]

_SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def record(
    out: Path,
    world_sizes: list[int],
    batches: list[int],
    faults: list[str],
    prefix: str = "h200",
    max_mb: float = 256,
    steps: int = 20,
    hidden: int = 4096,
) -> list[Path]:
    """Run everything for each world size; return the files written."""
    from mlinfra_lab.scaling.allreduce import default_sizes, fit_alpha_beta
    from mlinfra_lab.scaling.config import RunConfig
    from mlinfra_lab.scaling.harness import environment
    from mlinfra_lab.scaling.launch import profile, run_allreduce_bench
    from mlinfra_lab.scaling.nccl_log import parse_nccl_log

    os.environ.update(_SAFE_ENV)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for n in world_sizes:
        logdir = tempfile.mkdtemp(prefix="nccl-")
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_FILE=f"{logdir}/nccl.%h.%p.log")
        rows = run_allreduce_bench(
            n, default_sizes(int(max_mb * 2**20)), iters=20, warmup=5, show_progress=False
        )
        log = "".join(
            Path(p).read_text(errors="replace") for p in sorted(glob.glob(f"{logdir}/nccl.*"))
        )
        os.environ.pop("NCCL_DEBUG_FILE")
        os.environ.pop("NCCL_DEBUG")
        transport = parse_nccl_log(log)
        log_path = out / f"{prefix}-allreduce-{n}gpu.nccl.log"
        log_path.write_text(log)
        sweep = {
            "kind": "allreduce",
            "nproc": n,
            "environment": environment(),
            "rows": rows,
            "fit": fit_alpha_beta(rows).as_dict(),
            "nccl": {**transport.as_dict(), "log": log_path.name},
        }
        path = out / f"{prefix}-allreduce-{n}gpu.json"
        path.write_text(json.dumps(sweep, indent=1))
        written += [log_path, path]
        print(f"{n} GPU all-reduce: {transport.verdict}", flush=True)
        for spec in [None, *faults]:
            for b in batches if spec is None else batches[:1]:
                config = RunConfig.for_gpu(
                    batch=b, steps=steps, hidden=hidden, trace=(b == batches[0])
                )
                config = config.with_faults(spec) if spec else config
                tag = f"-{spec.split(':')[0]}" if spec else ""
                path = out / f"{prefix}-scaling-{n}gpu-b{b}{tag}.json"
                run = profile(config, n, out=path, show_progress=False)
                path.with_suffix(".trace.json").unlink(missing_ok=True)  # too big to commit
                written.append(path)
                print(
                    f"{n} GPU batch {b}{tag}: step {run.step_time() * 1e3:.2f} ms, "
                    f"{run.throughput():.0f} samples/s, comm share {run.comm_share():.1%}",
                    flush=True,
                )
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 8, 512])
    parser.add_argument("--faults", nargs="*", default=[])
    parser.add_argument("--prefix", default="h200")
    parser.add_argument("--max-mb", type=float, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=4096)
    args = parser.parse_args(argv)
    for path in record(
        args.out,
        args.world_sizes,
        args.batches,
        args.faults,
        args.prefix,
        args.max_mb,
        args.steps,
        args.hidden,
    ):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
