"""Chapter 2: debugging poor multi-GPU scaling, by measuring instead of guessing.

The syllabus, in the order the chapter uses it:

- `RunConfig`, `parse_fault`: what a profiled run is, and the faults it can inject.
- `profile`: DDP on N local ranks (gloo on CPU, NCCL on GPU) recording, per rank and step,
  data wait, forward, backward, exposed communication and optimizer time (`RunResult`).
- `allreduce_bench`, `run_allreduce_bench`, `fit_alpha_beta`: nccl-tests' all_reduce_perf
  and the latency/bandwidth fit of its timings.
- `ring_allreduce_time`, `tree_allreduce_time`, `StepModel`, `worked_example`: the cost
  model that extrapolates a small run to 8 and 64 GPUs.
- `loader_bench`, `shared_source_bench`: the data loader alone.
- `diagnose` -> `Diagnosis`; `parse_nccl_log`: the verdict, its evidence, the transport.
"""

from mlinfra_lab.scaling.allreduce import (
    AlphaBetaFit,
    allreduce_bench,
    default_sizes,
    fit_alpha_beta,
)
from mlinfra_lab.scaling.config import FAULT_KINDS, Fault, FaultSpecError, RunConfig, parse_fault
from mlinfra_lab.scaling.dataloader import loader_bench, shared_source_bench
from mlinfra_lab.scaling.diagnose import CAUSES, Diagnosis, Hypothesis, diagnose
from mlinfra_lab.scaling.launch import (
    OversubscribedWarning,
    RankLostError,
    profile,
    run_allreduce_bench,
)
from mlinfra_lab.scaling.model import (
    StepModel,
    StepPrediction,
    ring_allreduce_time,
    tree_allreduce_time,
    worked_example,
)
from mlinfra_lab.scaling.nccl_log import NcclTransport, parse_nccl_log
from mlinfra_lab.scaling.results import PHASES, ResultFileError, RunResult, load_run, save_run
from mlinfra_lab.scaling.trace import summarise_trace

__all__ = [
    "CAUSES",
    "FAULT_KINDS",
    "PHASES",
    "AlphaBetaFit",
    "Diagnosis",
    "Fault",
    "FaultSpecError",
    "Hypothesis",
    "NcclTransport",
    "OversubscribedWarning",
    "RankLostError",
    "ResultFileError",
    "RunConfig",
    "RunResult",
    "StepModel",
    "StepPrediction",
    "allreduce_bench",
    "default_sizes",
    "diagnose",
    "fit_alpha_beta",
    "load_run",
    "loader_bench",
    "parse_fault",
    "parse_nccl_log",
    "profile",
    "ring_allreduce_time",
    "run_allreduce_bench",
    "save_run",
    "shared_source_bench",
    "summarise_trace",
    "tree_allreduce_time",
    "worked_example",
]
