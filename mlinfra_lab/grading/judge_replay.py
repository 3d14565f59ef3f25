"""Inside the judge's kernel: give a grader the student's results, never the student's code.

Contract: the grading runner calls ``load(path, names)`` (through ``user_expressions``)
before it runs a grader cell's judge text; `path` is the record the student's kernel wrote
for the same cell (see `judge_record`). ``load`` binds each of `names` in the judge's
namespace: a function becomes a *replayer*, a value its decoded copy (a module is not a
value: the judge imports what the instructor's notebook imports, see `markers`); a name the
student's kernel did not have stays unbound. A replayer, called by the grader's code, takes the next call of the record: it checks that the record's call
is of the same function with the same form of arguments, makes the callback calls the
record lists (of the judge's own callbacks, with the recorded arguments), then returns the
recorded value or raises the recorded exception. ``load`` returns `TOKEN`; a malformed
record raises `WireError` (so the cell fails), and a replay that does not match raises
`JudgeError` in the grader, which fails that grader.

Design decisions:
- This kernel never runs a line the student wrote: every value it hands the grader was
  decoded by `judge_wire` into a plain type, so the grader's comparisons run with the
  judge's own numpy, torch and builtins, on objects with the base types' behaviour.
- Results are decoded when they are replayed: a large tensor is only rebuilt if the grader
  reaches the call that returned it.
- Calls are replayed in the order they were made. The grader's text is the same in both
  kernels and its inputs are drawn from the same seeds, so the order is the same; a
  mismatch is reported as such, with both names, instead of comparing a wrong value.
- Exceptions from the judge's callbacks are not the student's to see: they are dropped
  (the student's code saw its own kernel's), except `JudgeError`, which means the replay
  itself went out of step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import JudgeError, WireError
from .judge_wire import Decoder, Opaque
from .judge_wire import load as load_record

__all__ = ["TOKEN", "load"]

TOKEN = "mlinfra-judge-replay-ok"
_state: dict[str, Any] = {"calls": [], "next": 0, "decoder": Decoder([])}


def _namespace() -> dict[str, Any]:
    from IPython import get_ipython

    return get_ipython().user_ns


def load(path: str, names: list[str]) -> str:
    """Bind `names` from the record at `path` (see the module docstring)."""
    header, buffers = load_record(Path(path).read_bytes())
    decoder = Decoder(buffers)
    calls, manifest = header.get("calls"), header.get("names")
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise WireError("the record's calls are not a list of calls")
    if not isinstance(manifest, dict):
        raise WireError("the record does not say what its names are")
    ns = _namespace()
    for name in names:
        entry = manifest.get(name)
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if kind == "call":
            ns[name] = Replayer(name)
        elif kind == "value" and isinstance(entry, dict):  # (a "kind" implies a dict)
            ns[name] = decoder.value(entry.get("value"))
        else:  # missing in the student's kernel (or not reported): a NameError, as there
            ns.pop(name, None)
    _state.update(calls=calls, next=0, decoder=decoder)
    return TOKEN


class Replayer:
    """Stands in for one student function in the judge (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.__name__ = self.__qualname__ = name

    def __repr__(self) -> str:
        return f"<your {self.__name__}, replayed from your kernel's record>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name, index = self.__name__, _state["next"]
        calls: list[dict[str, Any]] = _state["calls"]
        if index >= len(calls):
            raise JudgeError(
                f"the judge's grader called {name} more times ({index + 1}) than the grader "
                "did in your kernel: the grader took another path there"
            )
        call = calls[index]
        _state["next"] = index + 1
        if call.get("name") != name:
            raise JudgeError(
                f"call {index + 1}: the judge's grader called {name} where the grader in "
                f"your kernel called {str(call.get('name'))[:60]}: it took another path there"
            )
        if call.get("nargs") != len(args) or call.get("kwargs") != sorted(kwargs):
            raise JudgeError(
                f"call {index + 1} of {name}: other arguments in the judge than in your kernel"
            )
        decoder: Decoder = _state["decoder"]
        for event in call.get("events") or []:
            self._callback(event, args, kwargs, decoder)
        if "raised" in call:
            raise decoder.exception(call["raised"])
        if "result" not in call:
            raise JudgeError(f"call {index + 1} of {name} has no result in your kernel's record")
        result = decoder.value(call["result"])
        if isinstance(result, Opaque):
            result._refuse()
        return result

    @staticmethod
    def _callback(event: Any, args: tuple, kwargs: dict, decoder: Decoder) -> None:
        """Make one recorded call of a callback the grader passed (see the docstring)."""
        key = event.get("arg") if isinstance(event, dict) else None
        if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(args):
            target = args[key]
        elif isinstance(key, str) and key in kwargs:
            target = kwargs[key]
        else:
            raise WireError("a callback event names no argument of its call")
        cb_args, cb_kwargs = decoder.value(event.get("args")), decoder.value(event.get("kwargs"))
        if not isinstance(cb_args, tuple) or not isinstance(cb_kwargs, dict):
            raise WireError("a callback event without its arguments")
        if not callable(target):
            raise JudgeError("a callback event names an argument that is not a function")
        try:
            target(*cb_args, **{str(k): v for k, v in cb_kwargs.items()})
        except JudgeError:
            raise
        except Exception:  # noqa: BLE001, S110 - the student's code saw its own kernel's outcome
            pass
