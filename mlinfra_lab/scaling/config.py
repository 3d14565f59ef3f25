"""What one profiled training run is: the frozen run configuration and the injectable faults.

Contract: `RunConfig` holds every knob of a run and is saved inside its result file;
`parse_fault("straggler:rank=1,ms=80")` turns a command-line fault into a `Fault`.

Design decisions:
- One frozen dataclass, passed explicitly to every rank and written into the result JSON,
  so a result file says exactly how it was produced.
- The CPU model emulates accelerator time and a network link. Each layer is a real `Linear` (so gradients and
  their all-reduce are real) followed by a sleep of `device_overhead_ms +
  device_us_per_sample * batch`, forward and twice that backward. A sleeping rank leaves the
  CPU to gloo's communication thread, like a GPU leaves the host free while kernels run, so
  overlap, stragglers and small-batch inefficiency behave on a 2-core laptop as they do on
  a cluster. The link (`link_mbps`) makes each bucket's all-reduce last at least its
  ring traffic at that rate, on top of the real gloo all-reduce: the laptop then has the
  compute-to-communication ratio of a cluster. On a GPU (`RunConfig.for_gpu()`) both are
  off: real kernels, real interconnect.
- Faults are data (`Fault(kind, params)`), applied by the harness at named points; their
  textual form is the one `mlinfra-lab scaling profile --inject` takes.
- Two ways to stop: `lost_rank` stops a rank between steps (the launcher's heartbeat finds
  it), `hang` blocks it inside a call, its data read, as a read from a dead file system
  does (the stack dumps armed by `stack_dump_s` show where). `pg_timeout_s` shortens the
  process group's own timeout, the one that, as NCCL's watchdog does, turns the other
  ranks' endless wait into an error.

Caveats: the link and `slow_transport` act on the CPU path only, by sleeping in the comm
hook until the wire time at the capped rate has passed; that slows communication as a
slower link would, but it is not a real transport change (on GPUs, NCCL's own choice is
read from its log, and a fallback is forced with NCCL_P2P_DISABLE / NCCL_SHM_DISABLE).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = ["FAULT_KINDS", "Fault", "FaultSpecError", "RunConfig", "RunConfigError", "parse_fault"]

# kind -> (required parameter names, optional parameter names)
FAULT_KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "straggler": (("rank", "ms"), ()),  # rank R computes M ms longer every step
    "slow_data": (("ms",), ()),  # one shared, serialised source: M ms per batch
    "small_batch": (("global",), ()),  # global batch held at G: per-rank batch = G / world
    "no_overlap": ((), ()),  # one bucket, reduced after the whole backward pass
    "slow_transport": (("mbps",), ()),  # all-reduce capped at X megabits/s per rank
    "lost_rank": (("rank",), ("step", "exit")),  # rank R hangs (exit=1: dies) at step S
    "hang": (("rank", "step"), ()),  # rank R blocks forever inside its data read at step S
}


class FaultSpecError(MlinfraError, ValueError):
    """A fault given on the command line or in a config does not parse."""


class RunConfigError(MlinfraError, ValueError):
    """Two settings of a `RunConfig` contradict each other."""


@dataclass(frozen=True)
class Fault:
    """One injected fault: its kind and numeric parameters."""

    kind: str
    params: tuple[tuple[str, float], ...] = ()

    def get(self, name: str, default: float | None = None) -> float:
        for key, value in self.params:
            if key == name:
                return value
        if default is None:
            raise KeyError(name)
        return default

    def __str__(self) -> str:
        if not self.params:
            return self.kind
        args = ",".join(f"{k}={v:g}" for k, v in self.params)
        return f"{self.kind}:{args}"


def parse_fault(spec: str) -> Fault:
    """Parse ``KIND[:key=value,...]``, e.g. ``straggler:rank=1,ms=80`` or ``no_overlap``."""
    kind, _, rest = spec.strip().partition(":")
    if kind not in FAULT_KINDS:
        raise FaultSpecError(
            f"unknown fault {kind!r} in {spec!r}; use one of: {', '.join(FAULT_KINDS)}"
        )
    required, optional = FAULT_KINDS[kind]
    params: dict[str, float] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in required + optional:
            raise FaultSpecError(
                f"bad parameter {item!r} in {spec!r}; {kind} takes "
                f"{', '.join(k + '=NUMBER' for k in required + optional) or 'no parameters'}"
            )
        try:
            params[key] = float(value)
        except ValueError:
            raise FaultSpecError(f"{key}={value!r} in {spec!r} is not a number") from None
    missing = [k for k in required if k not in params]
    if missing:
        raise FaultSpecError(f"fault {spec!r} misses {', '.join(missing)} (e.g. {_example(kind)})")
    if any(v < 0 for v in params.values()):
        raise FaultSpecError(f"fault {spec!r}: parameters must be non-negative")
    return Fault(kind, tuple(sorted(params.items())))


def _example(kind: str) -> str:
    return {
        "straggler": "straggler:rank=1,ms=80",
        "slow_data": "slow_data:ms=40",
        "small_batch": "small_batch:global=8",
        "slow_transport": "slow_transport:mbps=100",
        "lost_rank": "lost_rank:rank=1,step=2 or lost_rank:rank=1,step=2,exit=1",
        "hang": "hang:rank=1,step=3",
    }.get(kind, kind)


@dataclass(frozen=True)
class RunConfig:
    """Every knob of one profiled DDP run; saved with its result."""

    steps: int = 8  # timed steps; medians over them make the numbers robust to noise
    warmup: int = 2  # untimed steps first (allocations, DDP bucket rebuild, first touch)
    batch: int = 32  # per-rank batch (weak scaling: global batch = batch * world size)
    hidden: int = 256  # width of each Linear: gradients are layers * hidden^2 * 4 bytes
    layers: int = 4
    device_overhead_ms: float = 2.0  # emulated per-layer kernel latency (0 on a GPU)
    device_us_per_sample: float = 150.0  # emulated per-layer cost of one sample (0 on a GPU)
    link_mbps: float = 200.0  # emulated link, megabits/s per rank (0: the machine's own speed)
    bucket_mb: float = 0.25  # DDP bucket cap: one bucket per layer at hidden=256
    loader_probe_batches: int = 3  # batches read by the loader alone, before training
    backend: str = "auto"  # "gloo", "nccl" or "auto" (nccl when CUDA is present)
    seed: int = 0
    timeout_s: float = 120.0  # a rank silent this long is reported lost
    pg_timeout_s: float = 0.0  # the process group's own timeout (0: longer than timeout_s)
    stack_dump_s: float = 0.0  # a step this long dumps every rank's stacks (0: no dumps)
    trace: bool = False  # write a torch.profiler trace of rank 0's timed steps and summarise it
    faults: tuple[Fault, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.pg_timeout_s < 0 or self.stack_dump_s < 0:
            raise RunConfigError("pg_timeout_s and stack_dump_s must be non-negative (0: off)")
        if self.stack_dump_s and self.pg_timeout_s and self.stack_dump_s >= self.pg_timeout_s:
            raise RunConfigError(
                f"stack_dump_s={self.stack_dump_s:g} must be shorter than pg_timeout_s="
                f"{self.pg_timeout_s:g}: the timeout ends the waiting ranks before they dump"
            )

    @classmethod
    def for_gpu(cls, **changes: Any) -> RunConfig:
        """No emulation: real kernels and the real interconnect, a model big enough to time."""
        base: dict[str, Any] = dict(  # any field may be changed, each checked by `cls`
            hidden=4096,
            layers=8,
            batch=64,
            device_overhead_ms=0.0,
            device_us_per_sample=0.0,
            link_mbps=0.0,
            bucket_mb=25.0,
            steps=20,
            warmup=5,
        )
        base.update(changes)
        return cls(**base)

    def link_bytes_per_s(self) -> float | None:
        """The all-reduce rate cap in bytes/s (the slower of the link and a slow transport)."""
        slow = self.fault("slow_transport")
        rates = [r for r in (self.link_mbps, slow.get("mbps") if slow else 0.0) if r > 0]
        return min(rates) * 1e6 / 8 if rates else None

    def fault(self, kind: str) -> Fault | None:
        """The injected fault of this kind, or None."""
        return next((f for f in self.faults if f.kind == kind), None)

    def rank_batch(self, world_size: int) -> int:
        """Per-rank batch at this world size (shrinks under ``small_batch``)."""
        small = self.fault("small_batch")
        if small is None:
            return self.batch
        return max(1, int(small.get("global")) // world_size)

    def with_faults(self, *specs: str) -> RunConfig:
        return replace(self, faults=self.faults + tuple(parse_fault(s) for s in specs))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["faults"] = [str(f) for f in self.faults]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["faults"] = tuple(parse_fault(s) for s in known.get("faults", ()))
        return cls(**known)
