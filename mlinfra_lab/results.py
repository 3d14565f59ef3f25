"""Where the course's committed benchmark results are, in a checkout or an installed wheel.

Contract: `results_dir()` is the folder of the measurements committed with the course (the
JSON files and logs of the repository's ``benchmarks/results/``); `committed(pattern)` lists
the files there matching a glob pattern, sorted by name (a date in a name sorts oldest
first). Both work from a source checkout and from ``pip install mlinfra-lab`` (Colab),
whatever the working directory.

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
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["committed", "results_dir"]

_PACKAGE = Path(__file__).resolve().parent
_SHIPPED = _PACKAGE / "_results"
_CHECKOUT = _PACKAGE.parent / "benchmarks" / "results"


def results_dir() -> Path:
    """The folder of committed results: the wheel's copy, else the repository's."""
    return _SHIPPED if _SHIPPED.is_dir() else _CHECKOUT


def committed(pattern: str = "*.json") -> list[Path]:
    """Committed result files matching `pattern` (e.g. ``"h200-attention-*.json"``), by name."""
    return sorted(results_dir().glob(pattern))
