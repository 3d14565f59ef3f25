"""Grading-time randomness: hidden tests draw their inputs from a seed the instructor holds.

Contract: `grading_seed(exercise)` is a 63-bit integer and `grading_rng(exercise)` a NumPy
generator seeded with it, both derived from the grading secret (the environment variable
``MLINFRA_GRADE_SECRET``, else `DEFAULT_SECRET`) and the exercise's name. The same secret and
exercise give the same numbers in every process; another secret gives other numbers.

Design decisions:
- A hidden test that a student has read (an old release, a leaked source) is only a recipe:
  its inputs come from `grading_rng`, so answers hard-coded for the inputs seen under the
  default secret fail when the instructor grades with ``mlinfra-lab grade --secret S``.
- The secret never enters a grading kernel: it keys the gradebook's seal, so a
  kernel that read it could rewrite the gradebook and re-seal it. The grading process
  derives each exercise's seed itself (`seed_table`, for the exercises of the notebook's
  grader cells and every name their text passes to `grading_rng` / `grading_seed`, see
  `seeded_names`) and hands the kernel only that table (``$MLINFRA_GRADE_SEEDS``); in such a
  kernel `grading_seed` reads the table and refuses a name it lacks (`GradingSeedError`)
  instead of falling back to the public default. Code in the kernel can read the seeds:
  knowing the inputs does not give the outputs, and a seed does not give the secret
  (SHA-256 is one-way).
- The seed mixes in the exercise name (SHA-256 of ``secret NUL exercise``), so exercises
  draw independent inputs and adding an exercise changes no other exercise's inputs.
- `release`, `validate` and a student's own run use `DEFAULT_SECRET`: the hidden tests must
  pass on the solutions whatever the secret, which `validate --secret` can check.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .errors import GradingError
from .pyparse import parse

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_SECRET",
    "SECRET_ENV",
    "SEEDS_ENV",
    "GradingSeedError",
    "current_secret",
    "grading_rng",
    "grading_seed",
    "seed_table",
    "seeded_names",
]

SECRET_ENV = "MLINFRA_GRADE_SECRET"
SEEDS_ENV = "MLINFRA_GRADE_SEEDS"  # a grading kernel's seeds: JSON {exercise: seed}
DEFAULT_SECRET = "mlinfra-release"
_SEEDING = ("grading_rng", "grading_seed")


class GradingSeedError(GradingError):
    """A grading kernel was asked for the seed of an exercise its seed table lacks."""


def current_secret() -> str:
    """The grading secret of this process: ``$MLINFRA_GRADE_SECRET``, else the default."""
    return os.environ.get(SECRET_ENV) or DEFAULT_SECRET


def grading_seed(exercise: str, secret: str | None = None) -> int:
    """A 63-bit seed for `exercise`'s hidden inputs under `secret` (default: `current_secret`)."""
    if not isinstance(exercise, str) or not exercise:
        raise ValueError("grading_seed needs the exercise name, e.g. grading_seed('log_softmax')")
    table = os.environ.get(SEEDS_ENV) if secret is None else None
    if table is not None:  # a grading kernel: seeds only, never the secret (see docstring)
        seed = json.loads(table).get(exercise)
        if not isinstance(seed, int):
            raise GradingSeedError(
                f"no grading seed for exercise {exercise!r} in this kernel: grading derives "
                "seeds for the exercises of the grader cells and the names their text passes "
                "to grading_rng; pass the name as a string literal"
            )
        return seed
    key = f"{current_secret() if secret is None else secret}\0{exercise}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1


def grading_rng(exercise: str, secret: str | None = None) -> np.random.Generator:
    """A NumPy generator for `exercise`'s hidden inputs (see `grading_seed`)."""
    import numpy as np

    return np.random.default_rng(grading_seed(exercise, secret))


def seeded_names(text: str) -> set[str]:
    """The string literals `text` passes first to ``grading_rng`` / ``grading_seed``."""
    try:
        tree = parse(text)
    except (SyntaxError, ValueError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if called in _SEEDING and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def seed_table(exercises: Iterable[str], secret: str) -> str:
    """The ``$MLINFRA_GRADE_SEEDS`` value for `exercises` under `secret` (see docstring)."""
    return json.dumps(
        {name: grading_seed(name, secret) for name in sorted(set(exercises)) if name},
        sort_keys=True,
    )
