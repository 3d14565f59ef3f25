"""Grade an exercise on its own: run the code under test with earlier exercises' references.

Contract: ``with using_reference(globals(), scaling_efficiency=reference):`` binds each name
of the student's namespace to the given reference for the block and puts back what was
there (or removes a name that was not) when it ends, whatever happened inside.

Design decisions:
- A later exercise that calls an earlier one (lab 2's `name_cause` calls
  `scaling_efficiency`; lab 5's `tune_steepness` calls `staleness_weight`) looks the name
  up in the notebook's globals when it runs; rebinding it there for the grader's block makes
  the later grader check the later code alone, so one wrong early answer costs only its
  own points (graders do not cascade).
- Restored afterwards, so the student's own function is what the rest of their notebook
  runs, and a grader re-run shows their own code again.
- The reference comes from the course package or is written out in the grader; a grader
  with ``forbid`` metadata must not pass a forbidden function here (the guard refuses it).

Caveat: code that captured the earlier function before the block (a default argument, a
closure over it) keeps the student's version; the labs call it by its global name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

__all__ = ["using_reference"]

_MISSING = object()


@contextlib.contextmanager
def using_reference(
    namespace: MutableMapping[str, Any], **references: Callable[..., Any]
) -> Iterator[None]:
    """Bind `references` in `namespace` (a notebook's ``globals()``) for the block."""
    if not references:
        raise TypeError(
            "using_reference needs at least one name=reference, e.g. "
            "using_reference(globals(), scaling_efficiency=reference)"
        )
    saved = {name: namespace.get(name, _MISSING) for name in references}
    namespace.update(references)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is _MISSING:
                namespace.pop(name, None)
            else:
                namespace[name] = value
