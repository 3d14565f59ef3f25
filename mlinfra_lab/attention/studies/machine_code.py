"""Read the machine code (SASS) a kernel runs, without a GPU: where it waits for its matmuls.

Contract: `disassemble(compiled)` returns the SASS instructions of a kernel Triton compiled
for an NVIDIA GPU (a ``CompiledKernel``, such as `_gluon_fwd.compile_for_hopper` returns),
one per line, using the ``nvdisasm`` that ships with Triton; it raises `MachineCodeError`
when there is no cubin or no disassembler. `schedule(lines)` condenses them to the events
that decide an overlap, with run lengths ("Mx24 W1 Ex44 W0 Ex24"): ``M`` a Tensor Core matmul
instruction (``HGMMA``), ``W<n>`` a wait until at most n groups of matmuls are in flight
(``WARPGROUP.DEPBAR.LE``), ``E`` an exp2 (``MUFU.EX2``), ``S``/``L`` a register spill stored
or loaded (``STL``/``LDL``). `softmax_in_flight(lines)` is the share of the main loop's
exp2s that run between its first ``W1`` and the next wait: the softmax that runs while
``P V`` is still on the Tensor Cores. `multiplies_under_qk(lines)` counts the float32
multiplies (``FMUL``, O's rescale) issued after the main loop's first matmul and before its
``W1``: the rescale that runs while ``S = Q K^T`` is on the Tensor Cores (the ``-er`` forms).

Design decisions:
- The PTX is not the schedule. ptxas allocates registers and orders instructions, and may
  place a wait earlier than the PTX did: when the softmax's new values are given registers
  an in-flight ``wgmma`` still reads, or an instruction that needs that matmul finished is
  moved ahead of the softmax, it must wait for the matmul first. Version 5's PTX has
  ``wait_group 1``, the softmax, then ``wait_group 0``; its SASS can still wait before the
  softmax, and then the overlap is gone. Only the SASS says which happened.
- Text in, text out: the events are read from the disassembly with regular expressions, so a
  test or a chapter cell can show and check a schedule on any machine with Triton installed.
- Only version 5's loop shape is understood (one ``W1`` per iteration); other kernels get
  their schedule string, and `softmax_in_flight` returns None when there is no ``W1``.
- `forward_schedules([(head_dim, causal, config), ...])` builds version 5 for sm_90 in a
  child Python without the Triton interpreter (a notebook on a CPU has it switched on, and
  an interpreted kernel has no machine code), so a chapter can read the SASS anywhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "MachineCodeError",
    "disassemble",
    "forward_schedule",
    "forward_schedules",
    "multiplies_under_qk",
    "register_a_matmuls",
    "schedule",
    "softmax_in_flight",
]

_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*(?:/\*|$)")


class MachineCodeError(MlinfraError, RuntimeError):
    """No SASS to read: the kernel has no cubin, or Triton ships no nvdisasm here."""


def _nvdisasm() -> Path:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    if not tool.is_file():
        raise MachineCodeError(
            f"no nvdisasm at {tool}: install a Triton wheel with the NVIDIA backend "
            "(pip install triton), which ships it"
        )
    return tool


def disassemble(compiled: Any) -> list[str]:
    """The SASS instructions of a compiled kernel, one string each (predicate included)."""
    cubin = getattr(compiled, "asm", {}).get("cubin")
    if not cubin:
        raise MachineCodeError(
            "this kernel has no cubin: compile it for an NVIDIA target (e.g. "
            "_gluon_fwd.compile_for_hopper), not for the CPU interpreter"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        done = subprocess.run(
            [str(_nvdisasm()), "-c", str(path)], capture_output=True, text=True, check=False
        )
    if done.returncode:
        raise MachineCodeError(f"nvdisasm failed: {done.stderr.strip()[:300]}")
    out = []
    for line in done.stdout.splitlines():
        match = _INSTRUCTION.search(line)
        if match and match.group(1):
            out.append(re.sub(r"\s+", " ", match.group(1)).strip())
    return out


def _opcode(instruction: str) -> str:
    """The instruction without its predicate (``@P0``, ``@!UP1``)."""
    return re.sub(r"^@!?U?P\w+\s+", "", instruction)


def _event(instruction: str) -> str | None:
    op = _opcode(instruction)
    if op.startswith("HGMMA"):
        return "M"
    if op.startswith("WARPGROUP.DEPBAR.LE"):
        return "W" + str(int(op.rsplit("0x", 1)[-1].strip(" ;"), 16))
    if op.startswith("MUFU.EX2"):
        return "E"
    if op.startswith("STL"):
        return "S"
    if op.startswith("LDL"):
        return "L"
    return None


def _events(lines: list[str]) -> list[str]:
    return [e for e in map(_event, lines) if e is not None]


def schedule(lines: list[str]) -> str:
    """The matmul, wait, exp2 and spill events of `lines`, in order, with run lengths."""
    runs: list[list[Any]] = []
    for event in _events(lines):
        if runs and runs[-1][0] == event:
            runs[-1][1] += 1
        else:
            runs.append([event, 1])
    return " ".join(f"{e}x{n}" if n > 1 else e for e, n in runs)


def register_a_matmuls(lines: list[str]) -> int:
    """How many matmul instructions read their A operand from registers (``HGMMA ... Rd, Ra,
    gdesc``) rather than from shared memory (``HGMMA ... Rd, gdesc, gdesc``)."""
    return sum(bool(re.search(r"HGMMA\.\S+ R\d+, R\d+,", line)) for line in lines)


def softmax_in_flight(lines: list[str]) -> float | None:
    """Of the exp2s between the main loop's first ``W1`` and its last matmul issue (one
    iteration), the share that runs before the next wait: while ``P V`` is in flight.
    None when the code never waits with a matmul in flight (no ``W1``)."""
    events = _events(lines)
    if "W1" not in events:
        return None
    start = events.index("W1")
    during = after = 0
    waited = False
    for event in events[start + 1 :]:
        if event == "M":
            break  # the next iteration's (or the epilogue's) matmuls
        if event.startswith("W"):
            waited = True
        elif event == "E":
            if waited:
                after += 1
            else:
                during += 1
    total = during + after
    return during / total if total else 0.0


def multiplies_under_qk(lines: list[str]) -> int | None:
    """The ``FMUL``s between the main loop's first matmul instruction and its first ``W1``
    (the loop's first wait with a matmul in flight): multiplies issued while ``S = Q K^T``
    runs. None when the code never waits with a matmul in flight (no ``W1``)."""
    marks = []
    for line in lines:
        event = _event(line)
        if event is None and _opcode(line).startswith("FMUL"):
            event = "F"
        if event is not None:
            marks.append(event)
    if "W1" not in marks:
        return None
    end = marks.index("W1")
    start = max((i for i in range(end) if marks[i].startswith("W")), default=-1) + 1
    first_matmul = next((i for i in range(start, end) if marks[i] == "M"), end)
    return marks[first_matmul:end].count("F")


_CHILD = """
import json, sys
from mlinfra_lab.attention import _gluon_fwd as g
from mlinfra_lab.attention.studies import machine_code as mc
for args in json.loads(sys.argv[1]):
    cfg = g.GluonConfig(**args["config"])
    kernel = g.compile_for_hopper(args["head_dim"], args["causal"], cfg)
    lines = mc.disassemble(kernel)
    print(json.dumps({"config": cfg.name, "head_dim": args["head_dim"], "causal": args["causal"],
                      "schedule": mc.schedule(lines),
                      "softmax_in_flight": mc.softmax_in_flight(lines),
                      "register_a_matmuls": mc.register_a_matmuls(lines),
                      "multiplies_under_qk": mc.multiplies_under_qk(lines),
                      "smem_bytes": kernel.metadata.shared}))
"""


def forward_schedules(builds: list[tuple[int, bool, Any]]) -> list[dict[str, Any]]:
    """Version 5 built for sm_90 here, no GPU needed, once per ``(head_dim, causal, config)``
    (`config` a `_gluon_fwd.GluonConfig`), all in one child process: each build's SASS
    `schedule`, `softmax_in_flight`, `register_a_matmuls`, `multiplies_under_qk` and shared
    memory. Raises `MachineCodeError` when a build fails (a Triton without Gluon, or without
    its NVIDIA tools)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    arg = json.dumps([{"head_dim": d, "causal": c, "config": asdict(cfg)} for d, c, cfg in builds])
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, arg],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    rows = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode or len(rows) != len(builds):
        raise MachineCodeError(
            "could not build version 5 for sm_90 here (it needs Triton >= 3.6 with its NVIDIA "
            f"backend): {done.stderr.strip()[-400:]}"
        )
    return rows


def forward_schedule(head_dim: int, causal: bool, config: Any) -> dict[str, Any]:
    """`forward_schedules` for one build."""
    return forward_schedules([(head_dim, causal, config)])[0]
