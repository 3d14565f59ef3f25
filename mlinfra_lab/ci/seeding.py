"""Seed every random source from one base seed, and switch on deterministic kernels.

Contract: ``seed_everything(seed)`` seeds Python's ``random``, NumPy's global generator and
torch (CPU and every CUDA device) from one base seed and returns the per-library seeds it
derived; ``deterministic()`` turns on deterministic kernels for the duration of a ``with``
block and restores the previous settings afterwards.

Design decisions:
- Each library gets its own seed, derived from the base seed and the library's name by a
  hash (``derive_seed``), not the base seed itself: two sources seeded with the same integer
  produce correlated streams (NumPy's and torch's Mersenne twisters would start from the
  same state). Components that own a generator (a data-augmentation step, a sampler) take
  ``derive_seed(base, "<their name>")`` the same way, so one integer reproduces a run.
- ``RNG_SOURCES`` names the global sources and how to seed each one; ``reseed(name, value)``
  re-seeds a single source. ``find_unseeded_source`` uses it to pin sources one subset at
  a time.
- ``deterministic()`` is a context manager rather than a global switch, because the flags
  cost speed on a GPU: CI runs are tiny, so CI pays the price; a benchmark does not.

Caveats:
- Seeding makes the *same* program on the *same* machine repeat itself. It does not make
  floats agree across CPU generations, thread counts or library versions: summation order
  changes the last bits. Compare such numbers with tolerances (``references.py``).
- ``torch.use_deterministic_algorithms(True)`` raises at run time for an operation that has
  no deterministic implementation; that error is the point (it names the operation).

References: PyTorch "Reproducibility" notes (torch.backends.cudnn, CUBLAS_WORKSPACE_CONFIG).
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "RNG_SOURCES",
    "UnknownSourceError",
    "derive_seed",
    "deterministic",
    "reseed",
    "seed_everything",
]

# The global random sources a training script usually draws from, in the order they are
# seeded. Components with their own generator (the augmentation) are not global: they
# are seeded where they are built, from derive_seed(base, name).
RNG_SOURCES: tuple[str, ...] = ("python", "numpy", "torch")

# cuBLAS needs a fixed workspace to give deterministic GEMMs on CUDA >= 10.2.
CUBLAS_WORKSPACE = ":4096:8"


class UnknownSourceError(MlinfraError, KeyError):
    """Raised by `reseed` for a source name that is not in `RNG_SOURCES`."""


def derive_seed(base: int, name: str) -> int:
    """A 32-bit seed for the component `name`, derived from `base` (stable across runs).

    Uses SHA-256, not ``hash()``: string hashing is salted per process unless
    ``PYTHONHASHSEED`` is set, which would make the derived seed itself a flake.
    """
    digest = hashlib.sha256(f"{int(base)}:{name}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _seed_python(value: int) -> None:
    random.seed(value)


def _seed_numpy(value: int) -> None:
    import numpy as np

    np.random.seed(value)


def _seed_torch(value: int) -> None:
    import torch

    torch.manual_seed(value)  # seeds the CPU generator and every CUDA device's
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(value)


_SEEDERS: dict[str, Callable[[int], None]] = {
    "python": _seed_python,
    "numpy": _seed_numpy,
    "torch": _seed_torch,
}


def reseed(name: str, value: int) -> None:
    """Seed the one global source `name` ("python", "numpy" or "torch") with `value`."""
    try:
        seeder = _SEEDERS[name]
    except KeyError:
        raise UnknownSourceError(
            f"unknown random source {name!r}; known sources: {', '.join(RNG_SOURCES)}"
        ) from None
    seeder(value)


def seed_everything(seed: int) -> dict[str, int]:
    """Seed Python, NumPy and torch (CPU and CUDA) from `seed`; return the derived seeds.

    The returned dict maps each source of `RNG_SOURCES` to the seed it received, so a run
    can save it with its results.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    seeds = {name: derive_seed(seed, name) for name in RNG_SOURCES}
    for name, value in seeds.items():
        reseed(name, value)
    return seeds


@contextmanager
def deterministic(warn_only: bool = False) -> Iterator[None]:
    """Deterministic kernels inside the block; the previous settings are restored after.

    Sets ``torch.use_deterministic_algorithms(True)``, cuDNN ``deterministic=True`` and
    ``benchmark=False`` (autotuning picks kernels by timing, so it may pick differently
    each run) and ``CUBLAS_WORKSPACE_CONFIG``. With ``warn_only=True`` an operation without
    a deterministic implementation warns instead of raising.
    """
    import torch

    saved_algorithms = torch.are_deterministic_algorithms_enabled()
    saved_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    saved_cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    saved_env = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved_env or CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved_algorithms, warn_only=saved_warn_only)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved_cudnn
        if saved_env is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved_env
