"""Where the course's committed benchmark results are, in a checkout or an installed wheel.

Contract: `results_dir()` is the folder of the measurements committed with the course (the
JSON files and logs of the repository's ``benchmarks/results/``); `committed(pattern)` lists
the files there matching a glob pattern, sorted by name (a date in a name sorts oldest
first). Both work from a source checkout and from ``pip install mlinfra-lab`` (Colab),
whatever the working directory. `default_out(device, topic)` is where a ``mlinfra-lab bench``
target writes when given no ``--out FILE``: ``benchmarks/results/DEVICE-TOPIC-YYYY-MM-DD.json``
under the working directory (`device_label` spells DEVICE).

Decisions:
- ``benchmarks/results/`` is the only copy in git. The wheel ships it as the data folder
  ``mlinfra_lab/_results/`` (pyproject.toml maps that package onto it), so no build step
  copies files and nothing is duplicated.
- The shipped copy is looked for first: it exists only in an installed wheel, where the
  checkout path (two levels above this file) points into site-packages. In a checkout or
  an editable install only the repository's folder exists.
- When neither exists (a wheel built without the results), `results_dir()` still returns
  the checkout path: globbing a missing folder finds nothing, so callers print their
  "nothing committed" message instead of raising.
- One file-name scheme for every benchmark: DEVICE first (``cpu``, ``h200``: what a reader
  filters by), then TOPIC (the bench target's name), then the UTC date as ``YYYY-MM-DD`` (so
  names sort by date). DEVICE is the device the benchmark measures, so a CPU-only benchmark
  (the staleness simulator, the tracking store) says ``cpu`` on a GPU machine too.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

__all__ = ["committed", "default_out", "device_label", "results_dir"]

_PACKAGE = Path(__file__).resolve().parent
_SHIPPED = _PACKAGE / "_results"
_CHECKOUT = _PACKAGE.parent / "benchmarks" / "results"


def results_dir() -> Path:
    """The folder of committed results: the wheel's copy, else the repository's."""
    return _SHIPPED if _SHIPPED.is_dir() else _CHECKOUT


def committed(pattern: str = "*.json") -> list[Path]:
    """Committed result files matching `pattern` (e.g. ``"h200-attention-*.json"``), by name."""
    return sorted(results_dir().glob(pattern))


def device_label(device_name: str | None) -> str:
    """DEVICE of a result file name: ``cpu`` for None or ``"cpu"``, else the GPU's name in
    lower case without its vendor, spaces as dashes (``"NVIDIA H200"`` -> ``"h200"``), as the
    Makefile's ``GPU_NAME`` spells it."""
    if not device_name or device_name.lower() == "cpu":
        return "cpu"
    return device_name.removeprefix("NVIDIA ").strip().replace(" ", "-").lower()


def default_out(device: str, topic: str, date: str | None = None) -> Path:
    """``benchmarks/results/DEVICE-TOPIC-YYYY-MM-DD.json``, relative to the working directory.

    `date`: an ISO date or timestamp (its first 10 characters are used); default: today (UTC).
    """
    day = (date or datetime.now(timezone.utc).isoformat())[:10]
    return Path("benchmarks") / "results" / f"{device}-{topic}-{day}.json"
