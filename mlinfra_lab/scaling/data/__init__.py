"""Committed example runs of chapter 2 and its lab, measured with gloo on a 2-core CPU.

Contract: `example_path(name)` is the path of one file here (``cpu-w4-straggler.json``,
``mystery-a.json``, ...); `examples()` lists them. The files were written by
`mlinfra_lab.scaling.profile` with `RunConfig(steps=6, warmup=2)`: ``cpu-w{N}-clean`` at
1, 2 and 4 ranks, ``cpu-w4-{fault}`` with one injected fault each, ``cpu-allreduce-w{N}``
the all-reduce sweep over the same emulated 200 Mbit/s link, and ``mystery-*`` the lab's
4-rank runs whose injected fault was removed from their config.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["example_path", "examples"]

_HERE = Path(__file__).parent


def examples() -> list[str]:
    """Names of the committed example files."""
    return sorted(p.name for p in _HERE.glob("*.json"))


def example_path(name: str) -> Path:
    """Path of a committed example file; raises FileNotFoundError listing the names."""
    path = _HERE / name
    if not path.is_file():
        raise FileNotFoundError(f"no example {name!r}; available: {', '.join(examples())}")
    return path
