"""Input checks shared by every attention implementation: one place, one set of messages.

Contract: `check_attention_inputs(q, k, v, causal)` returns the shape summary
``(batch, heads, seq_q, seq_k, head_dim)`` or raises `AttentionInputError` (a
`ValueError`) whose message says what to change.

Design decisions:
- The layout is ``[batch, heads, seq, head_dim]`` everywhere (as in
  `torch.nn.functional.scaled_dot_product_attention`), so the checks can name the axis
  that is wrong.
- Causal attention with different query and key lengths is refused rather than given a
  silent convention: PyTorch aligns the mask top-left, FlashAttention-2 bottom-right,
  and a reader comparing the two would get a "bug" that is only a convention.
- The Triton kernel has extra limits (head dim, dtype under the interpreter); those are
  checked by `check_kernel_inputs`, which calls the generic checks first.
"""

from __future__ import annotations

import torch

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "AttentionInputError",
    "RemovedKernelError",
    "check_attention_inputs",
    "check_kernel_inputs",
]

# Head dims the Triton kernel supports: it pads to the next power of two (at least 16,
# the smallest Tensor Core K dimension) and masks, so any size in this range works.
KERNEL_HEAD_DIM_RANGE = (16, 128)


class AttentionInputError(MlinfraError, ValueError):
    """Inputs that no attention implementation here can take (shape, dtype, device)."""


class RemovedKernelError(AttentionInputError):
    """A kernel variant that was removed after losing its measurement was asked for; the
    message says what it was, what it measured, which commit holds its code and what to use."""


def check_attention_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
) -> tuple[int, int, int, int, int]:
    """Validate q, k, v of shape ``[batch, heads, seq, head_dim]``; return the sizes."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise AttentionInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise AttentionInputError(
                f"{name} has rank {t.dim()} (shape {tuple(t.shape)}); expected rank 4, "
                "[batch, heads, seq, head_dim]: add the missing axes with unsqueeze()"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise AttentionInputError(
            f"q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype}); cast them to one dtype"
        )
    if not (q.device == k.device == v.device):
        raise AttentionInputError(
            f"q, k, v are on different devices ({q.device}, {k.device}, {v.device}); "
            "move them to one device with .to(device)"
        )
    if not q.is_floating_point():
        raise AttentionInputError(f"attention needs floating-point inputs, got {q.dtype}")
    b, h, n_q, d = q.shape
    if k.shape[:2] != (b, h) or v.shape[:2] != (b, h):
        raise AttentionInputError(
            f"batch/heads differ: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if k.shape[3] != d:
        raise AttentionInputError(f"q and k head dims differ ({d} vs {k.shape[3]})")
    if v.shape[2] != k.shape[2]:
        raise AttentionInputError(f"k and v sequence lengths differ ({k.shape[2]} vs {v.shape[2]})")
    if v.shape[3] != d:
        raise AttentionInputError(
            f"v head dim {v.shape[3]} differs from q/k head dim {d}; this course's kernels "
            "use one head dim for all three"
        )
    n_k = k.shape[2]
    if min(b, h, n_q, n_k, d) == 0:
        raise AttentionInputError(f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if causal and n_q != n_k:
        raise AttentionInputError(
            f"causal attention needs equal query and key lengths, got {n_q} and {n_k}; "
            "pass causal=False, or build the mask you mean explicitly"
        )
    return b, h, n_q, n_k, d


def check_kernel_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, interpreted: bool
) -> tuple[int, int, int, int, int]:
    """The generic checks plus the Triton kernel's own limits (head dim, dtype, device)."""
    sizes = check_attention_inputs(q, k, v, causal)
    d = sizes[4]
    lo, hi = KERNEL_HEAD_DIM_RANGE
    if not lo <= d <= hi:
        raise AttentionInputError(
            f"head dim {d} is not supported by flash_attention (supported: {lo}..{hi}); "
            "use naive_attention or tiled_attention for other sizes"
        )
    if interpreted:
        if q.device.type != "cpu":
            raise AttentionInputError("the Triton interpreter runs on CPU tensors only")
        if q.dtype not in (torch.float16, torch.float32):
            raise AttentionInputError(
                f"the Triton CPU interpreter has no {q.dtype}; use float16 or float32 there "
                "(bfloat16 runs on the GPU)"
            )
    else:
        if q.device.type != "cuda":
            raise AttentionInputError(
                f"flash_attention got {q.device} tensors but Triton is compiling for the GPU; "
                "move the inputs to cuda, or set TRITON_INTERPRET=1 before importing triton"
            )
        if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise AttentionInputError(
                f"flash_attention supports float16, bfloat16 and float32, got {q.dtype}"
            )
    return sizes
