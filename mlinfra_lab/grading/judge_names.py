"""Which names a grader's judge text takes from the student's kernel.

Contract: ``JudgeNames()`` follows one notebook's grader cells in order;
``names.take(text)`` returns the global names `text` reads that no earlier judge text (nor
`text` itself) binds and that are not builtins: what the student's notebook must provide
(their functions, and any value of theirs the grader reads), together with every such name
an earlier judge text took (a helper an earlier grader defined may call them). It then
counts what `text` binds as the judge's own for the cells after it.

Design decisions:
- Scopes come from `symtable`, Python's own compiler pass: a name read inside a helper
  function or a comprehension of the grader is found, and a local of the same name is not.
- IPython syntax (line magics) is turned into Python first, as the kernel would.
- Run in the grading process on the instructor's text: a submission cannot change it.
- A text that does not compile takes nothing: the judge then fails it as the kernel would.
- The judge's own imports (`top_level_imports` of the instructor's setup cells, see
  `markers.GraderCell.judge_source`) are part of the judge text, so the names they bind are
  never taken from the student: a ``np`` the student rebound stays theirs.
"""

from __future__ import annotations

import ast
import builtins
import symtable

from .pyparse import parse

__all__ = ["KERNEL_NAMES", "JudgeNames", "imports_read", "python_text", "top_level_imports"]

KERNEL_NAMES = frozenset({"get_ipython", "In", "Out", "exit", "quit", "display", "_", "__", "___"})


def _python(text: str) -> str:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return text
    try:
        return TransformerManager().transform_cell(text)
    except Exception:  # noqa: BLE001 - leave it to the compiler to refuse
        return text


def python_text(text: str) -> str:
    """`text` with IPython syntax (line magics) turned into Python, as the kernel would."""
    return _python(text)


def imports_read(imports: list[str], text: str) -> list[str]:
    """The statements of `imports` (from `top_level_imports`) that bind a name `text` reads:
    the judge skips the others (a set-up cell's ``import torch`` costs a second)."""
    read, _ = scan(text)
    kept = []
    for statement in imports:
        _, bound = scan(statement)
        if bound & read:
            kept.append(statement)
    return kept


def top_level_imports(text: str) -> list[str]:
    """The ``import`` and ``from ... import`` statements at the top level of `text`, as text
    (``from __future__`` left out): what the judge runs of an instructor's setup cell, so it
    binds ``np`` or ``grading_rng`` to its own import instead of the student kernel's."""
    try:
        tree = parse(_python(text))
    except (SyntaxError, ValueError):
        return []
    return [
        ast.unparse(node)
        for node in tree.body
        if isinstance(node, ast.Import)
        or (isinstance(node, ast.ImportFrom) and node.module != "__future__")
    ]


def _walk(table: symtable.SymbolTable, read: set[str]) -> None:
    for child in table.get_children():
        for symbol in child.get_symbols():
            if symbol.is_global() and symbol.is_referenced():
                read.add(symbol.get_name())
        _walk(child, read)


def scan(text: str) -> tuple[set[str], set[str]]:
    """(global names `text` reads, names it binds at its top level)."""
    try:
        table = symtable.symtable(_python(text), "<grader>", "exec")
    except (SyntaxError, ValueError):
        return set(), set()
    read: set[str] = set()
    bound: set[str] = set()
    for symbol in table.get_symbols():
        if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace():
            bound.add(symbol.get_name())
        if symbol.is_referenced():
            read.add(symbol.get_name())
    _walk(table, read)
    return read, bound


class JudgeNames:
    """The student's names each judge text of one notebook needs (see the module docstring)."""

    def __init__(self) -> None:
        self.judge_bound: set[str] = set(dir(builtins)) | KERNEL_NAMES
        self.students: set[str] = set()

    def take(self, text: str) -> list[str]:
        read, bound = scan(text)
        self.students = (self.students | (read - bound - self.judge_bound)) - bound
        self.judge_bound |= bound
        return sorted(self.students)
