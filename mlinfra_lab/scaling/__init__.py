"""Chapter 2: debugging poor multi-GPU scaling, by measuring instead of guessing.

The syllabus, in the order the chapter uses it:

- `RunConfig`, `parse_fault`: what a profiled run is, and the faults it can inject.
- `profile`: DDP on N local ranks (gloo on CPU, NCCL on GPU) recording, per rank and step,
  data wait, forward, backward, exposed communication and optimizer time (`RunResult`).
- `allreduce_bench`, `run_allreduce_bench`, `fit_alpha_beta`: nccl-tests' all_reduce_perf
  and the latency/bandwidth fit of its timings.
- `Cluster`, `Level`, `h100_cluster`: the all-reduce on a two-level cluster (NVLink inside a
  node, NICs between nodes), ring, tree or hierarchical, from published parameters.
- `ring_allreduce_time`, `tree_allreduce_time`, `StepModel`, `worked_example`,
  `flat_ring_example`: the cost model that extrapolates a small run to 8 and 64 GPUs.
- `ComputeRate`, `critical_batch`: the communication roofline, the per-GPU batch at which
  compute covers the all-reduce.
- `loader_bench`, `shared_source_bench`: the data loader alone.
- `diagnose` -> `Diagnosis`, `scaling_efficiency`; `parse_nccl_log`: the verdict, its
  evidence, the transport.
- `synthesize_run`, `mystery_set`: runs computed from the emulation's arithmetic for stated
  faults (the lab's fresh mysteries, one fault or two at once).
- `summarise_trace`, `op_table`, `format_op_table`, `op_table_html`: a `torch.profiler` trace of the profiled
  steps (`RunConfig(trace=True)`), read back as compute vs communication and top operators.
- `step_timeline` -> `StepTimeline`: one step's phases and each bucket's all-reduce, hidden
  under backward or exposed after it, from the run's own record.
- `read_counters`, `sample_counters`, `describe_counters`: GPU counters from NVML
  (utilisation, memory, power), with a fallback that says why there is none.
- `run_grad_sync` -> `RankSync`, `reference_grads`, `sync_after_backward`: a gradient
  synchronisation of your own (bucketed all-reduce from backward hooks) on N forked gloo
  ranks over the emulated link, with its gradients and the order of its events.
- `StackDumper`, `read_stack_dumps`, `name_hung_rank` -> `HangVerdict`: a stack dump of every
  rank (faulthandler, or py-spy's), and the rank stuck outside a collective named from them;
  `RankHungError`, what `profile` raises when a job with armed dumps fails.
- `compression_bench`, `counting_hook`: gradient compression through DDP comm hooks (fp16,
  PowerSGD), measured in bytes handed to the all-reduce.
"""

from mlinfra_lab.scaling.allreduce import (
    AlphaBetaFit,
    allreduce_bench,
    default_sizes,
    fit_alpha_beta,
)
from mlinfra_lab.scaling.compression import (
    HOOKS,
    CompressionRow,
    UnknownHookError,
    compression_bench,
    count_allreduce_bytes,
    counting_hook,
    ring_wire_bytes,
)
from mlinfra_lab.scaling.config import (
    FAULT_KINDS,
    Fault,
    FaultSpecError,
    RunConfig,
    RunConfigError,
    parse_fault,
)
from mlinfra_lab.scaling.dataloader import loader_bench, shared_source_bench
from mlinfra_lab.scaling.diagnose import (
    CAUSES,
    Diagnosis,
    Hypothesis,
    diagnose,
    scaling_efficiency,
)
from mlinfra_lab.scaling.gradsync import (
    GradSyncError,
    RankSync,
    reference_grads,
    run_grad_sync,
    sync_after_backward,
)
from mlinfra_lab.scaling.launch import (
    OversubscribedWarning,
    RankHungError,
    RankLostError,
    profile,
    run_allreduce_bench,
)
from mlinfra_lab.scaling.model import (
    StepModel,
    StepPrediction,
    flat_ring_example,
    ring_allreduce_time,
    tree_allreduce_time,
    worked_example,
)
from mlinfra_lab.scaling.nccl_log import NcclTransport, parse_nccl_log
from mlinfra_lab.scaling.nvml import (
    GpuCounters,
    NvmlUnavailable,
    describe_counters,
    read_counters,
    sample_counters,
)
from mlinfra_lab.scaling.results import PHASES, ResultFileError, RunResult, load_run, save_run
from mlinfra_lab.scaling.roofline import ComputeRate, RooflineError, critical_batch
from mlinfra_lab.scaling.stacks import (
    Frame,
    HangVerdict,
    NoStackDumpsError,
    RankStack,
    StackDumper,
    name_hung_rank,
    parse_stack_dump,
    read_stack_dumps,
)
from mlinfra_lab.scaling.synthetic import Mystery, hide_faults, mystery_set, synthesize_run
from mlinfra_lab.scaling.timeline import (
    BucketSpan,
    Span,
    StepTimeline,
    TimelineError,
    step_timeline,
)
from mlinfra_lab.scaling.topology import (
    ALGORITHMS,
    H100_SOURCES,
    AllReduceCost,
    Cluster,
    Level,
    TopologyError,
    h100_cluster,
)
from mlinfra_lab.scaling.trace import (
    OpRow,
    format_op_table,
    op_table,
    op_table_html,
    summarise_trace,
)

__all__ = [
    "Frame",
    "HangVerdict",
    "NoStackDumpsError",
    "RankHungError",
    "RankStack",
    "RunConfigError",
    "StackDumper",
    "name_hung_rank",
    "parse_stack_dump",
    "read_stack_dumps",
    "ALGORITHMS",
    "AllReduceCost",
    "Cluster",
    "ComputeRate",
    "RooflineError",
    "critical_batch",
    "H100_SOURCES",
    "Level",
    "BucketSpan",
    "Span",
    "StepTimeline",
    "TimelineError",
    "step_timeline",
    "TopologyError",
    "flat_ring_example",
    "h100_cluster",
    "CAUSES",
    "FAULT_KINDS",
    "HOOKS",
    "PHASES",
    "AlphaBetaFit",
    "CompressionRow",
    "Diagnosis",
    "Fault",
    "FaultSpecError",
    "GpuCounters",
    "GradSyncError",
    "RankSync",
    "reference_grads",
    "run_grad_sync",
    "sync_after_backward",
    "Hypothesis",
    "NcclTransport",
    "NvmlUnavailable",
    "OpRow",
    "OversubscribedWarning",
    "RankLostError",
    "ResultFileError",
    "RunConfig",
    "RunResult",
    "Mystery",
    "StepModel",
    "StepPrediction",
    "UnknownHookError",
    "allreduce_bench",
    "compression_bench",
    "count_allreduce_bytes",
    "counting_hook",
    "default_sizes",
    "describe_counters",
    "diagnose",
    "fit_alpha_beta",
    "format_op_table",
    "load_run",
    "hide_faults",
    "mystery_set",
    "loader_bench",
    "op_table",
    "op_table_html",
    "parse_fault",
    "parse_nccl_log",
    "profile",
    "read_counters",
    "ring_allreduce_time",
    "ring_wire_bytes",
    "run_allreduce_bench",
    "sample_counters",
    "save_run",
    "scaling_efficiency",
    "shared_source_bench",
    "summarise_trace",
    "synthesize_run",
    "tree_allreduce_time",
    "worked_example",
]
