"""The attention benchmark: our kernel against PyTorch's SDPA backends, FlexAttention,
eager and a matmul.

Contract: `run_benchmark(config)` times forward and backward of every provider on every
shape of the sweep and returns a JSON-ready dict (config, device, per-row times and their
repeats, TFLOP/s, peak extra memory, ratios to each anchor with their spread);
`check_baseline(result, baseline)` lists the shapes where our kernel got more than
``tolerance`` slower than a committed result, or where the baseline timed another kernel
(`row_kernel`: a baseline of version 1 cannot guard version 5); `check_anchor(result)` the shapes where it
fell below ``minimum`` times SDPA flash in any repeat.

Design decisions:
- The sweep follows the FlashAttention-3 paper: ``batch x seq = tokens`` (16k) and
  ``heads x head_dim = model_dim`` (2048), so every shape does a comparable amount of
  work and only the sequence length and the head dim change.
- The contenders and how one is timed are in `providers` (SDPA's backends, FlexAttention
  compiled once per shape with its compile time reported apart, eager); the bf16 matmul is
  the Tensor Core ceiling, measured in the same run. A provider that cannot run a shape
  (or a device) is recorded with its error, not dropped silently.
- Each provider is timed ``repeats`` times per shape (3 by default); a row keeps every
  timing (``ms_runs``) and their median (``ms``), and the ratios keep the worst and best
  same-repeat ratio, so one lucky timing cannot pass a check.
- TFLOP/s use `traffic.attention_flops` (4·B·H·N²·D, halved causal, x2.5 backward).
- Peak extra memory: allocator peak during one forward+backward minus what was allocated
  before it (GPU only; None on the CPU).
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from mlinfra_lab import results, runtime
from mlinfra_lab.attention.providers import (
    PROVIDERS,
    REMOVED_PROVIDERS,
    VERSION_PROVIDERS,
    measure,
    time_ms,
)
from mlinfra_lab.errors import MlinfraError

__all__ = [
    "PROVIDERS",
    "REMOVED_PROVIDERS",
    "VERSION_PROVIDERS",
    "BaselineError",
    "BenchConfig",
    "check_anchor",
    "check_baseline",
    "committed_results",
    "format_table",
    "load_result",
    "plot_results",
    "ratios",
    "run_benchmark",
]


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
    repeats: int = 3  # timings per provider and shape: the row keeps each and their median

    @classmethod
    def gpu(cls) -> BenchConfig:
        """The full sweep in this GPU's 16-bit dtype (`runtime.half_dtype`: bf16 from Ampere
        on, fp16 on a T4, where bf16 is emulated and SDPA's fused backends refuse it)."""
        return cls(dtype=str(runtime.half_dtype()).removeprefix("torch."))

    @classmethod
    def cpu(cls) -> BenchConfig:
        """A tiny sweep that runs in seconds under the Triton interpreter."""
        return cls(
            seqs=(64, 128),
            head_dims=(16, 32),
            causal=(False, True),
            dtype="float32",
            tokens=128,
            model_dim=32,
            providers=("ours", "sdpa_flash", "eager"),
            warmup_ms=0,
            rep_ms=0,
            matmul_size=256,
            repeats=1,
        )

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


def _matmul_tflops(cfg: BenchConfig, device: str) -> float:
    dtype = getattr(torch, cfg.dtype)
    g = torch.Generator(device=device).manual_seed(0)
    n = cfg.matmul_size
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    return 2 * n**3 / time_ms(lambda: a @ b, cfg) * 1e-9


def format_table(result: dict[str, Any]) -> str:
    """A plain-text table: TFLOP/s of every provider per shape, and ours over each anchor."""
    provs = list(result["config"]["providers"])
    cell: dict[tuple, dict[str, Any]] = {}
    for r in result["rows"]:
        key = (r["mode"], r["head_dim"], r["causal"], r["seq"])
        cell.setdefault(key, {})[r["provider"]] = r
    lines = [
        f"matmul ceiling {result['matmul_tflops']:.0f} TFLOP/s; TFLOP/s per provider, "
        "then ours/anchor; mem = peak extra GiB fwd+bwd (ours, sdpa_flash)",
        "mode  D  causal    seq "
        + " ".join(f"{p[:10]:>10}" for p in provs)
        + "  /flash /cudnn  /flex   mem(ours,flash)",
    ]
    for key in sorted(cell, key=lambda k: (k[0] != "fwd", k[1], k[2], k[3])):
        row = cell[key]
        tops = {p: row[p]["tflops"] for p in row}
        tf = tops.get
        vals = " ".join(f"{tf(p):10.1f}" if tf(p) else f"{'-':>10}" for p in provs)
        ours = tf("ours")
        ratios = " ".join(
            f"{ours / tops[a]:6.2f}" if ours and tf(a) else f"{'-':>6}"
            for a in ("sdpa_flash", "sdpa_cudnn", "flex")
        )
        mem = " ".join(
            f"{row[p]['peak_bytes'] / 2**30:6.2f}"
            if p in row and row[p]["peak_bytes"]
            else f"{'-':>6}"
            for p in ("ours", "sdpa_flash")
        )
        mode, d, causal, n = key
        lines.append(f"{mode:4} {d:3} {causal!s:6} {n:6} {vals}  {ratios}   {mem}")
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our TFLOP/s over each anchor's, per shape and mode (None where an anchor failed).

    ``vs_X`` compares the medians; ``vs_X_min``/``vs_X_max`` the k-th timing of ours with the
    k-th of the anchor, over the repeats (the spread a single timing could have shown)."""
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
            if name == "ours":
                continue
            entry[f"vs_{name}"] = ours["tflops"] / r["tflops"] if r["tflops"] else None
            pairs = list(zip(ours.get("ms_runs") or [], r.get("ms_runs") or [], strict=False))
            if pairs:
                each = [theirs / mine for mine, theirs in pairs]
                entry[f"vs_{name}_min"], entry[f"vs_{name}_max"] = min(each), max(each)
        out.append(entry)
    return out


def check_anchor(
    result: dict[str, Any], anchor: str = "sdpa_flash", minimum: float = 1.25, mode: str = "fwd"
) -> list[str]:
    """Shapes where ours ran below ``minimum`` times `anchor`'s speed in any repeat.

    Uses each shape's worst same-repeat ratio (``vs_X_min``, else the medians'); raises
    `BaselineError` when the result has no timing of `anchor`, since that checks nothing."""
    key = f"vs_{anchor}"
    entries = [e for e in result["ratios"] if e["mode"] == mode and e.get(key) is not None]
    if not entries:
        raise BaselineError(
            f"this result has no {mode} timing of {anchor}; include it in "
            "--providers (it needs a GPU for the SDPA backends)"
        )
    failures = []
    for e in entries:
        worst = e.get(f"{key}_min", e[key])
        if worst < minimum:
            failures.append(
                f"seq={e['seq']} head_dim={e['head_dim']} causal={e['causal']} "
                f"{mode}: {worst:.2f}x {anchor} (< {minimum:.2f}x)"
            )
    return failures


def run_benchmark(
    cfg: BenchConfig, progress: bool = True, partial_out: Path | None = None
) -> dict[str, Any]:
    """Run the sweep on this device; the result holds everything needed to plot or compare.

    With `partial_out`, the result so far (``"complete": false``) is written there after every
    shape, so a sweep cut short by a time limit keeps the shapes it finished."""
    device = runtime.device()
    if device == "cpu":
        runtime.ensure_triton_mode()
    from mlinfra_lab.progress import progress_bar

    info = runtime.describe().as_dict()
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    result: dict[str, Any] = {
        "benchmark": "attention",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": info,
        "config": asdict(cfg),
        "matmul_tflops": _matmul_tflops(cfg, device),
        "complete": False,
        "rows": [],
        "ratios": [],
    }
    for shape in progress_bar(cfg.shapes(), desc="attention bench", unit="shape", enabled=progress):
        for name in cfg.providers:
            result["rows"].extend(measure(name, shape, cfg, device))
            if device == "cuda":
                torch.cuda.empty_cache()
        result["ratios"] = ratios(result["rows"])
        if partial_out is not None:
            partial_out.write_text(json.dumps(result, indent=1) + "\n")
    result["complete"] = True
    return result


def row_kernel(row: dict[str, Any]) -> str | None:
    """Which of our kernels a row timed, from its ``tiles`` record: ``"v1"`` or ``"v5"`` for a
    forward, ``"split"`` (Triton) or ``"gluon"`` for a backward; None when the row does not
    say (an anchor, a failed shape, a hand-made result without tiles)."""
    tiles = row.get("tiles")
    if not tiles:
        return None
    if row.get("mode") == "fwd":
        # runs before kernel versions existed wrote the bare v1 tile ("BLOCK_M: ...")
        return tiles.split()[0] if tiles.startswith("v") else "v1"
    return "gluon" if tiles.startswith("gluon") else "split"


def check_baseline(
    result: dict[str, Any], baseline: dict[str, Any], tolerance: float = 0.10
) -> list[str]:
    """Shapes where our kernel is more than ``tolerance`` slower than in ``baseline``, and
    shapes where the baseline timed another kernel (`row_kernel`), which it cannot guard.

    Compares our median times shape by shape (seq, head dim, causal, mode); raises
    `BaselineError` when the two results share no shape, since that compares nothing.
    """

    def ours(res: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
        return {
            (r["seq"], r["head_dim"], r["causal"], r["mode"]): r
            for r in res["rows"]
            if r["provider"] == "ours" and r["ms"] is not None
        }

    now_rows, then_rows = ours(result), ours(baseline)
    common = sorted(set(now_rows) & set(then_rows))
    if not common:
        raise BaselineError(
            "the baseline has no shape in common with this run; "
            "run the same sweep (same --seqs/--head-dims) as the baseline"
        )
    now = {k: r["ms"] for k, r in now_rows.items()}
    then = {k: r["ms"] for k, r in then_rows.items()}
    failures = []
    for key in common:
        k_now, k_then = row_kernel(now_rows[key]), row_kernel(then_rows[key])
        if k_now and k_then and k_now != k_then:
            n, d, causal, mode = key
            failures.append(
                f"seq={n} head_dim={d} causal={causal} {mode}: this run timed kernel {k_now}, "
                f"the baseline {k_then}: not comparable; re-baseline on this GPU (write the "
                "sweep with --out and copy it into benchmarks/baselines/)"
            )
        elif now[key] > then[key] * (1 + tolerance):
            n, d, causal, mode = key
            failures.append(
                f"seq={n} head_dim={d} causal={causal} {mode}: {now[key]:.3f} ms vs "
                f"baseline {then[key]:.3f} ms (+{now[key] / then[key] - 1:.0%})"
            )
    return failures


def plot_results(result: dict[str, Any], path: str | Path | None = None) -> Any:
    """TFLOP/s against sequence length, one panel per (mode, head dim, causal)."""
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["tflops"] is not None]
    panels = sorted({(r["mode"], r["head_dim"], r["causal"]) for r in rows})
    cols = max(1, len({(d, c) for _, d, c in panels}))
    nrows = max(1, len({m for m, _, _ in panels}))
    fig, axes = plt.subplots(
        nrows, cols, figsize=(3.6 * cols, 3.0 * nrows), squeeze=False, sharey=True
    )
    order = sorted({(d, c) for _, d, c in panels})
    modes = sorted({m for m, _, _ in panels}, reverse=True)  # fwd first
    for mode, d, causal in panels:
        ax = axes[modes.index(mode)][order.index((d, causal))]
        for name in result["config"]["providers"]:
            pts = sorted(
                (r["seq"], r["tflops"])
                for r in rows
                if r["provider"] == name
                and (r["mode"], r["head_dim"], r["causal"]) == (mode, d, causal)
            )
            if pts:
                ax.plot(
                    *zip(*pts, strict=True),
                    marker="o",
                    label=name,
                    lw=2.5 if name == "ours" else 1.2,
                )
        ax.axhline(result["matmul_tflops"], color="gray", ls="--", lw=1, label="bf16 matmul")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{mode}, D={d}, {'causal' if causal else 'non-causal'}", fontsize=9)
        ax.set_xlabel("sequence length")
    for row in axes:
        row[0].set_ylabel("TFLOP/s")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        f"attention on {result['device']['device_name']} ({result['config']['dtype']})", fontsize=10
    )
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
