"""Tolerance-band references and directional checks: how CI asserts on training numbers.

Contract: ``assert_close_to_reference(name, value, reference_file, atol, rtol)`` passes when
``|value - ref| <= atol + rtol * |ref|`` for the reference stored under `name`, and otherwise
raises `ReferenceMismatch` explaining the miss; in update mode it rewrites the reference
instead and records why. ``assert_decreasing(losses)`` checks a direction, not a value.

Design decisions:
- A reference is a *band*, not a number: floats from the same seeded run legitimately
  differ across CPU generations, thread counts and library versions (the summation order
  changes), so an exact-equality check is a flake waiting for new CI hardware.
- References live in small JSON files in the repository (``tests/references/``), each
  entry with its value, its tolerances, when it was updated, why, and the environment it
  came from: a reviewer sees a changed reference in the diff, with its reason.
- Update mode is deliberate: ``pytest --update-references "why"`` (the course's pytest
  plugin sets ``MLINFRA_UPDATE_REFERENCES``), ``mlinfra-lab ci update-references --reason``,
  or ``update="why"``. An update without a reason is refused.
- Errors name the file and the line: a missing file, a malformed file, a missing entry.

Caveat: a band wide enough for every machine can hide a small real regression; pair it
with a directional check (``assert_decreasing``) and keep the tolerance near the observed
spread (the chapter measures it).
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlinfra_lab.ci.jsonfile import JsonFileError, line_of, load_json
from mlinfra_lab.errors import MlinfraError

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "NotDecreasingError",
    "ReferenceFileError",
    "ReferenceMismatch",
    "UPDATE_ENV",
    "assert_close_to_reference",
    "assert_decreasing",
    "update_mode",
]

UPDATE_ENV = "MLINFRA_UPDATE_REFERENCES"  # holds the reason while references are rewritten
DEFAULT_ATOL = 1e-4  # the course text's `abs(loss - expected) < 1e-4`
DEFAULT_RTOL = 1e-3
_HINT = "to (re)create it run: pytest --update-references 'WHY'"


class ReferenceFileError(JsonFileError):
    """The reference file is missing, malformed, or lacks the entry; names file and line."""


class ReferenceMismatch(MlinfraError, AssertionError):
    """A value fell outside its reference band; the message explains by how much."""


class NotDecreasingError(MlinfraError, AssertionError):
    """A sequence that should fall (a loss) did not fall enough."""


def update_mode(update: str | None = None) -> str | None:
    """The reason to rewrite references now: `update`, else ``$MLINFRA_UPDATE_REFERENCES``."""
    reason = update if update is not None else os.environ.get(UPDATE_ENV)
    if reason is not None and not reason.strip():
        raise ValueError("updating references needs a reason: --update-references 'WHY'")
    return reason


def _as_list(value: float | Sequence[float]) -> list[float]:
    if isinstance(value, int | float):
        return [float(value)]
    return [float(v) for v in value]


def _write(
    path: Path,
    entries: dict[str, Any],
    name: str,
    value: Any,
    atol: float,
    rtol: float,
    reason: str,
) -> None:
    import importlib.metadata as md

    entries[name] = {
        "value": value,
        "atol": atol,
        "rtol": rtol,
        "updated": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reason": reason,
        "environment": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "torch": md.version("torch"),
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(entries.items())), indent=2) + "\n")


def _entry(path: Path, name: str) -> tuple[dict[str, Any], int]:
    """The stored entry `name` and the line it starts on."""
    entries, text = load_json(path, what="reference file", hint=_HINT, error=ReferenceFileError)
    if not isinstance(entries, dict):
        raise ReferenceFileError(f"{path}:1: a reference file holds one JSON object")
    if name not in entries:
        known = ", ".join(sorted(entries)) or "none"
        raise ReferenceFileError(f"{path}:1: no reference named {name!r} (known: {known}); {_HINT}")
    entry, line = entries[name], line_of(text, [name])
    if not isinstance(entry, dict) or "value" not in entry:
        raise ReferenceFileError(
            f"{path}:{line}: reference {name!r} needs a 'value' (and 'atol', 'rtol')"
        )
    try:
        _as_list(entry["value"])
    except (TypeError, ValueError) as err:
        raise ReferenceFileError(
            f"{path}:{line}: reference {name!r} has a value that is not "
            f"a number or a list of numbers: {err}"
        ) from None
    return entry, line


def assert_close_to_reference(
    name: str,
    value: float | Sequence[float],
    reference_file: str | Path,
    atol: float | None = None,
    rtol: float | None = None,
    *,
    update: str | None = None,
) -> None:
    """Assert `value` lies in the band stored as `name` in `reference_file`.

    `atol`/`rtol` default to the ones stored with the reference (then to 1e-4 / 1e-3). In
    update mode (`update="why"` or ``--update-references "why"``) the reference is
    rewritten with `value`, the tolerances and the reason, and the check passes.
    """
    path = Path(reference_file)
    reason = update_mode(update)
    if reason is not None:
        stored = value if isinstance(value, int | float) else _as_list(value)
        entries: dict[str, Any] = {}
        if path.exists():
            entries, _ = load_json(path, what="reference file", error=ReferenceFileError)
        old = entries.get(name, {}) if isinstance(entries, dict) else {}
        _write(
            path,
            entries,
            name,
            stored,
            atol if atol is not None else old.get("atol", DEFAULT_ATOL),
            rtol if rtol is not None else old.get("rtol", DEFAULT_RTOL),
            reason,
        )
        return
    entry, line = _entry(path, name)
    atol = float(atol if atol is not None else entry.get("atol", DEFAULT_ATOL))
    rtol = float(rtol if rtol is not None else entry.get("rtol", DEFAULT_RTOL))
    refs, got = _as_list(entry["value"]), _as_list(value)
    if len(refs) != len(got):
        raise ReferenceMismatch(
            f"{name}: got {len(got)} values, the reference at {path}:{line} holds {len(refs)}"
        )
    worst, worst_ratio = 0, -1.0
    for i, (r, g) in enumerate(zip(refs, got, strict=True)):
        ratio = abs(g - r) / (atol + rtol * abs(r)) if math.isfinite(g) else math.inf
        if ratio > worst_ratio:
            worst, worst_ratio = i, ratio
    if worst_ratio <= 1.0:
        return
    r, g = refs[worst], got[worst]
    band = atol + rtol * abs(r)
    where = f"{name}[{worst}]" if len(refs) > 1 else name
    why = entry.get("reason", "no reason recorded")
    raise ReferenceMismatch(
        f"{where} = {g!r} is outside the reference band {r!r} +/- {band:.3g} "
        f"(atol {atol:g} + rtol {rtol:g} * |ref|) stored at {path}:{line} "
        f"(updated {entry.get('updated', '?')}: {why!r}); it is off by {abs(g - r):.3g}, "
        f"{worst_ratio:.3g}x the tolerance. If the change is intended, rerun with "
        f"--update-references 'WHY'; if not, a seed or a kernel changed."
    )


def assert_decreasing(
    losses: Sequence[float], *, window: int = 5, min_drop: float = 0.0, name: str = "loss"
) -> None:
    """Assert the mean of the last `window` values is below the mean of the first `window`.

    Averages over a window because a mini-batch loss is noisy step to step; `min_drop` is
    the relative drop required (0.1 = at least 10 % lower). Non-finite values fail.
    """
    values = [float(v) for v in losses]
    if len(values) < 2 * window:
        raise ValueError(
            f"need at least {2 * window} values for window={window}, got {len(values)}"
        )
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        raise NotDecreasingError(f"{name} is not finite at step {bad[0] + 1}: {values[bad[0]]}")
    first = sum(values[:window]) / window
    last = sum(values[-window:]) / window
    if last > first * (1.0 - min_drop):
        n = len(values)
        raise NotDecreasingError(
            f"{name} did not decrease: mean of steps 1-{window} = {first:.4g}, of steps "
            f"{n - window + 1}-{n} = {last:.4g}; needed a drop of at least {min_drop:.0%}"
        )
