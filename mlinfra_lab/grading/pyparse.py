"""``ast.parse`` for a grading process that runs ``--jobs`` notebooks from threads.

Contract: `parse(text)` is ``ast.parse(text)``, one thread at a time: it returns the same
tree and raises the same `SyntaxError` / `ValueError`. Every ``ast.parse`` of the grading
process goes through it.

Design decisions:
- Why a lock: CPython 3.11's converter from its C syntax tree to ``ast`` objects keeps its
  recursion depth in state shared by every thread of the interpreter (the tracking of
  cpython gh-95185; gh-106905 is its error-path bug). When a garbage collection inside one
  thread's conversion runs a finalizer written in Python, the interpreter may switch
  threads there; a second thread's parse then moves the shared depth and the first one
  raises ``SystemError: AST constructor recursion depth mismatch``. CI lost two honest
  notebooks of ``--jobs 2`` batches to it (``SystemError at ast.py:50 in
  parse``); ``tests/test_grading_pyparse.py`` reproduces the race without the lock.
- The other uses of the compiler here (``compile`` of text, ``symtable``) build no ``ast``
  objects and do not touch that state, so they need no lock.
- One module-level lock, not one per caller: the state is the interpreter's, so two
  callers that each held their own lock would still race each other.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["parse"]

_LOCK = threading.Lock()


def parse(text: str) -> ast.Module:
    """``ast.parse(text)``, never while another thread of this process parses."""
    with _LOCK:
        return ast.parse(text)
