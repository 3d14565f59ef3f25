"""Run one pickled callable in this (fresh) process and pickle back its outcome.

Contract: ``python -m mlinfra_lab.ci.worker IN OUT`` unpickles a zero-argument callable
from the file IN, calls it, and pickles ``{"ok": bool, "value": ..., "error": str}`` to
the file OUT. ``detect_flaky`` starts one such process per run.

Design decisions: files rather than stdout carry the result, so whatever the callable
prints cannot corrupt it; the callable must be picklable by reference (a module-level
function, or ``functools.partial`` of one), which is what "a fresh process" requires.
"""

from __future__ import annotations

import pickle
import sys
import traceback
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str]) -> int:
    """Run the callable pickled in ``argv[0]``, write its outcome to ``argv[1]``."""
    if len(argv) != 2:
        print("usage: python -m mlinfra_lab.ci.worker IN.pkl OUT.pkl", file=sys.stderr)
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    try:
        func = pickle.loads(source.read_bytes())
        outcome = {"ok": True, "value": func(), "error": ""}
    except Exception as err:  # noqa: BLE001 (the outcome of the run is what we report, not a crash)
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        outcome = {"ok": False, "value": None, "error": last}
    target.write_bytes(pickle.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
