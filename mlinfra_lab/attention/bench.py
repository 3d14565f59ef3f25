"""The attention benchmark: our kernel against PyTorch's SDPA backends, eager and a matmul.

Contract: `run_benchmark(config)` times forward and backward of every provider on every
shape of the sweep and returns a JSON-ready dict (config, device, per-row times, TFLOP/s,
peak extra memory, ratios to each anchor); `check_baseline(result, baseline)` lists the
shapes where our kernel got more than ``tolerance`` slower than a committed result.

Design decisions:
- The sweep follows the FlashAttention-3 paper: ``batch x seq = tokens`` (16k) and
  ``heads x head_dim = model_dim`` (2048), so every shape does a comparable amount of
  work and only the sequence length and the head dim change.
- Anchors are measured in the same run, on the same device: SDPA pinned to each backend
  (`FLASH_ATTENTION`, `CUDNN_ATTENTION`, `EFFICIENT_ATTENTION`), the unfused eager
  version, and a bf16 matmul as the Tensor Core ceiling. A backend that cannot run a
  shape (or a device) is recorded with its error, not dropped silently.
- Times are medians of `triton.testing.do_bench` on the GPU (events, warm-up, flushed
  L2); on the CPU a median of wall-clock repeats, so the command and its tests run
  anywhere (CPU numbers teach nothing about Tensor Cores).
- TFLOP/s use `traffic.attention_flops` (4·B·H·N²·D, halved causal, x2.5 backward).
  Backward time is ``out.backward(dO)`` alone, the forward excluded.
- Peak extra memory: allocator peak during one forward+backward minus what was allocated
  before it (GPU only; None on the CPU).
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from mlinfra_lab import results, runtime
from mlinfra_lab.attention.traffic import attention_flops
from mlinfra_lab.errors import MlinfraError

__all__ = [
    "PROVIDERS",
    "VERSION_PROVIDERS",
    "BaselineError",
    "BenchConfig",
    "check_baseline",
    "committed_results",
    "format_table",
    "load_result",
    "plot_results",
    "run_benchmark",
]

PROVIDERS = ("ours", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "eager")
VERSION_PROVIDERS = ("ours_v1", "ours_v2")  # one forward kernel version each (for A/B runs)


class BaselineError(MlinfraError, ValueError):
    """The baseline file cannot be compared with this result (missing, other sweep)."""


@dataclass(frozen=True)
class BenchConfig:
    """One sweep; saved with its results so a number always comes with its settings."""

    seqs: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384)
    head_dims: tuple[int, ...] = (64, 128)
    causal: tuple[bool, ...] = (False, True)
    dtype: str = "bfloat16"  # bf16 on the GPU; the CPU preset uses float32
    tokens: int = 16384  # batch x seq (FlashAttention-3 convention)
    model_dim: int = 2048  # heads x head_dim
    providers: tuple[str, ...] = PROVIDERS
    warmup_ms: int = 25  # do_bench warm-up, milliseconds
    rep_ms: int = 100  # do_bench measuring time, milliseconds
    matmul_size: int = 8192  # the ceiling's square matmul

    @classmethod
    def cpu(cls) -> BenchConfig:
        """A tiny sweep that runs in seconds under the Triton interpreter."""
        return cls(seqs=(64, 128), head_dims=(16, 32), causal=(False, True), dtype="float32",
                   tokens=128, model_dim=32, providers=("ours", "sdpa_flash", "eager"),
                   warmup_ms=0, rep_ms=0, matmul_size=256)

    def shapes(self) -> list[tuple[int, int, int, int, bool]]:
        """(batch, heads, seq, head_dim, causal) of every point of the sweep."""
        out = []
        for d in self.head_dims:
            for causal in self.causal:
                for n in self.seqs:
                    if self.tokens % n or self.model_dim % d:
                        raise ValueError(f"seq {n} / head dim {d} do not divide tokens/model_dim")
                    out.append((self.tokens // n, self.model_dim // d, n, d, causal))
        return out


def _provider_fn(name: str) -> Callable[..., torch.Tensor]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    if name in ("ours", "ours_v1", "ours_v2"):  # ours: the default forward kernel version
        from mlinfra_lab.attention.flash import flash_attention

        version = {"ours": None, "ours_v1": 1, "ours_v2": 2}[name]
        return lambda q, k, v, causal: flash_attention(q, k, v, causal=causal, version=version)
    if name == "eager":
        from mlinfra_lab.attention.reference import naive_attention

        return lambda q, k, v, causal: naive_attention(q, k, v, causal=causal)
    backend = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
               "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[name]

    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
        with sdpa_kernel(backend):
            return sdpa(q, k, v, is_causal=causal)

    return call


def _time_ms(fn: Callable[[], Any], cfg: BenchConfig, grad_to_none: list | None = None) -> float:
    """Median milliseconds of ``fn()``: do_bench on the GPU, wall-clock repeats on the CPU."""
    if torch.cuda.is_available():
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=cfg.warmup_ms, rep=cfg.rep_ms,
                              grad_to_none=grad_to_none, return_mode="median"))
    fn()  # warm-up (the interpreter's first call parses the kernel)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _matmul_tflops(cfg: BenchConfig, device: str) -> float:
    dtype = getattr(torch, cfg.dtype)
    g = torch.Generator(device=device).manual_seed(0)
    n = cfg.matmul_size
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    return 2 * n**3 / _time_ms(lambda: a @ b, cfg) * 1e-9


def _measure(name: str, shape: tuple, cfg: BenchConfig, device: str) -> list[dict[str, Any]]:
    b, h, n, d, causal = shape
    dtype = getattr(torch, cfg.dtype)
    g = torch.Generator(device=device).manual_seed(n + d)  # random data, never zeros
    q, k, v = (torch.randn(b, h, n, d, device=device, dtype=dtype, generator=g).requires_grad_()
               for _ in range(3))
    do = torch.randn(b, h, n, d, device=device, dtype=dtype, generator=g)
    fn = _provider_fn(name)
    rows = []
    base = {"provider": name, "batch": b, "heads": h, "seq": n, "head_dim": d, "causal": causal}
    try:
        peak = None
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            fn(q, k, v, causal).backward(do)
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - before
            q.grad = k.grad = v.grad = None
        fwd_ms = _time_ms(lambda: fn(q, k, v, causal), cfg)
        out = fn(q, k, v, causal)
        bwd_ms = _time_ms(lambda: out.backward(do, retain_graph=True), cfg, grad_to_none=[q, k, v])
        out = None  # free the graph before the next provider
    except (RuntimeError, ValueError) as err:  # a backend that refuses this shape/device
        msg = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        return [dict(base, mode=m, ms=None, tflops=None, peak_bytes=None, error=msg)
                for m in ("fwd", "bwd")]
    tiles = _chosen_tiles(name) if name.startswith("ours") else {}
    for mode, ms in (("fwd", fwd_ms), ("bwd", bwd_ms)):
        flops = attention_flops(b, h, n, n, d, causal, mode)
        rows.append(dict(base, mode=mode, ms=ms, tflops=flops / ms * 1e-9, peak_bytes=peak,
                         error=None, tiles=tiles.get(mode)))
    return rows


def _chosen_tiles(provider: str = "ours") -> dict[str, str]:
    """The autotuner's last choice per kernel, recorded next to the time it produced."""
    from mlinfra_lab.attention._flash_kernels import kernels
    from mlinfra_lab.attention.flash import resolve_version

    version = int(provider[-1]) if provider[-1].isdigit() else resolve_version()
    k = kernels()
    fwd = "fwd" if version == 1 else "fwd_v2"
    pick = {name: str(getattr(k[name], "best_config", "")) for name in (fwd, "dkdv", "dq")}
    return {"fwd": f"v{version} {pick[fwd]}", "bwd": f"dkdv: {pick['dkdv']}; dq: {pick['dq']}"}


def format_table(result: dict[str, Any]) -> str:
    """A plain-text table: TFLOP/s of every provider per shape, and ours over each anchor."""
    provs = list(result["config"]["providers"])
    cell: dict[tuple, dict[str, Any]] = {}
    for r in result["rows"]:
        key = (r["mode"], r["head_dim"], r["causal"], r["seq"])
        cell.setdefault(key, {})[r["provider"]] = r
    lines = [f"matmul ceiling {result['matmul_tflops']:.0f} TFLOP/s; TFLOP/s per provider, "
             "then ours/anchor; mem = peak extra GiB fwd+bwd (ours, sdpa_flash)",
             "mode  D  causal    seq " + " ".join(f"{p[:10]:>10}" for p in provs)
             + "  /flash /cudnn   mem(ours,flash)"]
    for key in sorted(cell, key=lambda k: (k[0] != "fwd", k[1], k[2], k[3])):
        row = cell[key]
        tops = {p: row[p]["tflops"] for p in row}
        tf = tops.get
        vals = " ".join(f"{tf(p):10.1f}" if tf(p) else f"{'-':>10}" for p in provs)
        ratios = " ".join(f"{tf('ours') / tf(a):6.2f}" if tf("ours") and tf(a) else f"{'-':>6}"
                          for a in ("sdpa_flash", "sdpa_cudnn"))
        mem = " ".join(f"{row[p]['peak_bytes'] / 2**30:6.2f}" if p in row and row[p]["peak_bytes"]
                       else f"{'-':>6}" for p in ("ours", "sdpa_flash"))
        mode, d, causal, n = key
        lines.append(f"{mode:4} {d:3} {causal!s:6} {n:6} {vals}  {ratios}   {mem}")
    return "\n".join(lines)


def _ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our TFLOP/s over each anchor's, per shape and mode (None where an anchor failed)."""
    by_key: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        by_key.setdefault((r["seq"], r["head_dim"], r["causal"], r["mode"]), {})[r["provider"]] = r
    out = []
    for (n, d, causal, mode), provs in sorted(by_key.items()):
        ours = provs.get("ours")
        if ours is None or ours["tflops"] is None:
            continue
        entry: dict[str, Any] = {"seq": n, "head_dim": d, "causal": causal, "mode": mode}
        for name, r in provs.items():
            if name != "ours":
                entry[f"vs_{name}"] = ours["tflops"] / r["tflops"] if r["tflops"] else None
        out.append(entry)
    return out


def run_benchmark(cfg: BenchConfig, progress: bool = True) -> dict[str, Any]:
    """Run the sweep on this device; the result holds everything needed to plot or compare."""
    device = runtime.device()
    if device == "cpu":
        runtime.ensure_triton_mode()
    from tqdm.auto import tqdm

    shapes = cfg.shapes()
    rows: list[dict[str, Any]] = []
    jobs = [(p, s) for s in shapes for p in cfg.providers]
    for name, shape in tqdm(jobs, desc="attention bench", disable=not progress):
        rows.extend(_measure(name, shape, cfg, device))
        if device == "cuda":
            torch.cuda.empty_cache()
    info = runtime.describe().as_dict()
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    return {
        "benchmark": "attention",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": info,
        "config": asdict(cfg),
        "matmul_tflops": _matmul_tflops(cfg, device),
        "rows": rows,
        "ratios": _ratios(rows),
    }


def check_baseline(result: dict[str, Any], baseline: dict[str, Any],
                   tolerance: float = 0.10) -> list[str]:
    """Shapes where our kernel is more than ``tolerance`` slower than in ``baseline``.

    Compares our median times shape by shape (seq, head dim, causal, mode); raises
    `BaselineError` when the two results share no shape, since that compares nothing.
    """
    def ours(res: dict[str, Any]) -> dict[tuple, float]:
        return {(r["seq"], r["head_dim"], r["causal"], r["mode"]): r["ms"]
                for r in res["rows"] if r["provider"] == "ours" and r["ms"] is not None}

    now, then = ours(result), ours(baseline)
    common = sorted(set(now) & set(then))
    if not common:
        raise BaselineError("the baseline has no shape in common with this run; "
                            "run the same sweep (same --seqs/--head-dims) as the baseline")
    failures = []
    for key in common:
        if now[key] > then[key] * (1 + tolerance):
            n, d, causal, mode = key
            failures.append(f"seq={n} head_dim={d} causal={causal} {mode}: {now[key]:.3f} ms vs "
                            f"baseline {then[key]:.3f} ms (+{now[key] / then[key] - 1:.0%})")
    return failures


def plot_results(result: dict[str, Any], path: str | Path | None = None) -> Any:
    """TFLOP/s against sequence length, one panel per (mode, head dim, causal)."""
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["tflops"] is not None]
    panels = sorted({(r["mode"], r["head_dim"], r["causal"]) for r in rows})
    cols = max(1, len({(d, c) for _, d, c in panels}))
    nrows = max(1, len({m for m, _, _ in panels}))
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 3.0 * nrows), squeeze=False,
                             sharey=True)
    order = sorted({(d, c) for _, d, c in panels})
    modes = sorted({m for m, _, _ in panels}, reverse=True)  # fwd first
    for mode, d, causal in panels:
        ax = axes[modes.index(mode)][order.index((d, causal))]
        for name in result["config"]["providers"]:
            pts = sorted((r["seq"], r["tflops"]) for r in rows if r["provider"] == name
                         and (r["mode"], r["head_dim"], r["causal"]) == (mode, d, causal))
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=name,
                        lw=2.5 if name == "ours" else 1.2)
        ax.axhline(result["matmul_tflops"], color="gray", ls="--", lw=1, label="bf16 matmul")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{mode}, D={d}, {'causal' if causal else 'non-causal'}", fontsize=9)
        ax.set_xlabel("sequence length")
    for row in axes:
        row[0].set_ylabel("TFLOP/s")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"attention on {result['device']['device_name']} ({result['config']['dtype']})",
                 fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def committed_results(pattern: str = "h200-attention-*.json") -> list[Path]:
    """Result files committed under the repository's ``benchmarks/results`` (newest last),
    found in a checkout or in an installed wheel (`mlinfra_lab.results`)."""
    return results.committed(pattern)


def load_result(path: str | Path) -> dict[str, Any]:
    """Read a result JSON written by `mlinfra-lab bench attention`."""
    return json.loads(Path(path).read_text())
