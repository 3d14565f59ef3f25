"""Inside the student's kernel: record what a grader's calls of the student's code returned.

Contract, one grader cell at a time: the grading runner calls ``prepare(names, path)``
(through the reply's ``user_expressions``) before the cell; the cell's own text calls
``arm()`` right after its read-only preamble (`markers.ARM_LINE`), which replaces every one
of `names` that holds a function in the notebook's namespace with a *recorder* and notes
the value of the others; ``disarm()`` (after the cell) puts the functions back and writes
`path`: a `judge_wire` record with, per name, what it was (a function, a value, missing; a
module travels as an opaque value), and, in call order, each call the grader's code made:
the number of positional arguments, the keyword names, the calls the student's code made
back into the grader's functions it was given (the *events*), and the value it returned or
the exception it raised.
All three return `TOKEN`. Without ``prepare``, ``arm`` does nothing: a notebook run outside
grading is unchanged.

Design decisions:
- Only the grader's calls are recorded, not the student's own calls between their functions
  (``log_softmax`` calling ``logsumexp``): the judge replays what the grader called.
- A function argument of the grader's (a callback such as ``find_culprit``'s pipeline) is
  wrapped so that each call the student's code makes of it is an event with its arguments:
  the judge makes the same calls of its own copy, so a grader that counts them counts
  there too. A grader function a callback calls is recorded again (nested in order).
- Results are encoded when they are returned (a later mutation does not change them).
- Nothing of the student's may run beside the grader once a call returns: the
  expected values are computed after the call, and code still running could copy them into
  the returned value and the record. A call that returns with a trace function installed
  (``sys.settrace``, ``threading.settrace``, a frame's ``f_trace``) or a Python thread of
  the notebook's still alive raises `GraderRaceError` instead of returning (in the record too, so
  the judge fails the grader as well); the trace is removed first. The notebook's threads
  are those of ``sys._current_frames()`` the kernel did not have before its first cell
  (`kernel_reset.kernel_threads`), so a thread an earlier cell started counts too; threads
  of the kernel's machinery started later (ipykernel's, for output) and tqdm's progress
  monitor are let be, told by their class or target's module (`_machinery`), which a
  notebook that rewrites this module or those classes can forge, like the rest here. A thread that finished before the call returned could see
  no expected value yet.
- Nothing here is trusted: it runs in the student's interpreter, which can rewrite it. A
  forged record is at most a set of values the student's functions could have returned;
  the judge (see `judge_replay`) decides what they are worth.
- Standard library, `judge_wire`, `kernel_reset` and `errors` only: cheap to import in
  every kernel.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from pathlib import Path
from typing import Any

from .errors import GraderRaceError
from .judge_wire import Encoder, dump

__all__ = ["TOKEN", "arm", "disarm", "prepare"]

TOKEN = "mlinfra-judge-record-ok"
_MARK = "__mlinfra_recorder__"
_state: dict[str, Any] = {}


def _reset() -> None:
    _state.clear()
    _state.update(
        names=(), path=None, armed={}, manifest={}, calls=[], inside=False, encoder=Encoder()
    )


_reset()


def prepare(names: list[str], path: str) -> str:
    """Record `names` for the next grader cell; its record goes to `path` (see the docstring)."""
    _reset()
    _state["names"], _state["path"] = tuple(names), str(path)
    return TOKEN


def _namespace() -> dict[str, Any]:
    from IPython import get_ipython

    return get_ipython().user_ns


def arm() -> None:
    """Wrap the prepared functions in the namespace; note the prepared values."""
    if _state["path"] is None or _state["armed"]:
        return
    ns, encoder, manifest = _namespace(), _state["encoder"], _state["manifest"]
    for name in _state["names"]:
        if name not in ns:
            manifest[name] = {"kind": "missing"}
            continue
        value = ns[name]
        if isinstance(value, types.ModuleType):
            manifest[name] = {"kind": "value", "value": {"~": "opaque", "type": "module"}}
        elif isinstance(value, type):
            manifest[name] = {"kind": "value", "value": {"~": "opaque", "type": "a class"}}
        elif callable(value):
            manifest[name] = {"kind": "call"}
            _state["armed"][name] = value
            ns[name] = _recorder(name, value)
        else:
            manifest[name] = {"kind": "value", "value": encoder.value(value)}


def disarm() -> str:
    """Put the student's functions back and write the record (see the module docstring)."""
    path, ns = _state["path"], _namespace()
    for name, original in _state["armed"].items():
        if getattr(ns.get(name), _MARK, None) is original:
            ns[name] = original
    if path is not None:
        header = {"names": _state["manifest"], "calls": _state["calls"]}
        Path(path).write_bytes(dump(header, _state["encoder"].buffers))
    _reset()
    return TOKEN


def _recorder(name: str, fn: Any) -> Any:
    """`fn`, recording each call the grader's code makes of it."""

    @functools.wraps(fn)
    def record(*args: Any, **kwargs: Any) -> Any:
        if _state["inside"] or _state["path"] is None:
            return fn(*args, **kwargs)  # the student's own call, or after the cell
        call: dict[str, Any] = {
            "name": name,
            "nargs": len(args),
            "kwargs": sorted(kwargs),
            "events": [],
        }
        _state["calls"].append(call)
        args = tuple(_spy(a, i, call) for i, a in enumerate(args))
        kwargs = {k: _spy(v, k, call) for k, v in kwargs.items()}
        _state["inside"] = True
        threads, trace = _kernel_threads(), (_gettrace(), _threading_gettrace())
        try:
            result = fn(*args, **kwargs)
            _left_running(name, threads, trace)
        except BaseException as err:
            call["raised"] = _state["encoder"].exception(err)
            raise
        finally:
            _state["inside"] = False
        call["result"] = _state["encoder"].value(result)
        return result

    setattr(record, _MARK, fn)
    return record


_current_frames, _getframe, _gettrace, _settrace = (
    sys._current_frames,
    sys._getframe,
    sys.gettrace,
    sys.settrace,
)
_threading_gettrace, _threading_settrace = threading.gettrace, threading.settrace


def _left_running(name: str, threads: set[int], trace: tuple[Any, Any]) -> None:
    """Raise `GraderRaceError` when the call of `name` that just returned left a trace
    function or a new thread running (see the module docstring); remove the trace first."""
    traced = [f for f in _frames() if f.f_trace is not None]
    if (_gettrace(), _threading_gettrace()) != trace or traced:
        _settrace(trace[0])
        _threading_settrace(trace[1])
        for frame in traced:
            frame.f_trace = None
        raise GraderRaceError(
            f"{name} returned with a trace function of its own installed (sys.settrace or a "
            "frame's f_trace); a grader does not go on with your code running between its "
            "lines: remove the trace before returning"
        ) from None
    if not threads:  # no snapshot: not a graded kernel
        return
    alive = set(_current_frames()) - threads - {threading.get_ident()}
    if [t for t in alive if not _machinery(t)]:
        raise GraderRaceError(
            f"{name} returned with {len(alive)} thread(s) of the notebook's still running; "
            "a grader does not check a result while your code runs beside it: join every "
            "thread you start (in a cell or a function) before a grader runs"
        ) from None


def _kernel_threads() -> set[int]:
    """The kernel's own threads (`kernel_reset.snapshot`, before any cell): the others are
    the notebook's."""
    from .kernel_reset import kernel_threads

    return set(kernel_threads())


_MACHINERY = ("ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "asyncio", "tqdm")


def _machinery(ident: int) -> bool:
    """Whether thread `ident` is the kernel's or a library's (ipykernel starts some after
    the first cell, for output; tqdm's progress monitor): its class, or the target of a
    plain `threading.Thread`, comes from one of `_MACHINERY`. A thread with no `Thread`
    object (``_thread.start_new_thread``) is the notebook's."""
    # the Thread object of an ident; typeshed leaves out the private `_active` registry
    thread = threading._active.get(ident)  # type: ignore[attr-defined]
    if thread is None:
        return False
    owner: object = type(thread)
    if owner is threading.Thread:
        owner = getattr(thread, "_target", None)
    module = getattr(owner, "__module__", None) or ""
    return module.split(".")[0] in _MACHINERY


def _frames() -> list[types.FrameType]:
    frames: list[types.FrameType] = []
    frame: types.FrameType | None = _getframe(2)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


def _spy(value: Any, key: int | str, call: dict[str, Any]) -> Any:
    """A grader's function argument, recording each call the student's code makes of it."""
    kinds = (types.FunctionType, types.MethodType, functools.partial)
    if not isinstance(value, kinds) or hasattr(value, _MARK):
        return value

    @functools.wraps(value)
    def spy(*args: Any, **kwargs: Any) -> Any:
        if not _state["inside"]:
            return value(*args, **kwargs)
        encoder = _state["encoder"]
        call["events"].append(
            {"arg": key, "args": encoder.value(args), "kwargs": encoder.value(kwargs)}
        )
        _state["inside"] = False
        try:
            return value(*args, **kwargs)
        finally:
            _state["inside"] = True

    return spy
