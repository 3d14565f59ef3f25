"""Chapter 1: fused attention on Tensor Cores.

The syllabus, in reading order:

- `naive_attention`: the unfused three-step version that writes the score matrix to memory;
- `hbm_traffic`, `attention_flops`: what that costs in bytes, and what fusion saves;
- `online_softmax` (and `online_softmax_trace`): softmax one block at a time;
- `tiled_attention`: the FlashAttention-2 algorithm in plain PyTorch;
- `tiled_attention_backward`, `backward_delta`: the backward pass in PyTorch, recomputing P
  from the log-sum-exp (`hbm_traffic_backward` counts what that saves, `count_matmuls` what
  it costs);
- `flash_attention`: the same algorithm as a Triton kernel, forward and backward;
- `time_forward_tile`: the forward kernel timed at one tile config you choose (GPU);
- `bank_conflict_degree`, `tile_addresses`: shared-memory banks, padding and swizzles;
- `sdpa_backends`: PyTorch's SDPA pinned to each backend with `sdpa_kernel`: the kernel
  that ran, its time, or why it could not run here;
- `mlinfra_lab.attention.bench`: timing against PyTorch's SDPA backends (imported on use).

The package exports what the chapters, the labs and their tests call, nothing more: the
kernels, their launcher and their references, the code chapter 1 reads. The readers and
writers of committed GPU results live in `mlinfra_lab.attention.studies` (the default kernel's
runs and roofline, the case study, the GPU memory and tile study, the Nsight Compute harness
and its kernel profiles, SASS read back on a CPU, the tile sweep, alignment and swizzles);
the benchmark is `bench`, the tile table `tile_table`.

Importing this package imports torch but not triton: the kernel module switches on the
CPU interpreter (when there is no GPU) before its first triton import.
"""

from mlinfra_lab.attention._checks import AttentionInputError, RemovedKernelError
from mlinfra_lab.attention.backward import (
    backward_delta,
    count_matmuls,
    tiled_attention_backward,
)
from mlinfra_lab.attention.banks import bank_conflict_degree, bank_word_counts, tile_addresses
from mlinfra_lab.attention.flash import flash_attention, flash_attention_lse
from mlinfra_lab.attention.reference import (
    naive_attention,
    online_softmax,
    online_softmax_trace,
    tiled_attention,
)
from mlinfra_lab.attention.sdpa_backends import BACKENDS, sdpa_backends
from mlinfra_lab.attention.tiles import (
    TileConfigError,
    TileTiming,
    TileTimingNeedsGPUError,
    time_forward_tile,
)
from mlinfra_lab.attention.traffic import (
    attention_flops,
    hbm_traffic,
    hbm_traffic_backward,
    hbm_traffic_backward_breakdown,
    hbm_traffic_breakdown,
)

__all__ = [
    "BACKENDS",
    "AttentionInputError",
    "RemovedKernelError",
    "TileConfigError",
    "TileTiming",
    "TileTimingNeedsGPUError",
    "attention_flops",
    "backward_delta",
    "count_matmuls",
    "bank_conflict_degree",
    "bank_word_counts",
    "flash_attention",
    "flash_attention_lse",
    "hbm_traffic",
    "hbm_traffic_backward",
    "hbm_traffic_backward_breakdown",
    "hbm_traffic_breakdown",
    "naive_attention",
    "online_softmax",
    "online_softmax_trace",
    "sdpa_backends",
    "time_forward_tile",
    "tile_addresses",
    "tiled_attention",
    "tiled_attention_backward",
]
