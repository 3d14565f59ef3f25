"""Read a `torch.profiler` Chrome trace: compute against communication, and its top operators.

Contract: `summarise_trace(path)` reads a trace written by ``profiler.export_chrome_trace``
and returns seconds of compute, seconds of communication and the communication share, from
GPU kernels when the trace has them, else from top-level CPU operators. `op_table(path, top)`
returns the trace's operators as `OpRow`s (calls, total and self milliseconds, share of the
profiled steps, compute or communication), sorted by self time as
``key_averages().table(sort_by="self_cpu_time_total")`` sorts them; `format_op_table` makes
it a Markdown table (for a terminal or a Markdown file), `op_table_html` an HTML table (for a
notebook or a book page). Both read any such trace, from this harness or from your own job.

Design decisions:
- On a GPU the kernels are the truth: NCCL kernels (``ncclDevKernel_*``, ``ncclKernel_*``)
  are communication, every other kernel is compute. Kernels of different streams overlap,
  so these are busy times per category, not a partition of the wall clock.
- On the CPU there are no kernels: the top-level operators and annotations of each thread
  (those not nested in another; gloo records its collectives as annotations on its own
  threads) are summed, with gloo/c10d collectives as communication; nesting is resolved
  per thread from the events' start and duration, so an op is never counted twice.
- `op_table` reads the file, not the live profiler, so the table of a trace someone sends
  you is the same as the one of your own run. Self time is an event's duration minus that
  of the events nested directly in it on the same thread; the step markers
  (``ProfilerStep#N``) give the wall time of the profiled steps. Events of different
  threads overlap (gloo runs its collectives on its own threads, during the backward of
  the main thread), so shares are of the steps' wall time and do not add up to one; the
  timeline (Perfetto) shows the overlap that a table cannot.
- A notebook shows the HTML table, not the Markdown one: myst-nb renders a cell's Markdown
  output as CommonMark, which has no tables, so a pipe table reaches the book page as text.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["OpRow", "format_op_table", "op_table", "op_table_html", "summarise_trace"]

_STEP = "ProfilerStep#"  # the step markers `profiler.step()` writes
_COMM = (
    "nccl",
    "gloo",
    "allreduce",
    "all_reduce",
    "c10d::",
    "broadcast",
    "reduce_scatter",
    "all_gather",
)


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


def _events(path: str | Path) -> list[dict[str, Any]]:
    """The complete ("X") events of a Chrome trace file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable Chrome trace ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(
            f"{path}: not a Chrome trace (no traceEvents list); write one with "
            "profiler.export_chrome_trace(path)"
        )
    return [
        e
        for e in data["traceEvents"]
        if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e and "ts" in e
    ]


def summarise_trace(path: str | Path) -> dict[str, Any]:
    """Compute vs communication seconds in a Chrome trace from `torch.profiler`."""
    events = _events(path)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    source = "gpu_kernels" if kernels else "cpu_ops"
    chosen = kernels or _top_level(
        [
            e
            for e in events
            if e.get("cat") in ("cpu_op", "user_annotation")
            and not str(e.get("name", "")).startswith(_STEP)
        ]
    )
    comm = sum(e["dur"] for e in chosen if _is_comm(e.get("name", ""))) / 1e6
    compute = sum(e["dur"] for e in chosen if not _is_comm(e.get("name", ""))) / 1e6
    total = comm + compute
    return {
        "source": source,
        "compute_s": compute,
        "comm_s": comm,
        "comm_share": comm / total if total else 0.0,
        "events": len(chosen),
    }


_OPS = (
    "cpu_op",
    "user_annotation",
    "kernel",
    "gpu_user_annotation",
    "gpu_memcpy",
    "gpu_memset",
    "python_function",
)


@dataclass(frozen=True)
class OpRow:
    """One operator of a trace, its calls summed over every thread."""

    name: str
    kind: str  # "communication" or "compute"
    calls: int
    total_ms: float  # sum of its events' durations (children included)
    self_ms: float  # the same minus the events nested directly in them
    step_share: float  # total_ms over the profiled steps' wall time (0 without step markers)


def _self_times(events: list[dict[str, Any]]) -> list[float]:
    """Each event's duration minus its direct children's, children found per thread."""
    selfs = [float(e["dur"]) for e in events]
    by_thread: dict[tuple[Any, Any], list[int]] = {}
    for i, e in enumerate(events):
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(i)
    for idx in by_thread.values():
        stack: list[int] = []  # open events, innermost last
        for i in sorted(idx, key=lambda i: (events[i]["ts"], -events[i]["dur"])):
            ts = events[i]["ts"]
            while stack and ts >= events[stack[-1]]["ts"] + events[stack[-1]]["dur"]:
                stack.pop()
            if stack:
                selfs[stack[-1]] -= events[i]["dur"]
            stack.append(i)
    return selfs


def op_table(path: str | Path, top: int = 10) -> list[OpRow]:
    """The `top` operators of a Chrome trace by self time (all of them when `top` is 0)."""
    if top < 0:
        raise ValueError(f"top must be 0 (all) or more, got {top}")
    events = _events(path)
    steps = [e for e in events if str(e.get("name", "")).startswith(_STEP)]
    wall_us = sum(e["dur"] for e in steps)
    marks = {id(e) for e in steps}
    ops = [e for e in events if e.get("cat") in _OPS and id(e) not in marks]
    rows: dict[str, list[float]] = {}
    for e, self_us in zip(ops, _self_times(ops), strict=True):
        row = rows.setdefault(e["name"], [0, 0.0, 0.0])
        row[0] += 1
        row[1] += e["dur"]
        row[2] += max(self_us, 0.0)
    table = [
        OpRow(
            name,
            "communication" if _is_comm(name) else "compute",
            int(calls),
            total / 1e3,
            self_us / 1e3,
            total / wall_us if wall_us else 0.0,
        )
        for name, (calls, total, self_us) in rows.items()
    ]
    table.sort(key=lambda r: (-r.self_ms, r.name))
    return table[:top] if top else table


def format_op_table(rows: list[OpRow], width: int = 60) -> str:
    """A Markdown table of `op_table` rows (names longer than `width` are shortened)."""
    lines = [
        "| operator | kind | calls | total ms | self ms | of the step |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        name = r.name if len(r.name) <= width else r.name[: width - 3] + "..."
        name = name.replace("|", "\\|")
        lines.append(
            f"| `{name}` | {r.kind} | {r.calls} | {r.total_ms:.2f} | {r.self_ms:.2f} "
            f"| {r.step_share:.0%} |"
        )
    return "\n".join(lines)


def op_table_html(rows: list[OpRow], width: int = 60) -> str:
    """An HTML table of `op_table` rows, for a notebook or a book page (names escaped)."""
    head = ("operator", "kind", "calls", "total ms", "self ms", "of the step")
    cells = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in rows:
        name = r.name if len(r.name) <= width else r.name[: width - 3] + "..."
        values = (f"{r.calls}", f"{r.total_ms:.2f}", f"{r.self_ms:.2f}", f"{r.step_share:.0%}")
        cells.append(
            f"<tr><td><code>{html.escape(name)}</code></td><td>{r.kind}</td>"
            + "".join(f'<td style="text-align: right">{v}</td>' for v in values)
            + "</tr>"
        )
    return '<table class="table">\n' + "\n".join(cells) + "\n</table>"
