"""One GPU session's study of the kernel: correctness, speed, memory against N, tiles.

Contract: ``python -m mlinfra_lab.attention.studies.gpu_study --out DIR`` checks the version 1
forward (Triton) and the default backward against a float64 reference on the GPU, then
times it side by side with SDPA's flash and cuDNN backends over the benchmark sweep, records
peak extra memory against sequence length at a fixed batch, and times the forward over a
grid of ``(BLOCK_M, BLOCK_N)`` tiles (`tiles.time_forward_tile`, the function the chapter's
live widget calls); everything goes into one JSON file (and a table on stdout). The
committed study (`committed_study`'s default file) also ran version 2 beside version 1,
with the code of git commit 687b216 (version 2 was removed since: `flash`'s docstring);
the readers below read it as it was written.

Design decisions:
- Correctness first: if any check fails, the timings are still taken but the result says
  so, and the exit code is 1.
- One script, one call: the lease is short, so the kernels choose only among `STUDY_TILES`
  (the two forward configs that won or came close in the v1 sweep, and the backward
  winners; `pinning.restrict`).
- Every launch goes through `flash_attention`, the launcher users call: the correctness
  check's NaN-filled buffers come from `flash.poisoned_buffers`, the tile sweep pins each
  tile with `pinning.force` (`tiles.time_forward_tile`).
- Rows in ``rows`` use the `bench` format (providers ``ours_v1``, ``sdpa_flash``,
  ``sdpa_cudnn``; the committed study also has ``ours_v2``), so `bench.format_table` and `bench.plot_results`
  read them. ``memory`` and ``tiles`` are separate sections.

`committed_study`, `version_rows`, `plot_memory` and `plot_tiles` read and draw a committed
result anywhere (the chapter uses them on a CPU).

Caveats: the study runs on a GPU only (it refuses a CPU); numbers are for the device it
ran on.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

__all__ = ["committed_study", "main", "plot_memory", "plot_tiles", "version_rows"]

MEMORY_SEQS = (1024, 2048, 4096, 8192, 16384)
TILE_CONFIGS = (
    (64, 32, 4, 3),
    (64, 64, 4, 3),
    (128, 32, 8, 3),
    (128, 64, 4, 3),
    (128, 64, 8, 3),
    (128, 128, 8, 2),
    (256, 64, 8, 2),
    (256, 128, 8, 2),
)
CHECK_SHAPES = (
    (2, 4, 1000, 1000, 128, True),
    (1, 4, 300, 2048, 128, False),
    (2, 3, 257, 257, 80, False),
    (1, 2, 4096, 4096, 64, True),
    (1, 2, 17, 17, 96, True),
)


# Tiles the study's runs choose from (compile time is device time): the two forward tiles
# that won or came close in the v1 sweep, and each backward kernel's winner.
STUDY_TILES = {
    "fwd": [(128, 64, 8, 3), (128, 128, 8, 2)],
    "dkdv": [(64, 128, 8, 3)],
    "dq": [(128, 64, 8, 3)],
}


def _restricted() -> Any:
    """The three Triton kernels restricted to `STUDY_TILES` (`pinning.restrict`), as one context."""
    from contextlib import ExitStack

    from mlinfra_lab.attention.pinning import restrict

    stack = ExitStack()
    for kernel, tiles in STUDY_TILES.items():
        stack.enter_context(
            restrict(
                kernel,
                [
                    dict(zip(("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"), t, strict=True))
                    for t in tiles
                ],
            )
        )
    return stack


def _rms(x: torch.Tensor) -> float:
    return x.double().pow(2).mean().sqrt().item()


def _grads(
    fn: Any, xs: tuple[torch.Tensor, ...], do: torch.Tensor, causal: bool
) -> list[torch.Tensor]:
    leaves = [x.detach().clone().requires_grad_() for x in xs]
    o = fn(*leaves, causal=causal)
    o.backward(do.to(o.dtype))
    return [o.detach()] + [x.grad for x in leaves]


def _poisoned_grads(
    version: int, xs: tuple[torch.Tensor, ...], do: torch.Tensor, causal: bool
) -> list[torch.Tensor]:
    """Our outputs and gradients with every buffer the launchers allocate set to NaN first."""
    from mlinfra_lab.attention.flash import flash_attention, poisoned_buffers

    with poisoned_buffers():
        return _grads(
            lambda q, k, v, causal: flash_attention(q, k, v, causal=causal, version=version),
            xs,
            do,
            causal,
        )


def _correctness() -> list[dict[str, Any]]:
    from mlinfra_lab.attention import naive_attention

    out = []
    for i, (b, h, n_q, n_k, d, causal) in enumerate(CHECK_SHAPES):
        g = torch.Generator(device="cuda").manual_seed(100 + i)  # fresh inputs per shape
        q, k, v = (
            torch.randn(b, h, n, d, device="cuda", generator=g, dtype=torch.bfloat16)
            for n in (n_q, n_k, n_k)
        )
        do = torch.randn(b, h, n_q, d, device="cuda", generator=g, dtype=torch.bfloat16)
        ref = _grads(naive_attention, (q.double(), k.double(), v.double()), do.double(), causal)
        eager = _grads(naive_attention, (q, k, v), do, causal)
        ours = _poisoned_grads(1, (q, k, v), do, causal)
        for name, a, e, r in zip(("out", "dq", "dk", "dv"), ours, eager, ref, strict=True):
            err, eager_err = _rms(a.double() - r), _rms(e.double() - r)
            floor = 2 * torch.finfo(torch.bfloat16).eps * max(_rms(r), 1.0)
            ok = bool(not torch.isnan(a).any() and err <= 2 * eager_err + floor)
            out.append(
                dict(
                    shape=[b, h, n_q, n_k, d, causal],
                    version=1,
                    tensor=name,
                    rms_err=err,
                    eager_rms_err=eager_err,
                    rel_err=err / max(_rms(r), 1e-30),
                    ok=ok,
                )
            )
    return out


def _versions(cfg: Any) -> list[dict[str, Any]]:
    from mlinfra_lab.attention import providers
    from mlinfra_lab.progress import progress_bar

    rows: list[dict[str, Any]] = []
    jobs = [(p, s) for s in cfg.shapes() for p in cfg.providers]
    for name, shape in progress_bar(jobs, desc="v1 and the anchors", mininterval=10):
        rows.extend(providers.measure(name, shape, cfg, "cuda"))
        torch.cuda.empty_cache()
    return rows


def _peak(
    fn: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, backward: bool
) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn(q, k, v)
    if backward:
        out.backward(do)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    q.grad = k.grad = v.grad = None
    return int(peak)


def _memory() -> list[dict[str, Any]]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from mlinfra_lab.attention import flash_attention, naive_attention

    def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return sdpa(q, k, v)

    fns = {"ours": flash_attention, "sdpa_flash": flash, "eager": naive_attention}
    rows = []
    for n in MEMORY_SEQS:
        g = torch.Generator(device="cuda").manual_seed(n)
        q, k, v = (
            torch.randn(
                1, 16, n, 128, device="cuda", dtype=torch.bfloat16, generator=g
            ).requires_grad_()
            for _ in range(3)
        )
        do = torch.randn(1, 16, n, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        for name, fn in fns.items():
            row: dict[str, Any] = dict(
                provider=name,
                batch=1,
                heads=16,
                seq=n,
                head_dim=128,
                input_bytes=3 * q.numel() * 2,
                error=None,
            )
            try:
                row["fwd_peak_bytes"] = _peak(fn, q, k, v, do, backward=False)
                row["fwd_bwd_peak_bytes"] = _peak(fn, q, k, v, do, backward=True)
            except (RuntimeError, torch.OutOfMemoryError) as err:
                row.update(
                    fwd_peak_bytes=None,
                    fwd_bwd_peak_bytes=None,
                    error=str(err).splitlines()[0][:200],
                )
            torch.cuda.empty_cache()
            rows.append(row)
    return rows


def _tiles() -> list[dict[str, Any]]:
    """Every `TILE_CONFIGS` entry of the version 1 forward, timed by `time_forward_tile`."""
    from mlinfra_lab.attention.tiles import time_forward_tile

    rows = []
    for bm, bn, warps, stages in TILE_CONFIGS:
        t = time_forward_tile(
            bm, bn, warps, stages, batch=2, heads=16, seq=8192, head_dim=128, causal=False
        )
        row = t.as_dict()
        row["max_abs_diff_vs_v1"] = row.pop("max_abs_diff")  # the committed files' key
        rows.append(row)
    return rows


def committed_study(name: str = "h200-attention-2026-12-02-v2.json") -> dict[str, Any] | None:
    """The committed study result with its file name added (``file``), or None when the
    package runs without the repository."""
    from mlinfra_lab.attention.bench import committed_results, load_result

    paths = committed_results(name)
    return {**load_result(paths[0]), "file": paths[0].name} if paths else None


def version_rows(study: dict[str, Any], mode: str = "fwd") -> list[dict[str, Any]]:
    """Per shape: TFLOP/s of each version the study timed (the committed one: v1 and v2),
    SDPA flash and cuDNN, and ``vK / v1`` (same run): `case_study.version_table` of it."""
    from mlinfra_lab.attention.studies.case_study import version_table

    return version_table(study, mode)


def plot_memory(study: dict[str, Any], ax: Any = None) -> Any:
    """Peak extra memory of forward+backward against N (batch 1, 16 heads, D=128), log-log;
    providers that ran out of memory are marked where their line stops."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.4))
    for prov in ("eager", "sdpa_flash", "ours"):
        rows = [r for r in study["memory"] if r["provider"] == prov]
        pts = sorted(
            (r["seq"], r["fwd_bwd_peak_bytes"] / 2**30) for r in rows if r["fwd_bwd_peak_bytes"]
        )
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=prov, lw=2.5 if prov == "ours" else 1.2)
        for r in rows:
            if r["error"]:
                ax.annotate("out of memory", (r["seq"], pts[-1][1] if pts else 1), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N (batch 1, 16 heads, D=128)")
    ax.set_ylabel("peak extra GiB, fwd+bwd")
    ax.legend(fontsize=8)
    return ax


def plot_tiles(study: dict[str, Any], version: int = 1, ax: Any = None) -> Any:
    """Forward TFLOP/s of each measured (BLOCK_M, BLOCK_N, warps, stages) config, one bar
    each; configs that failed to compile or launch are shown as 0 with their error."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2))
    rows = [r for r in study["tiles"] if r["version"] == version]
    labels = [f"{r['block_m']}x{r['block_n']}\nw{r['num_warps']} s{r['num_stages']}" for r in rows]
    vals = [r["tflops"] or 0.0 for r in rows]
    best = max(vals) if vals else 0.0
    ax.bar(range(len(rows)), vals, color=["C3" if v == best else "C0" for v in vals])
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    for i, r in enumerate(rows):
        if r["error"]:
            ax.text(i, 5, "failed", rotation=90, fontsize=7, ha="center")
    ax.set_ylabel("forward TFLOP/s")
    r0 = rows[0] if rows else {}
    ax.set_title(
        f"v{version}: D={r0.get('head_dim')}, N={r0.get('seq')}, non-causal, bf16", fontsize=9
    )
    return ax


def describe_tiles(study: dict[str, Any]) -> str:
    """One line per kernel version: its fastest tile config and how far each other config is
    behind it (the numbers the chapter's tile section quotes)."""
    lines = []
    for version in sorted({r["version"] for r in study["tiles"]}):
        rows = [r for r in study["tiles"] if r["version"] == version and r["tflops"]]
        best = max(rows, key=lambda r: r["tflops"])
        behind = ", ".join(
            f"{r['block_m']}x{r['block_n']} w{r['num_warps']} "
            f"{r['tflops'] / best['tflops'] - 1:+.0%}"
            for r in rows
            if r is not best
        )
        lines.append(
            f"v{version} best {best['block_m']}x{best['block_n']} "
            f"w{best['num_warps']} s{best['num_stages']}: {best['tflops']:.0f} TFLOP/s; "
            f"others: {behind}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the study; returns 1 when a correctness check failed, else 0."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[2])
    p.add_argument("--out", default=".", help="directory for the JSON (default: %(default)s)")
    p.add_argument("--name", default="h200-attention-study.json", help="result file name")
    p.add_argument("--seqs", default="1024,2048,4096,8192,16384", help="sweep lengths")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_study needs a CUDA GPU", file=sys.stderr)
        return 2
    with _restricted():
        return _study(args)


def _study(args: argparse.Namespace) -> int:
    """Every section, in order, written after each (a cut-short run keeps what it measured)."""
    from mlinfra_lab import runtime
    from mlinfra_lab.attention import bench

    result: dict[str, Any] = {
        "benchmark": "attention-study",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    info = runtime.describe().as_dict()
    import triton

    info["triton"] = triton.__version__
    result["device"] = info
    sections = [("correctness", _correctness), ("memory", _memory), ("tiles", _tiles)]
    cfg = replace(
        bench.BenchConfig(),
        seqs=tuple(int(s) for s in args.seqs.split(",")),
        providers=("ours_v1", "sdpa_flash", "sdpa_cudnn"),
    )
    result["config"] = asdict(cfg)
    out = Path(args.out) / args.name
    for name, fn in sections[:1] + [("rows", lambda: _versions(cfg))] + sections[1:]:
        try:
            result[name] = fn()
        except Exception as err:  # noqa: BLE001 (keep what the other sections measured)
            result[name] = []
            result.setdefault("errors", {})[name] = f"{type(err).__name__}: {err}"[:500]
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"[{_dt.datetime.now():%H:%M:%S}] {name} done", flush=True)
    result["matmul_tflops"] = bench._matmul_tflops(cfg, "cuda")
    result["ratios"] = bench.ratios(
        [
            dict(r, provider="ours" if r["provider"] == "ours_v1" else r["provider"])
            for r in result["rows"]
        ]
    )
    out.write_text(json.dumps(result, indent=1) + "\n")
    bad = [c for c in result["correctness"] if not c["ok"]]
    print(
        f"correctness: {len(result['correctness']) - len(bad)} ok, {len(bad)} failed "
        f"{[(c['shape'], c['version'], c['tensor']) for c in bad]}"
    )
    if result["rows"]:
        print(bench.format_table(result))
    for r in result["memory"]:
        print(
            "mem",
            r["provider"],
            r["seq"],
            r.get("fwd_peak_bytes"),
            r.get("fwd_bwd_peak_bytes"),
            r["error"] or "",
        )
    for r in result["tiles"]:
        print(
            f"tile v{r['version']} {r['block_m']:3d} x {r['block_n']:3d} "
            f"w{r['num_warps']} s{r['num_stages']}",
            f"{r['tflops']:.1f}" if r["tflops"] else r["error"],
        )
    print("errors:", result.get("errors"))
    return 1 if bad or result.get("errors") else 0


if __name__ == "__main__":
    raise SystemExit(main())
