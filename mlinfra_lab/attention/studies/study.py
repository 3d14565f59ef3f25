"""Chapter 1's reader of committed H200 benchmark runs: which runs timed the default kernel.

Contract: `default_kernel_runs()` lists the committed attention benchmark runs whose ``ours``
forward rows ran `flash.DEFAULT_VERSION`, oldest first by the run's own ``date``;
`newest_default_run()` is the newest of them and raises `NoDefaultRunError` when there is
none; `default_only(run)` keeps the default kernel and the anchors (no ``ours_vN`` A/B rows);
`roofline(run)` places each forward shape of the default kernel under the run's measured
matmul ceiling and the device's HBM bandwidth. `taught_run()` is the newest committed run of
the kernels chapter 1 teaches (forward version 1, the Triton split backward), its rows
relabelled ``ours`` so every reader and plot above takes it; `NoTaughtRunError` when none.

Design decisions:
- A run is selected by what it recorded, never by its file name: every ``ours`` row keeps
  the kernel that ran in ``tiles`` (``"v5 gluon overlap-m128n64w4s2"``, ``"v1 BLOCK_M: 128,
  ..."``); files written before that prefix existed hold version 1 only (the kernel then had
  one version), so an unprefixed forward tile reads as version 1.
- The default kernel is a dispatch, not one kernel: version 5 where its table gives it the
  shape, version 1 elsewhere (causal D=64 at 1k tokens on the H200). A run counts as the
  default kernel's when its ``ours`` rows were launched with no version named, which the
  benchmark's ``ours`` provider does, and at least one of them ran `DEFAULT_VERSION`.
- HBM bandwidth is a datasheet number (`HBM_BYTES_PER_S`), not a measurement: the roofline's
  slanted roof says so in its label; a GPU missing from the table gets no slanted roof. The
  flat roof is the bf16 matmul measured in the run.
- Runs of any GPU count: the newest default-kernel run is the one shown, with its device
  named beside it; a baseline is only ever of the same GPU (`baseline_for`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlinfra_lab import results
from mlinfra_lab.attention.flash import DEFAULT_VERSION
from mlinfra_lab.attention.traffic import attention_flops, hbm_traffic
from mlinfra_lab.errors import MlinfraError

__all__ = [
    "BF16_FLOPS_PER_S",
    "HBM_BYTES_PER_S",
    "NoDefaultRunError",
    "NoTaughtRunError",
    "default_kernel_runs",
    "baseline_for",
    "committed_baselines",
    "default_only",
    "newest_default_run",
    "newest_run_with",
    "provenance",
    "roofline",
    "row_version",
    "run_versions",
    "taught_run",
]

# Peak HBM bandwidth from the vendors' datasheets (bytes/s), by torch's device name: the H200
# (HBM3e) and the H100 SXM (80 GB HBM3; the PCIe card's HBM2e is slower).
HBM_BYTES_PER_S = {"NVIDIA H200": 4.8e12, "NVIDIA H100 80GB HBM3": 3.35e12}
# Dense bf16 Tensor Core peak from the same datasheets (FLOP/s): both are the same Hopper die.
BF16_FLOPS_PER_S = {"NVIDIA H200": 989e12, "NVIDIA H100 80GB HBM3": 989e12}
_VERSION = re.compile(r"^v(\d+)\b")


class NoDefaultRunError(MlinfraError, LookupError):
    """No committed benchmark run timed the default kernel version."""


class NoTaughtRunError(MlinfraError, LookupError):
    """No committed benchmark run timed the taught kernels (version 1, split backward)."""


TAUGHT_PROVIDER = "ours_v1"


def row_version(row: dict[str, Any]) -> int | None:
    """The forward kernel version a benchmark row ran, from its ``tiles`` record (None for a
    row that has no forward tile: a backward row, an anchor, a failed shape)."""
    if row.get("mode") != "fwd" or not row.get("tiles"):
        return None
    found = _VERSION.match(row["tiles"])
    if found:
        return int(found.group(1))
    return 1 if row["tiles"].startswith("BLOCK_M") else None


def run_versions(run: dict[str, Any], provider: str = "ours") -> set[int]:
    """The forward kernel versions that `provider`'s rows of `run` ran."""
    return {v for r in run.get("rows", []) if r["provider"] == provider and (v := row_version(r))}


def _attention_runs(pattern: str) -> Iterator[dict[str, Any]]:
    """Every committed attention benchmark run matching `pattern`, with ``file`` added; files
    that are not such a run (another benchmark, unreadable JSON) are passed over."""
    for path in results.committed(pattern):
        try:
            run = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(run, dict) and run.get("benchmark") == "attention":
            yield {**run, "file": Path(path).name}


def default_kernel_runs(pattern: str = "*.json") -> list[dict[str, Any]]:
    """Committed, complete attention benchmark runs whose ``ours`` rows ran the default
    version, oldest first by their ``date``; each has ``file`` (its name) added."""
    runs = []
    for run in _attention_runs(pattern):
        if run.get("complete") is False or DEFAULT_VERSION not in run_versions(run):
            continue
        runs.append(run)
    return sorted(runs, key=lambda r: r["date"])


def newest_default_run(pattern: str = "*.json") -> dict[str, Any]:
    """The newest committed run of the default kernel; `NoDefaultRunError` when none exists."""
    runs = default_kernel_runs(pattern)
    if not runs:
        raise NoDefaultRunError(
            f"no committed benchmark run timed kernel version {DEFAULT_VERSION} (the default); "
            "run `mlinfra-lab bench attention` on a Hopper GPU and commit its file under "
            "benchmarks/results/"
        )
    return runs[-1]


def default_only(run: dict[str, Any]) -> dict[str, Any]:
    """A copy of `run` without the ``ours_vN``/``ours_atomic`` A/B rows: the default kernel
    (``ours``) and the anchors only, so a table or plot of it shows nothing else of ours."""
    out = copy.deepcopy(run)
    keep = [p for p in out["config"]["providers"] if p == "ours" or not p.startswith("ours_")]
    out["config"]["providers"] = keep
    out["rows"] = [r for r in out["rows"] if r["provider"] in keep]
    out["ratios"] = [
        {k: v for k, v in e.items() if not k.startswith("vs_ours_")} for e in out["ratios"]
    ]
    return out


def provenance(run: dict[str, Any]) -> str:
    """One line: file, device, torch, Triton, date and the kernel versions ``ours`` ran."""
    dev = run["device"]
    versions = ", ".join(f"v{v}" for v in sorted(run_versions(run)))
    return (
        f"{run.get('file', '?')} | {dev['device_name']}, torch {dev['torch']}, "
        f"Triton {dev['triton']}, {run['date'][:16]} | ours ran {versions}"
    )


def roofline(run: dict[str, Any], dtype_bytes: int = 2) -> list[dict[str, Any]]:
    """Each forward shape of ``ours``: arithmetic intensity (FLOPs per byte of the fused
    traffic floor, Q, K, V read once and O written once), measured TFLOP/s, and the roof
    there (the lower of the run's matmul ceiling and intensity x HBM bandwidth)."""
    bandwidth = HBM_BYTES_PER_S.get(run["device"]["device_name"])
    out = []
    for r in run["rows"]:
        if r["provider"] != "ours" or r["mode"] != "fwd" or not r["tflops"]:
            continue
        flops = attention_flops(
            r["batch"], r["heads"], r["seq"], r["seq"], r["head_dim"], r["causal"]
        )
        moved = hbm_traffic(r["batch"], r["heads"], r["seq"], r["head_dim"], dtype_bytes, True)
        intensity = flops / moved
        memory_roof = intensity * bandwidth / 1e12 if bandwidth else float("inf")
        out.append(
            {
                "seq": r["seq"],
                "head_dim": r["head_dim"],
                "causal": r["causal"],
                "version": row_version(r),
                "intensity": intensity,
                "tflops": r["tflops"],
                "roof": min(run["matmul_tflops"], memory_roof),
            }
        )
    return out


def newest_run_with(providers: tuple[str, ...], pattern: str = "*.json") -> dict[str, Any]:
    """The newest committed, complete attention benchmark run that timed every one of
    `providers` (anchors such as ``sdpa_efficient`` that a default-kernel run may leave out);
    `NoDefaultRunError` when none did."""
    found = []
    for run in _attention_runs(pattern):
        timed = {r["provider"] for r in run.get("rows", []) if r.get("tflops")}
        if run.get("complete") is not False and set(providers) <= timed:
            found.append(run)
    if not found:
        raise NoDefaultRunError(
            f"no committed benchmark run timed all of {', '.join(providers)}; run "
            f"`mlinfra-lab bench attention --providers {','.join(providers)}` on a GPU"
        )
    return max(found, key=lambda r: r["date"])


def committed_baselines() -> list[dict[str, Any]]:
    """The regression baselines ``mlinfra-lab bench attention --check-baseline`` reads, from
    the repository's ``benchmarks/baselines/`` (each with ``file`` added; empty outside a
    checkout)."""
    folder = results.results_dir().parent / "baselines"
    return [{**json.loads(p.read_text()), "file": p.name} for p in sorted(folder.glob("*.json"))]


def baseline_for(run: dict[str, Any]) -> dict[str, Any]:
    """The newest committed baseline of the default kernel on `run`'s GPU: the guard compares
    a kernel with its own earlier timing on the same card, never with another version's or
    another GPU's. `NoDefaultRunError` when there is none."""
    name = run["device"]["device_name"]
    found = [
        b
        for b in committed_baselines()
        if b.get("device", {}).get("device_name") == name and DEFAULT_VERSION in run_versions(b)
    ]
    if not found:
        raise NoDefaultRunError(
            f"no committed baseline in benchmarks/baselines/ timed kernel version "
            f"{DEFAULT_VERSION} on an {name}; copy a default-kernel run of that GPU there"
        )
    return max(found, key=lambda b: b["date"])


def _split_backward(row: dict[str, Any]) -> bool:
    """A backward row whose tiles name the Triton split kernels (``"dkdv: ...; dq: ..."``)."""
    return row.get("mode") == "bwd" and str(row.get("tiles") or "").startswith("dkdv:")


def taught_run(pattern: str = "*.json") -> dict[str, Any]:
    """The newest committed run that timed `TAUGHT_PROVIDER` with the split backward, as a
    copy whose ``ours_v1`` rows read ``ours`` (ratios recomputed), with ``file`` added. A run
    cut off before its last shapes (``complete: false``) is taken: its rows are measurements;
    the reader says which shapes it lacks."""
    from mlinfra_lab.attention.bench import ratios

    found = []
    for run in _attention_runs(pattern):
        rows = [r for r in run.get("rows", []) if r["provider"] == TAUGHT_PROVIDER]
        if rows and all(_split_backward(r) for r in rows if r["mode"] == "bwd" and r["tflops"]):
            found.append(run)
    if not found:
        raise NoTaughtRunError(
            "no committed benchmark run timed the taught kernels; on a Hopper GPU run "
            "`MLINFRA_ATTENTION_BACKWARD=split mlinfra-lab bench attention --providers "
            "ours_v1,sdpa_flash,sdpa_cudnn,flex` and commit its file under benchmarks/results/"
        )
    run = copy.deepcopy(max(found, key=lambda r: r["date"]))
    keep = [p for p in run["config"]["providers"] if not p.startswith("ours")]
    run["config"]["providers"] = ["ours", *keep]
    run["rows"] = [
        {**r, "provider": "ours"} if r["provider"] == TAUGHT_PROVIDER else r
        for r in run["rows"]
        if r["provider"] == TAUGHT_PROVIDER or not r["provider"].startswith("ours")
    ]
    run["ratios"] = ratios(run["rows"])
    return run
