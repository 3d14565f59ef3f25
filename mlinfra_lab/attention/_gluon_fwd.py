"""Version 5 of the forward: FlashAttention-3's schedule written by hand in Gluon (Hopper only).

Contract: `gluon_forward(q, k, v, causal, sm_scale, config)` returns ``(o, lse)`` exactly as
`flash._forward` does (O in the input dtype, the base-2 log-sum-exp ``[B*H, N]`` in float32),
for bfloat16 or float16 ``[B, H, N, D]`` contiguous inputs with equal query and key lengths,
``N`` a multiple of the tile sizes and ``D`` in (64, 128), on a compute capability 9.x GPU.
`unusable(...)` says why not (None when it can run); the launcher then runs v1 (and warns
when version 5 was asked for by name). `pick_config` is the measured per-shape table.

Why Gluon: Triton's ``tl`` decides itself where to wait on a Tensor Core matmul, and did
not keep one in flight across the softmax (version 4, measured and removed since); Gluon
(``triton.experimental.gluon``) is Triton's lower-level dialect in which the kernel issues
``wgmma`` asynchronously and says where to wait, allocates shared memory, and moves tiles
with the TMA engine behind ``mbarrier``s, as FlashAttention-3's CUDA does.

Design decisions:
- One program per ``BLOCK_M`` query rows of one (batch, head); Q, K and V are read through
  2-D TMA descriptors over ``[B*H*N, D]`` (a tile never crosses a head because ``N`` is a
  multiple of the tiles). K and V stream through rings of ``STAGES`` shared-memory buffers,
  each with its own "ready" mbarrier that the TMA engine completes.
- The main loop is FA3's intra-warpgroup overlap: for tile j it issues ``S_j = Q K_j^T``,
  then ``O += P_{j-1} V_{j-1}`` behind it, waits for S_j only (``warpgroup_mma_wait(1)``),
  runs tile j's softmax while the P V matmul still runs on the Tensor Cores, then waits
  for it (``wait(0)``) and rescales O. ``OVERLAP=False`` is the plain schedule (each
  matmul waited for at once), the control that isolates what the overlap buys. That is the
  PTX; the SASS can differ: at the D=128 table tile ptxas waits for P V before the softmax
  (`machine_code.softmax_in_flight` reads it from the SASS), so there the gain over the plain
  schedule is the two matmuls issued back to back, not the softmax under P V.
- A K buffer is refilled as soon as its QK^T is done, a V buffer as soon as its P V is;
  with two stages each load has a whole iteration to land.
- P goes to the second matmul from registers (wgmma's A operand); O goes out through shared
  memory (Q's buffer, free by then) and one TMA store. ``GluonConfig.p_smem`` (the ``-ps``
  configurations, not yet measured, not in the table) stages P through one shared-memory
  buffer instead and masks causal tiles without a branch; their SASS keeps most of the
  softmax in flight under P V.
- Causal programs run the heaviest query tiles first (reversed tile order) and stop at
  the diagonal; only tiles that cross the diagonal are masked (a uniform branch).

Kernels compile for ``sm_90`` on any machine with Triton >= 3.6 (`compile_for_hopper`),
which is how the CPU test checks that they still build; they run only on a Hopper GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import torch

__all__ = [
    "FALLBACK_CONFIG",
    "GLUON_TABLE",
    "GluonConfig",
    "compile_for_hopper",
    "descriptors",
    "gluon_forward",
    "launch",
    "launch_options",
    "pick_config",
    "shape_problem",
    "unusable",
]

LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class GluonConfig:
    """One tile configuration of the Gluon forward."""

    block_m: int = 128
    block_n: int = 128
    num_warps: int = 8
    stages: int = 2
    overlap: bool = True
    maxnreg: int | None = None  # a register cap per thread (more programs per SM), or none
    # P to the second matmul through shared memory instead of registers, and a branch-free
    # causal mask: the SASS of the register form waits for P V before the softmax (see
    # `machine_code`); this form keeps the softmax between the two waits. Not yet measured.
    p_smem: bool = False
    # With the overlap: rescale O by the last tile's alpha after S_j = Q K_j^T is issued and
    # before P V, as FlashAttention-3's loop does (the multiplies run while Q K^T is on the
    # Tensor Cores), instead of after P V is waited for (then no matmul is in flight).
    early_rescale: bool = False

    @property
    def name(self) -> str:
        sched = "overlap" if self.overlap else "plain"
        cap = f"r{self.maxnreg}" if self.maxnreg else ""
        ps = "-ps" if self.p_smem else ""
        ps += "-er" if self.early_rescale else ""
        return f"{sched}{ps}-m{self.block_m}n{self.block_n}w{self.num_warps}s{self.stages}{cap}"


# The configuration per (head dim, causal), by sequence length: (longest length, config),
# None where version 1 measured faster. Chosen from two H200 runs of
# benchmarks/experiments/gluon_fwd_experiment.py (benchmarks/results/h200-gluon-configs-*.json):
# at D=64 the plain schedule with 128x128 tiles (8 warps non-causal, 4 causal) beat the overlap;
# at D=128 the overlap with 128x64 tiles and 4 warps (two programs per SM) won every shape;
# causal D=64 at 1k tokens ran 230-254 TFLOP/s in every configuration against v1's 277. The
# causal D=64 entry was timed in the second run only (the first had no 4-warp 128x128 tile).
# Round 4 (one H100 run, benchmarks/results/h100-gluon-fwd-r4-2026-12-06.json) added the early
# rescale at D=128 from 2k tokens: over three passes per shape its geometric-mean gain over the
# late rescale was 1.02-1.05x non-causal and 1.00-1.02x causal at 2k-16k, and 0.95x / 1.00x at 1k.
_D128 = GluonConfig(128, 64, 4, 2, overlap=True)
_D128_EARLY = GluonConfig(128, 64, 4, 2, overlap=True, early_rescale=True)
GLUON_TABLE: dict[tuple[int, bool], list[tuple[int, GluonConfig | None]]] = {
    (64, False): [(1 << 30, GluonConfig(128, 128, 8, 2, overlap=False))],
    (64, True): [(1024, None), (1 << 30, GluonConfig(128, 128, 4, 2, overlap=False))],
    (128, False): [(1024, _D128), (1 << 30, _D128_EARLY)],
    (128, True): [(1024, _D128), (1 << 30, _D128_EARLY)],
}
# the configuration an explicit ``version=5`` uses where the table prefers version 1
FALLBACK_CONFIG: dict[bool, GluonConfig] = {
    False: GluonConfig(128, 128, 8, 2, overlap=False),
    True: GluonConfig(128, 64, 4, 2, overlap=True),
}
LAST_CONFIG: dict[str, str] = {}  # the configuration of the last launch (the benchmark reads it)


def pick_config(head_dim: int, causal: bool, n: int) -> GluonConfig | None:
    """The table's configuration for this shape; None where version 1 measured faster or
    the head dim has no entry."""
    for longest, cfg in GLUON_TABLE.get((head_dim, causal), []):
        if n <= longest:
            return cfg
    return None


def unusable(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    sm_scale: float,
    config: GluonConfig,
) -> str | None:
    """Why version 5 cannot run on these inputs, or None when it can."""
    if not q.is_cuda or _major(q.device.index) != 9:
        return "it needs a Hopper GPU (compute capability 9.x)"
    if not _has_gluon():
        return "it needs Triton >= 3.6 (triton.experimental.gluon)"
    if any(t.data_ptr() % 16 for t in (q, k, v)):
        return "a tensor's base is not 16-byte aligned, which its TMA copies need"
    return shape_problem(tuple(q.shape), k.shape[-2], q.dtype, causal, sm_scale, config)


def shape_problem(
    shape: tuple[int, ...],
    n_k: int,
    dtype: torch.dtype,
    causal: bool,
    sm_scale: float,
    config: GluonConfig,
) -> str | None:
    """The rules on shape, dtype, scale and tile alone (testable without a GPU): why version 5
    cannot take ``[B, H, N, D]`` queries against ``n_k`` keys, or None."""
    b, h, n, d = shape
    if dtype not in (torch.bfloat16, torch.float16):
        return f"dtype {dtype}: it handles bfloat16 and float16"
    if sm_scale <= 0:
        return f"scale {sm_scale:g}: it takes the row max before scaling, so it needs a scale > 0"
    if n == 0 or b * h > 65535 or b * h * n >= 2**31:
        return f"{b * h} heads of {n} tokens: outside its grid and copy-coordinate limits"
    if d not in (64, 128):
        return f"head dim {d}: it handles 64 and 128"
    if n_k != n:
        return "query and key lengths differ"
    if n % config.block_m or n % config.block_n:
        return f"length {n} is not a multiple of the {config.block_m}x{config.block_n} tile"
    if causal and config.block_m % config.block_n:
        # the diagonal program would own no whole key tile and wait for one forever
        return f"causal needs BLOCK_M % BLOCK_N == 0, not {config.block_m} x {config.block_n}"
    return None


# Host-side work runs on every call and a short causal forward lasts ~50 us on the H200: the
# answers that never change within a process are cached, so the launch stays GPU-bound.
@cache
def _major(device_index: int | None) -> int:
    return torch.cuda.get_device_capability(device_index)[0]


@lru_cache(maxsize=1)
def _has_gluon() -> bool:
    try:
        from triton.experimental.gluon.language.nvidia import hopper  # noqa: F401
    except ImportError:
        return False
    return True


def _kernel() -> Any:
    from mlinfra_lab.attention._gluon_kernels import attn_fwd  # imports gluon: on use only

    return attn_fwd


@cache
def _layout(block: tuple[int, int], dtype: torch.dtype) -> Any:
    from triton.experimental.gluon import language as gl

    gdtype = gl.bfloat16 if dtype == torch.bfloat16 else gl.float16
    return gl.NVMMASharedLayout.get_default_for(block, gdtype)


def gluon_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    sm_scale: float,
    config: GluonConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Version 5's forward: O and the base-2 LSE ``[B*H, N]`` (see the module doc); raises
    ValueError, saying why, on inputs it cannot take."""
    b, h, n, d = q.shape
    cfg = config or pick_config(d, causal, n) or FALLBACK_CONFIG[causal]
    why = unusable(q, k, v, causal, sm_scale, cfg)
    if why:
        raise ValueError(f"the Gluon forward cannot run here: {why}")
    return launch(q, k, v, causal, sm_scale, cfg)


def launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    sm_scale: float,
    cfg: GluonConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`gluon_forward` without the checks, for a caller that has just run `unusable` (the
    launcher in `flash`: the checks run once per call, not twice)."""
    b, h, n, d = q.shape
    LAST_CONFIG["fwd"] = cfg.name
    o = torch.empty_like(q)
    lse = torch.empty((b * h, n), device=q.device, dtype=torch.float32)
    grid = (n // cfg.block_m, b * h)
    _kernel()[grid](
        *descriptors(q, k, v, o, cfg), lse, n, sm_scale * LOG2E, **launch_options(cfg, d, causal)
    )
    return o, lse


def launch_options(cfg: GluonConfig, head_dim: int, causal: bool) -> dict[str, Any]:
    """The kernel's compile-time constants and launch options for this configuration."""
    return dict(
        HEAD_DIM=head_dim,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        STAGES=cfg.stages,
        CAUSAL=causal,
        OVERLAP=cfg.overlap,
        P_SMEM=cfg.p_smem,
        EARLY_RESCALE=cfg.early_rescale,
        num_warps=cfg.num_warps,
        maxnreg=cfg.maxnreg,
    )


def descriptors(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, cfg: GluonConfig
) -> list[Any]:
    """The kernel's four host-side TMA descriptors: Q, K, V and O viewed as ``[B*H*N, D]``,
    Q and O in BLOCK_M-row blocks, K and V in BLOCK_N-row blocks."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    b, h, n, d = q.shape
    rows = b * h * n
    q_block, kv_block = (cfg.block_m, d), (cfg.block_n, d)
    return [
        TensorDescriptor(t.view(rows, d), [rows, d], [d, 1], list(blk), _layout(blk, q.dtype))
        for t, blk in ((q, q_block), (k, kv_block), (v, kv_block), (o, q_block))
    ]


def compile_for_hopper(
    head_dim: int, causal: bool, config: GluonConfig, dtype: torch.dtype = torch.bfloat16
) -> Any:
    """Compile the kernel for sm_90 without a GPU (Triton's ahead-of-time path); returns the
    compiled kernel (``.asm['ptx']``, ``.metadata.shared``). Raises what the compiler raises."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    name = "bf16" if dtype == torch.bfloat16 else "fp16"
    q_block, kv_block = (config.block_m, head_dim), (config.block_n, head_dim)

    def desc(block: tuple[int, int]) -> str:
        return f"tensordesc<{name}[{block[0]}, {block[1]}],{_layout(block, dtype)!r}>"

    kernel = _kernel()
    signature = {
        "q_desc": desc(q_block),
        "k_desc": desc(kv_block),
        "v_desc": desc(kv_block),
        "o_desc": desc(q_block),
        "LSE": "*fp32",
        "n_ctx": "i32",
        "qk_scale": "fp32",
    }
    constexprs = {
        "HEAD_DIM": head_dim,
        "BLOCK_M": config.block_m,
        "BLOCK_N": config.block_n,
        "STAGES": config.stages,
        "CAUSAL": causal,
        "OVERLAP": config.overlap,
        "P_SMEM": config.p_smem,
        "EARLY_RESCALE": config.early_rescale,
    }
    for key in constexprs:
        signature[key] = "constexpr"
    src = GluonASTSource(kernel, signature, constexprs)
    return triton.compile(
        src,
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": config.num_warps, "maxnreg": config.maxnreg},
    )
