"""Refuse calls of the course's own implementations while a grader cell runs.

Contract: ``with forbid_calls(names, exercise="X"):`` runs its body under a profile hook
that fails every call of the Python code the dotted `names` resolve to (from anywhere,
through any alias) with `ForbiddenCallError`: "exercise X: your code called
mlinfra_lab...., the course's own implementation; write it yourself". A forbidden call is
also reported when the block ends, even if the student's code caught the error. A guard
that cannot be installed, or is removed while the block runs, raises `CallGuardError`.
`guard_source(text, names, exercise)` is a grader cell's text wrapped in that block: what
grading and validation run in place of a grader cell that carries ``forbid`` metadata.
`forbidden_codes(name)` resolves one name (``MarkerError`` when it does not resolve).

Design decisions:
- Code objects, not names: a name such as ``mlinfra_lab.attention.online_softmax`` is
  resolved once (importing its module) to the function's ``__code__``; an alias
  (``f = online_softmax``, ``from ... import ... as``, a function stored in a dict) runs the
  same code object, so it is caught. A bound method gives its function; a class gives every
  function of its own body (methods, static and class methods, properties, the
  ``__init__`` a dataclass generated), not the ones it inherits; ``functools.wraps``
  layers are unwrapped to the innermost function (a decorator's wrapper code is shared by
  everything it decorates, so it is never forbidden itself), and a ``@triton.jit`` object
  gives its Python function (``.fn``).
- Copies too: a code object the hook meets for the first time is compared by
  content (`code_key`: instructions and constants, not local names, file or line numbers)
  with the forbidden ones, so ``fn.__code__.replace(co_name=...)``, ``types.FunctionType(code,
  ...)`` over a replaced code and a re-``exec`` of the course's source are refused as the
  original is; so are a ``marshal`` round trip, ``copy.deepcopy``, ``pickle`` (the
  original itself), ``functools.partial`` / ``__wrapped__`` layers, ``NOP``s inserted into
  ``co_code`` and constants appended to ``co_consts``. The codes met are kept (their ids
  cannot be reused) and compared once each. A copy whose instructions or used constants
  were edited is another function as far as this guard can tell, and is not caught here;
  the judge's own inputs still apply.
- ``sys.setprofile`` (and ``threading.setprofile`` for threads started in the block): the
  hook sees a ``"call"`` event for every Python frame, compares ``id(frame.f_code)`` with a
  set of ids (hashing a code object would hash its bytecode on every call) and raises.
- CPython removes a profile function that raised, and student code may catch the error;
  so the first violation is recorded, and leaving the block raises it again whatever
  happened in between (chained to nothing, so a notebook's last exception line, which
  is what the gradebook shows, is the `ForbiddenCallError` line).
- Fail closed: if, right after installing, ``sys.getprofile()`` is not the hook (someone
  replaced ``sys.setprofile``), or at the end of the block it is gone without a recorded
  violation (the student's code called ``sys.setprofile``), the block raises
  `CallGuardError` instead of reporting a pass it cannot vouch for.
- Imported inside every graded kernel: standard library only, no work at import time.
- A name whose module the kernel has not imported is not imported for the guard (the
  course's kernels import torch and Triton: seconds per graded notebook). Its code is
  compiled from the module's source file instead, without running it (`_compiled_codes`),
  and watched by content only: the student's code can reach it only by importing the
  module inside the block, whose code objects the hook then meets for the first time and
  compares by `code_key` with the compiled ones, as it does for copies. A name the source
  does not define with ``def`` (a class, whose decorators may add functions; a re-export;
  an assignment) is imported.

Caveats:
- Threads already running when the block starts are not watched (Python 3.11 cannot set a
  profile function for other running threads), nor are child processes.
- A Triton kernel compiled for a GPU runs no Python: forbid the Python launcher too (under
  the Triton interpreter, on a CPU, the kernel's own function runs and is caught).
- This stops a student from using the course's implementation, not one who attacks the
  guard in their own kernel (rebinding this module); such a submission shows it in its code.
- Python-heavy graders run slower under a profile hook (each call and return runs it).
"""

from __future__ import annotations

import functools
import io
import pkgutil
import sys
import threading
import tokenize
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from .errors import CallGuardError, ForbiddenCallError, MarkerError

__all__ = [
    "PACKAGE_PREFIX",
    "CallGuard",
    "code_key",
    "forbid_calls",
    "forbidden_codes",
    "guard_source",
    "source_codes",
]

PACKAGE_PREFIX = "mlinfra_lab."
GUARD_NAME = "_mlinfra_forbid_calls"  # the name the guarded grader text binds the guard to


def _innermost(obj: Any) -> types.FunctionType | None:
    """The Python function `obj` runs: methods, partials, wraps layers and jit objects undone."""
    for _ in range(100):  # a __wrapped__ cycle must not hang the grader
        if isinstance(obj, types.MethodType | staticmethod | classmethod):
            obj = obj.__func__
        elif isinstance(obj, functools.partial):
            obj = obj.func
        elif getattr(obj, "__wrapped__", None) is not None:
            obj = obj.__wrapped__
        elif not isinstance(obj, types.FunctionType) and isinstance(
            getattr(obj, "fn", None), types.FunctionType
        ):
            obj = obj.fn  # triton.jit's JITFunction / InterpretedFunction
        else:
            break
    return obj if isinstance(obj, types.FunctionType) else None


def _member_functions(cls: type, name: str) -> list[tuple[str, types.FunctionType]]:
    """(label, function) for each function of `cls`'s own body, properties' accessors too."""
    found = []
    for attr, member in vars(cls).items():
        if isinstance(member, property):
            parts: Iterable[Any] = (member.fget, member.fset, member.fdel)
        elif isinstance(member, functools.cached_property):
            parts = (member.func,)
        else:
            parts = (member,)
        found += [
            (f"{name}.{attr}", fn)
            for fn in map(_innermost, (p for p in parts if p is not None))
            if fn
        ]
    return found


def _forbidden_functions(name: str) -> list[tuple[str, types.FunctionType]]:
    """(label for the message, function) pairs that `name` forbids; `MarkerError` if none."""
    if not isinstance(name, str) or not name.startswith(PACKAGE_PREFIX):
        raise MarkerError(
            f"forbid entry {name!r} must be the dotted path of a function or "
            f"class of the course package, starting with '{PACKAGE_PREFIX}'"
        )
    try:
        obj = pkgutil.resolve_name(name)
    except (ImportError, AttributeError, ValueError) as err:
        raise MarkerError(
            f"forbid entry '{name}' does not resolve ({type(err).__name__}: "
            f"{err}); fix the dotted path"
        ) from err
    if isinstance(obj, type):
        functions = _member_functions(obj, name)
    else:
        functions = [(name, fn) for fn in [_innermost(obj)] if fn is not None]
    if not functions:
        raise MarkerError(
            f"forbid entry '{name}' is a {type(obj).__name__}, not a Python "
            "function or a class with functions of its own; list the function "
            "that implements the answer"
        )
    return functions


_SKIP_OPS = frozenset({"CACHE", "RESUME", "NOP", "EXTENDED_ARG", "PRECALL", "PUSH_NULL"})
_SAME_OPS = {"LOAD_METHOD": "LOAD_ATTR", "CALL_METHOD": "CALL", "CALL_FUNCTION": "CALL"}


def _shape(code: types.CodeType) -> tuple[int, int]:
    """A cheap first look: a copy has the same arguments (not always the same number of
    constants: an unused one can be appended to ``co_consts``)."""
    return (code.co_argcount, code.co_kwonlyargcount)


def code_key(code: types.CodeType) -> tuple:
    """What a code object computes, without what a copy may change for free: its
    instructions with their names and constants (nested code by its own key, strings as
    one placeholder: an edited docstring or message leaves the algorithm), locals by
    number (renaming them changes nothing), without jump targets, line numbers, file or
    name, and with the compiler's equivalent forms of one call made the same."""
    import dis

    out = []
    for ins in dis.get_instructions(code):
        op = _SAME_OPS.get(ins.opname, ins.opname)
        if op in _SKIP_OPS:
            continue
        arg: object = None
        if isinstance(ins.argval, types.CodeType):
            arg = code_key(ins.argval)
        elif isinstance(ins.argval, str) and op == "LOAD_CONST":
            arg = "str"
        elif op in ("LOAD_FAST", "STORE_FAST", "DELETE_FAST", "LOAD_CLOSURE", "LOAD_DEREF"):
            arg = ins.arg
        elif ins.opcode not in dis.hasjrel and ins.opcode not in dis.hasjabs:
            arg = ins.argrepr.replace("NULL + ", "").replace(" + NULL", "")
        out.append((op, arg))
    return (_shape(code), tuple(out))


def forbidden_codes(name: str) -> tuple[types.CodeType, ...]:
    """The code objects a forbidden `name` stands for; `MarkerError` saying why if none."""
    return tuple(fn.__code__ for _, fn in _forbidden_functions(name))


_CO_OPTIMIZED = 0x0001  # inspect.CO_OPTIMIZED: set on function bodies, not on class bodies


def _module_file(name: str) -> tuple[str, Path, str] | None:
    """(module, source file, qualified name) for a dotted `name` under this package's folder,
    found on disk without importing anything; None where no such file holds it."""
    root = Path(__file__).resolve().parents[1]  # the mlinfra_lab folder
    parts = name.split(".")
    for cut in range(len(parts) - 1, 1, -1):  # the longest module path first
        folder = root.joinpath(*parts[1:cut])
        for path in (folder.with_suffix(".py"), folder / "__init__.py"):
            if path.is_file():
                return ".".join(parts[:cut]), path, ".".join(parts[cut:])
    return None


def _compiled_codes(name: str) -> list[tuple[str, types.CodeType]] | None:
    """`source_codes(name)` where the kernel has not imported `name`'s module; None where it
    has (its objects are watched instead)."""
    found = _module_file(name)
    if found is None or found[0] in sys.modules:
        return None
    return source_codes(name)


def source_codes(name: str) -> list[tuple[str, types.CodeType]] | None:
    """(label, code) pairs `name` stands for, compiled from its module's source file without
    running it (see the module docstring); None where the source does not define `name` with
    ``def``."""
    found = _module_file(name)
    if found is None or sys.version_info < (3, 11):  # code objects name their qualname
        return None  # from Python 3.11 on (co_qualname): before, the guard imports
    _, path, qualname = found
    try:
        tree = compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return None
    codes, stack = [], [tree]
    while stack:
        code = stack.pop()
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        if getattr(code, "co_qualname", None) == qualname:
            codes.append(code)
    if len(codes) != 1:
        return None
    (code,) = codes
    if not code.co_flags & _CO_OPTIMIZED:  # a class body: its decorators may add functions
        return None  # (a dataclass's __init__), which only the class object has
    return [(name, code)]


class CallGuard:
    """The context manager `forbid_calls` returns (see the module docstring)."""

    def __init__(self, names: Sequence[str], exercise: str) -> None:
        if isinstance(names, str):
            names = [names]
        self.exercise = exercise
        self.names = tuple(names)
        self._forbidden: dict[int, tuple[str, types.CodeType]] = {}  # holds the codes
        compiled: list[tuple[str, types.CodeType]] = []  # of modules not imported: by content
        for name in self.names:
            from_source = _compiled_codes(name)
            if from_source is not None:
                compiled += from_source
                continue
            for label, fn in _forbidden_functions(name):
                self._forbidden.setdefault(id(fn.__code__), (label, fn.__code__))
        self._by_id: dict[int, tuple[str, types.CodeType]] = {}  # what the hook watches now
        self._armed: list[bool] = [False]  # True inside the block
        # copies: the same bytecode and constants in another code object (`code_key`)
        known = [*self._forbidden.values(), *compiled]
        self._by_key = {code_key(code): label for label, code in known}
        self._shapes = {_shape(code) for _, code in known}
        self._seen: dict[int, types.CodeType] = {}  # other codes met, kept alive (no id reuse)
        self.violations: list[str] = []  # messages, in the order the calls happened
        self._hook = self._make_hook()
        self._previous: tuple[Any, Any] = (None, None)

    def _make_hook(self) -> Any:
        by_id, violations, message = self._by_id, self.violations, self.message
        by_key, seen, shapes, armed = self._by_key, self._seen, self._shapes, self._armed

        def hook(frame: types.FrameType, event: str, arg: Any) -> None:
            if event != "call" or not armed[0]:
                return
            code = frame.f_code
            if id(code) in by_id:
                label, known = by_id.get(id(code), ("", None))
                if known is code:  # not an id reused after the guard ended
                    violations.append(message(label))
                    raise ForbiddenCallError(violations[-1])
            elif seen.get(id(code)) is not code:  # a code object met for the first time
                seen[id(code)] = code
                copied = by_key.get(code_key(code)) if _shape(code) in shapes else None
                if copied is not None:  # a copy (__code__.replace, FunctionType, exec)
                    by_id[id(code)] = (copied, code)
                    violations.append(message(copied))
                    raise ForbiddenCallError(violations[-1])

        return hook

    def message(self, name: str) -> str:
        """The one line a student reads when their code called `name`."""
        return (
            f"exercise {self.exercise}: your code called {name}, the course's own "
            "implementation; write it yourself"
        )

    def __enter__(self) -> CallGuard:
        self._by_id.update(self._forbidden)
        self._armed[0] = True
        self._previous = (sys.getprofile(), threading.getprofile())
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        if sys.getprofile() is not self._hook or not isinstance(
            sys.setprofile, types.BuiltinFunctionType
        ):
            self._restore()
            self._by_id.clear()
            self._armed[0] = False
            raise CallGuardError(
                f"exercise {self.exercise}: the grader's call guard cannot "
                "be installed (sys.setprofile or sys.getprofile was "
                "replaced in this notebook); remove that code, restart the "
                "kernel and run again"
            )
        return self

    def _restore(self) -> None:
        previous, previous_threads = self._previous
        sys.setprofile(previous)
        threading.setprofile(previous_threads)

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> Literal[False]:
        intact = sys.getprofile() is self._hook
        self._restore()
        self._by_id.clear()  # threads started in the block keep the hook: make it inert
        self._armed[0] = False
        if exc is not None and not isinstance(exc, Exception):
            return False  # KeyboardInterrupt (a timeout), SystemExit: let it through
        if self.violations:
            if isinstance(exc, ForbiddenCallError):
                return False
            raise ForbiddenCallError(self.violations[0]) from None
        if not intact:
            raise CallGuardError(
                f"exercise {self.exercise}: the grader's call guard was "
                "removed while the grader ran (sys.setprofile was called); "
                "grading cannot tell whether your code called the course's "
                "implementation, so this grader fails"
            ) from None
        return False


def forbid_calls(names: Sequence[str], exercise: str) -> CallGuard:
    """A guard that fails any call of `names` inside its ``with`` block (see module docstring)."""
    return CallGuard(names, exercise)


def _rows_inside_strings(source: str) -> set[int]:
    """1-based numbers of the lines that begin inside a multi-line token (a string)."""
    rows: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.end[0] > tok.start[0] and tok.type not in (tokenize.NL, tokenize.NEWLINE):
                rows.update(range(tok.start[0] + 1, tok.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass  # the cell will fail to compile anyway; indent every line
    return rows


def guard_source(source: str, names: Sequence[str], exercise: str) -> str:
    """`source` (a grader cell's text) run inside ``forbid_calls(names, exercise)``.

    Every line is indented by four spaces except those inside a multi-line string, whose
    text must not change; a final ``pass`` keeps a body of comments valid.
    """
    inside = _rows_inside_strings(source)
    body = [
        line if row in inside or not line.strip() else "    " + line
        for row, line in enumerate(source.splitlines(), start=1)
    ]
    return "\n".join(
        [
            f"from mlinfra_lab.grading.forbid import forbid_calls as {GUARD_NAME}",
            f"with {GUARD_NAME}({list(names)!r}, exercise={exercise!r}):",
            *body,
            "    pass",
        ]
    )
