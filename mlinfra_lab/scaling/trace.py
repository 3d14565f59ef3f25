"""Summarise a `torch.profiler` Chrome trace into compute time and communication time.

Contract: `summarise_trace(path)` reads a trace written by ``profiler.export_chrome_trace``
and returns seconds of compute, seconds of communication and the communication share, from
GPU kernels when the trace has them, else from top-level CPU operators.

Design decisions:
- On a GPU the kernels are the truth: NCCL kernels (``ncclDevKernel_*``, ``ncclKernel_*``)
  are communication, every other kernel is compute. Kernels of different streams overlap,
  so these are busy times per category, not a partition of the wall clock.
- On the CPU there are no kernels: the top-level operators of each thread (those not nested
  in another) are summed, with gloo/c10d collectives as communication; nesting is resolved
  per thread from the events' start and duration, so an op is never counted twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["summarise_trace"]

_COMM = ("nccl", "gloo", "allreduce", "all_reduce", "c10d::", "broadcast", "reduce_scatter",
         "all_gather")


def _is_comm(name: str) -> bool:
    low = name.lower()
    return any(key in low for key in _COMM)


def _top_level(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in events:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    top = []
    for evs in by_thread.values():
        end = float("-inf")
        for e in sorted(evs, key=lambda e: (e["ts"], -e.get("dur", 0))):
            if e["ts"] >= end:
                top.append(e)
                end = e["ts"] + e.get("dur", 0)
    return top


def summarise_trace(path: str | Path) -> dict[str, Any]:
    """Compute vs communication seconds in a Chrome trace from `torch.profiler`."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable Chrome trace ({err})") from None
    events = [e for e in data.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    source = "gpu_kernels" if kernels else "cpu_ops"
    chosen = kernels or _top_level([e for e in events if e.get("cat") == "cpu_op"])
    comm = sum(e["dur"] for e in chosen if _is_comm(e.get("name", ""))) / 1e6
    compute = sum(e["dur"] for e in chosen if not _is_comm(e.get("name", ""))) / 1e6
    total = comm + compute
    return {"source": source, "compute_s": compute, "comm_s": comm,
            "comm_share": comm / total if total else 0.0, "events": len(chosen)}
