"""Inside a graded kernel: put back what a notebook can change to hide a grader's failure.

Contract: the grading runner calls `snapshot()` once, before the first cell of a notebook
runs, and `reset()` right before each grader (and read-only) cell; both return `TOKEN`, which
the runner checks in the reply. `reset()` restores, as they were at the snapshot:
- IPython's error path: custom exception handlers (``set_custom_exc``), the traceback
  display methods, cell running and transformation methods (class attributes and any
  instance attribute a notebook set over them), ipykernel's ``do_execute``;
- the input transformers (cleanup and post) and AST transformers;
- the ``pre/post_execute`` and ``pre/post_run_cell`` event callbacks;
- ``sys.excepthook``, trace and profile functions (``sys`` and ``threading``);
- the ``builtins`` a notebook may rebind (``abs``, ``all``, ``isinstance`` ...) and the
  namespace's ``__builtins__``; the public functions of ``math``, ``numpy``,
  ``numpy.linalg`` and ``numpy.testing`` (imported at the snapshot).

Design decisions:
- Reached through the reply's ``user_expressions``, not through a cell: expressions are
  evaluated without the input or AST transformers, so a transformer that empties every
  cell cannot also empty the reset.
- Standard library and IPython only, imported into each kernel: cheap (numpy is imported at
  the snapshot because every lab uses it).

Limits, said plainly: this runs in the student's own interpreter, which their code has
already run in. It stops the hooks a notebook can set with IPython's and Python's public
means; it does not stop code that rewrites this module, the kernel's message handling, or
memory through ``ctypes``. The grading runner therefore also requires an ``ok`` reply *and*
no broadcast error, and runs the kernel in a sandbox (see `sandbox`); judging outside the
kernel is the step that would close the rest (see the instructors' page).
"""

from __future__ import annotations

import builtins
import sys
import threading
from typing import Any

__all__ = ["TOKEN", "kernel_threads", "reset", "snapshot"]

TOKEN = "mlinfra-kernel-reset-ok"
_MODULES = ("math", "numpy", "numpy.linalg", "numpy.testing")
_SHELL_METHODS = (
    "showtraceback",
    "_showtraceback",
    "showsyntaxerror",
    "showindentationerror",
    "set_custom_exc",
    "run_cell",
    "run_cell_async",
    "_run_cell",
    "run_ast_nodes",
    "run_code",
    "transform_cell",
    "transform_ast",
    "ev",
    "user_expressions",
    "should_run_async",
    "get_exception_only",
)
_saved: dict[str, Any] = {}


def _shell() -> Any:
    from IPython import get_ipython

    return get_ipython()


def kernel_threads() -> frozenset[int]:
    """The idents of the Python threads the kernel had before any notebook cell ran."""
    return _saved.get("threads", frozenset())


def snapshot() -> str:
    """Record the pristine state (call before any notebook cell runs)."""
    import importlib

    ip = _shell()
    classes = [c for c in type(ip).__mro__ if c is not object]
    _saved["methods"] = [
        (cls, name, cls.__dict__[name])
        for cls in classes
        for name in _SHELL_METHODS
        if name in cls.__dict__
    ]
    kernel = getattr(ip, "kernel", None)
    if kernel is not None:
        _saved["kernel"] = [
            (cls, "do_execute", cls.__dict__["do_execute"])
            for cls in type(kernel).__mro__
            if "do_execute" in cls.__dict__
        ]
    _saved["builtins"] = dict(vars(builtins))
    _saved["threads"] = frozenset(sys._current_frames())  # the kernel's own (`judge_record`)
    _saved["modules"] = {}
    for name in _MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        _saved["modules"][name] = (
            module,
            {k: v for k, v in vars(module).items() if not k.startswith("_") and callable(v)},
        )
    _saved["events"] = {k: list(v) for k, v in ip.events.callbacks.items()}
    _saved["excepthook"] = sys.excepthook
    return TOKEN


def reset() -> str:
    """Put back everything `snapshot` recorded (call right before a grader cell runs)."""
    from IPython.core.inputtransformer2 import TransformerManager

    ip = _shell()
    for cls, name, value in _saved.get("methods", []) + _saved.get("kernel", []):
        setattr(cls, name, value)
    for _cls, name, _value in _saved.get("methods", []):
        ip.__dict__.pop(name, None)  # an instance attribute set over the method
    kernel = getattr(ip, "kernel", None)
    if kernel is not None:
        kernel.__dict__.pop("do_execute", None)
    ip.set_custom_exc((), None)
    ip.input_transformer_manager = TransformerManager()
    ip.input_transformers_post = []
    ip.ast_transformers = []
    for event, callbacks in _saved.get("events", {}).items():
        ip.events.callbacks[event] = list(callbacks)
    sys.excepthook = _saved.get("excepthook", sys.__excepthook__)
    sys.settrace(None)
    sys.setprofile(None)
    threading.settrace(None)
    threading.setprofile(None)
    vars(builtins).update(_saved.get("builtins", {}))
    ip.user_ns["__builtins__"] = builtins
    for module, functions in _saved.get("modules", {}).values():
        for name, value in functions.items():
            setattr(module, name, value)
    return TOKEN
