"""Grading-time randomness: hidden tests draw their inputs from a seed the instructor holds.

Contract: `grading_seed(exercise)` is a 63-bit integer and `grading_rng(exercise)` a NumPy
generator seeded with it, both derived from the grading secret (the environment variable
``MLINFRA_GRADE_SECRET``, else `DEFAULT_SECRET`) and the exercise's name. The same secret and
exercise give the same numbers in every process; another secret gives other numbers.

Design decisions:
- A hidden test that a student has read (an old release, a leaked source) is only a recipe:
  its inputs come from `grading_rng`, so answers hard-coded for the inputs seen under the
  default secret fail when the instructor grades with ``mlinfra-lab grade --secret S``.
- The secret reaches the grading kernel through its environment (``grade`` sets it). Code
  in the kernel can read it, but knowing the inputs does not give the outputs: those still
  need a correct solution (and calling the course's own implementation is refused by the
  grader's ``forbid`` list, see `forbid`).
- The seed mixes in the exercise name (SHA-256 of ``secret NUL exercise``), so exercises
  draw independent inputs and adding an exercise changes no other exercise's inputs.
- `release`, `validate` and a student's own run use `DEFAULT_SECRET`: the hidden tests must
  pass on the solutions whatever the secret, which `validate --secret` can check.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DEFAULT_SECRET", "SECRET_ENV", "current_secret", "grading_rng", "grading_seed"]

SECRET_ENV = "MLINFRA_GRADE_SECRET"
DEFAULT_SECRET = "mlinfra-release"


def current_secret() -> str:
    """The grading secret of this process: ``$MLINFRA_GRADE_SECRET``, else the default."""
    return os.environ.get(SECRET_ENV) or DEFAULT_SECRET


def grading_seed(exercise: str, secret: str | None = None) -> int:
    """A 63-bit seed for `exercise`'s hidden inputs under `secret` (default: `current_secret`)."""
    if not isinstance(exercise, str) or not exercise:
        raise ValueError("grading_seed needs the exercise name, e.g. grading_seed('log_softmax')")
    key = f"{current_secret() if secret is None else secret}\0{exercise}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1


def grading_rng(exercise: str, secret: str | None = None) -> np.random.Generator:
    """A NumPy generator for `exercise`'s hidden inputs (see `grading_seed`)."""
    import numpy as np

    return np.random.default_rng(grading_seed(exercise, secret))
