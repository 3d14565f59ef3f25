"""Run a grader's own text inside a function, so its values and helpers die with it.

Contract: ``scoped_source(text, exports)`` returns grader text `text` rewritten as the body
of a function that is defined, called once and deleted: every name the grader binds
(``want``, ``expected``, a hidden ``reference_logsumexp``) is a local of that call, gone
when it returns, except `exports` (names a later grader of the same lab reads) and names a
helper of the grader declares ``global``, which stay in the notebook's namespace as before.
`exported_names(texts)` computes, for a lab's grader texts in order, each one's `exports`.

Why: at the notebook's top level a grader's values are globals; a student's
function could return ``globals()["want"]``, and a later student cell could reuse a
grader's hidden reference. As locals, they are neither in the namespace after the grader
nor in it while the grader runs.

Design decisions:
- The text is the grader's own (IPython syntax turned into Python first); ``globals()``
  inside still means the notebook's namespace, so ``using_reference(globals(), ...)`` and
  ``globals().get("logsumexp")`` work unchanged. A text that does not compile, or starts
  with a cell magic, is left as it is: it fails (or runs) as it would have.
- Lines inside multi-line strings are not re-indented (their text would change).
- What a function scope cannot hide: the grader's frame while it runs (a student function
  can read ``sys._getframe(1).f_locals``). Graders therefore compute an expected value
  *after* the call it checks (lab 0 does), and the judge recomputes it from its own copy of
  the inputs (a student function that changes its arguments in place changes only its own
  kernel's). Names in `exports` remain shared by design: keep references out of them.
"""

from __future__ import annotations

import io
import symtable
import tokenize
from collections.abc import Iterable, Sequence

from .judge_names import python_text, scan

__all__ = ["SCOPE_NAME", "exported_names", "scoped_source"]

SCOPE_NAME = "_mlinfra_grader"


def _rows_inside_strings(source: str) -> set[int]:
    rows: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.end[0] > tok.start[0] and tok.type not in (tokenize.NL, tokenize.NEWLINE):
                rows.update(range(tok.start[0] + 1, tok.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass
    return rows


def _declared_global(table: symtable.SymbolTable) -> set[str]:
    found: set[str] = set()
    for child in table.get_children():
        found |= {s.get_name() for s in child.get_symbols() if s.is_declared_global()}
        found |= _declared_global(child)
    return found


def exported_names(texts: Sequence[str]) -> list[set[str]]:
    """Per grader text, the names it binds at its top level that a later one reads without
    binding them itself."""
    scans = [scan(text) for text in texts]
    needs = [read - bound for read, bound in scans]  # what each takes from outside itself
    return [bound & set().union(set(), *needs[k + 1 :]) for k, (_, bound) in enumerate(scans)]


def scoped_source(text: str, exports: Iterable[str] = frozenset()) -> str:
    """`text` as the body of a run-once function (see the module docstring)."""
    if text.lstrip().startswith("%%"):
        return text
    python = python_text(text)
    try:
        table = symtable.symtable(python, "<grader>", "exec")
        compile(python, "<grader>", "exec")
    except (SyntaxError, ValueError):
        return text
    shared = sorted(set(exports) | _declared_global(table))
    inside = _rows_inside_strings(python)
    body = [
        line if row in inside or not line.strip() else "    " + line
        for row, line in enumerate(python.splitlines(), start=1)
    ]
    head = [f"def {SCOPE_NAME}():"] + ([f"    global {', '.join(shared)}"] if shared else [])
    tail = ["    pass", "try:", f"    {SCOPE_NAME}()", "finally:", f"    del {SCOPE_NAME}"]
    scoped = "\n".join([*head, *body, *tail])
    try:
        compile(scoped, "<grader>", "exec")
    except SyntaxError:  # e.g. a name both global and bound otherwise: run it as written
        return text
    return scoped
