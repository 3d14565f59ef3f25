"""The contenders of the attention benchmark, and how one of them is timed on one shape.

Contract: `measure(name, shape, cfg, device)` returns two rows (``fwd`` and ``bwd``) for
provider `name` on ``shape = (batch, heads, seq, head_dim, causal)``: median milliseconds,
TFLOP/s, peak extra memory, the tiles our kernel chose, FlexAttention's compile seconds,
or, for a provider that cannot run the shape, its error. `PROVIDERS` lists the contenders.

Design decisions:
- Anchors run in the same process, on the same inputs: SDPA pinned to each backend with
  `sdpa_kernel` (FLASH_ATTENTION is FlashAttention-2, CUDNN_ATTENTION NVIDIA's cuDNN
  kernels, EFFICIENT_ATTENTION xFormers'), PyTorch's own Triton-generated FlexAttention
  (``torch.compile(flex_attention)``), and the unfused eager version.
- FlexAttention is compiled once per shape (dynamo is reset first, so no shape falls back to
  eager after the recompile limit) by one untimed forward and backward; the seconds that took
  are recorded as ``compile_s`` and never enter a timing. On a CPU it runs uncompiled
  (inductor would need a C++ toolchain and minutes): a smoke test of the path, not a number.
- Times are medians of `triton.testing.do_bench` on the GPU (CUDA events, warm-up, L2
  flushed between calls); on the CPU a median of three wall-clock calls after a warm-up.
- Backward time is ``out.backward(dO)`` alone, the forward excluded (the graph is kept).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

from mlinfra_lab.attention.traffic import attention_flops

__all__ = [
    "PROVIDERS",
    "REMOVED_PROVIDERS",
    "VERSION_PROVIDERS",
    "TimingConfig",
    "measure",
    "time_ms",
]

PROVIDERS = ("ours", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex", "eager")
# one forward kernel version each, with the default backward (for A/B runs)
VERSION_PROVIDERS = ("ours_v1", "ours_v5")
# the A/B providers of the kernels removed after losing on the H200 (`flash.REMOVED_VERSIONS`,
# `flash.REMOVED_BACKWARDS`); committed runs still name them, the benchmark no longer runs them
REMOVED_PROVIDERS = ("ours_v2", "ours_v3", "ours_v4", "ours_atomic")

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]


class TimingConfig(Protocol):
    """What timing needs of a sweep's settings (`bench.BenchConfig` is one); it only reads
    them, so a frozen dataclass fits."""

    @property
    def dtype(self) -> str: ...
    @property
    def warmup_ms(self) -> int: ...
    @property
    def rep_ms(self) -> int: ...
    @property
    def repeats(self) -> int: ...


def _flex_fn(n: int, causal: bool, device: str) -> Attention:
    """FlexAttention for one shape: compiled on a GPU (fresh dynamo state), eager on a CPU."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask = None
    if causal:
        mask = create_block_mask(
            lambda b, h, q_idx, kv_idx: q_idx >= kv_idx,
            B=None,
            H=None,
            Q_LEN=n,
            KV_LEN=n,
            device=device,
        )
    if device != "cuda":  # PyTorch refuses inputs that require grad here: forward only
        return lambda q, k, v, causal: flex_attention(
            q.detach(), k.detach(), v.detach(), block_mask=mask
        )
    torch._dynamo.reset()  # one compile per shape; never the recompile limit's eager fallback
    # the benchmark replays one backward graph (retain_graph=True), which a compiled backward
    # refuses when it may reuse ("donate") its saved buffers
    torch._functorch.config.donated_buffer = False
    fn = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v, causal: fn(q, k, v, block_mask=mask)


def _provider_fn(name: str, n: int, causal: bool, device: str) -> Attention:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    if name in ("ours", *VERSION_PROVIDERS):  # ours: the default forward kernel version
        from mlinfra_lab.attention.flash import flash_attention

        version = int(name[-1]) if name[-1].isdigit() else None
        return lambda q, k, v, causal: flash_attention(q, k, v, causal=causal, version=version)
    if name == "eager":
        from mlinfra_lab.attention.reference import naive_attention

        return lambda q, k, v, causal: naive_attention(q, k, v, causal=causal)
    if name == "flex":
        return _flex_fn(n, causal, device)
    backend = {
        "sdpa_flash": SDPBackend.FLASH_ATTENTION,
        "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
    }[name]

    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
        with sdpa_kernel(backend):
            return sdpa(q, k, v, is_causal=causal)

    return call


def time_ms(fn: Callable[[], Any], cfg: TimingConfig, grad_to_none: list | None = None) -> float:
    """Median milliseconds of ``fn()``: do_bench on the GPU, wall-clock repeats on the CPU."""
    if torch.cuda.is_available():
        from triton.testing import do_bench

        return float(
            do_bench(
                fn,
                warmup=cfg.warmup_ms,
                rep=cfg.rep_ms,
                grad_to_none=grad_to_none,
                return_mode="median",
            )
        )
    fn()  # warm-up (the interpreter's first call parses the kernel)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _error_text(err: BaseException) -> str:
    return str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__


def measure(name: str, shape: tuple, cfg: TimingConfig, device: str) -> list[dict[str, Any]]:
    """The ``fwd`` and ``bwd`` rows of provider `name` on one shape (see the module doc);
    each times ``cfg.repeats`` medians (``ms_runs``) and reports their median as ``ms``.
    A mode the provider cannot run here (FlexAttention's backward on a CPU) gets its error."""
    b, h, n, d, causal = shape
    dtype = getattr(torch, cfg.dtype)
    g = torch.Generator(device=device).manual_seed(n + d)  # random data, never zeros
    q, k, v = (
        torch.randn(b, h, n, d, device=device, dtype=dtype, generator=g).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn(b, h, n, d, device=device, dtype=dtype, generator=g)
    base = {"provider": name, "batch": b, "heads": h, "seq": n, "head_dim": d, "causal": causal}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    errors: dict[str, str] = {}
    if name == "flex" and device != "cuda":
        errors["bwd"] = "FlexAttention has no backward on a CPU (PyTorch refuses it)"
    runs: dict[str, list[float]] = {"fwd": [], "bwd": []}
    peak = None
    try:
        fn = _provider_fn(name, n, causal, device)
        sync()
        before = torch.cuda.memory_allocated() if device == "cuda" else 0
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        out = fn(q, k, v, causal)  # untimed: compiles, autotunes, measures memory
        if "bwd" not in errors:
            out.backward(do)
        sync()
        first_s = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated() - before if device == "cuda" else None
        q.grad = k.grad = v.grad = None
        out = fn(q, k, v, causal)
        for _ in range(cfg.repeats):
            runs["fwd"].append(time_ms(lambda: fn(q, k, v, causal), cfg))
            if "bwd" not in errors:
                runs["bwd"].append(
                    time_ms(
                        functools.partial(out.backward, do, retain_graph=True),
                        cfg,
                        grad_to_none=[q, k, v],
                    )
                )
        del out  # free the graph before the next provider
    except (RuntimeError, ValueError, AssertionError) as err:  # a provider refusing the shape
        errors = {"fwd": _error_text(err), "bwd": _error_text(err)}
    tiles = _chosen_tiles(name) if name.startswith("ours") and not errors else {}
    rows = []
    for mode, ms_runs in runs.items():
        if mode in errors:
            rows.append(
                dict(base, mode=mode, ms=None, tflops=None, peak_bytes=None, error=errors[mode])
            )
            continue
        flops = attention_flops(b, h, n, n, d, causal, mode)
        ms = statistics.median(ms_runs)
        row = dict(
            base,
            mode=mode,
            ms=ms,
            tflops=flops / ms * 1e-9,
            peak_bytes=peak,
            error=None,
            tiles=tiles.get(mode),
            ms_runs=ms_runs,
        )
        if name == "flex":
            row["compile_s"] = first_s  # fwd + bwd compile (and first run), never timed
        rows.append(row)
    return rows


def _chosen_tiles(provider: str = "ours") -> dict[str, str]:
    """The tile each kernel ran with last (table entry or autotuner's pick), per mode."""
    from mlinfra_lab.attention._flash_kernels import kernels
    from mlinfra_lab.attention._gluon_fwd import LAST_CONFIG
    from mlinfra_lab.attention.flash import resolve_version

    version = int(provider[-1]) if provider[-1].isdigit() else resolve_version()
    k = kernels()
    pick = {name: str(getattr(k[name], "best_config", "")) for name in ("fwd", "dkdv", "dq")}
    if version == 5 and LAST_CONFIG.get("fwd"):  # v5 ran (else v1 ran: the table says so)
        pick["fwd"], version = f"gluon {LAST_CONFIG.pop('fwd')}", 5
    elif version == 5:
        version = 1
    from mlinfra_lab.attention._gluon_bwd import LAST_CONFIG as LAST_BWD

    gluon_bwd = LAST_BWD.pop("bwd", None)  # set when the Gluon backward ran
    if gluon_bwd:
        bwd = f"gluon {gluon_bwd}"
    else:
        bwd = f"dkdv: {pick['dkdv']}; dq: {pick['dq']}"
    return {"fwd": f"v{version} {pick['fwd']}", "bwd": bwd}
