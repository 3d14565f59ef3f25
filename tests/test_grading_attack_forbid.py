"""The forbid guard against copies of a course function (issue 30, item 1).

A student who may not call ``online_softmax`` copied it: ``__code__.replace()`` (another
name, file and first line) wrapped in ``types.FunctionType``, or the function's source
run again with ``exec`` (with its locals renamed). Each copy is another code object, so the
guard's identity check missed them; it now compares code by content (`forbid.code_key`).
Round 2: a ``marshal`` round trip, ``copy.deepcopy``, ``pickle``, ``functools.partial``, a
``functools.wraps`` layer and a ``NOP`` inserted into ``co_code`` were already refused; a
constant appended to ``co_consts`` was not (the guard's cheap first look compared the number
of constants) and is now.
The guard runs here in-process, as it does in a kernel (the same module, the same hook).
"""

from __future__ import annotations

import copy
import dis
import functools
import inspect
import marshal
import pickle
import types

import pytest
import torch

from mlinfra_lab.attention import reference
from mlinfra_lab.grading.errors import ForbiddenCallError
from mlinfra_lab.grading.forbid import code_key, forbid_calls

pytestmark = pytest.mark.grading

FORBID = ["mlinfra_lab.attention.reference.online_softmax"]
X = torch.linspace(-3.0, 3.0, 16)


def _replaced():
    fn = reference.online_softmax
    code = fn.__code__.replace(co_name="my_softmax", co_filename="mine.py", co_firstlineno=7)
    return types.FunctionType(code, fn.__globals__, "my_softmax", fn.__defaults__)


def _rebuilt(code: types.CodeType):
    fn = reference.online_softmax
    return types.FunctionType(code, fn.__globals__, "mine", fn.__defaults__)


def _extra_constant():
    """An unused constant appended to co_consts (this one scored: the guard's first look
    compared the number of constants)."""
    code = reference.online_softmax.__code__
    return _rebuilt(code.replace(co_consts=(*code.co_consts, "unused")))


def _nop_inserted():
    code = reference.online_softmax.__code__
    return _rebuilt(code.replace(co_code=bytes([dis.opmap["NOP"], 0]) + code.co_code))


def _exec_copy(rename: bool):
    text = inspect.getsource(reference.online_softmax).replace("def online_softmax", "def mine")
    if rename:
        text = text.replace("final", "last_stats")
    namespace = dict(vars(reference))
    exec(compile(text, "student-cell", "exec"), namespace)
    return namespace["mine"]


def _honest(x, block, stats_dtype=torch.float32):
    return torch.softmax(x.to(stats_dtype), dim=-1).to(x.dtype)


@pytest.mark.parametrize(
    "copy",
    [
        pytest.param(lambda: reference.online_softmax, id="the-original"),
        pytest.param(_replaced, id="code-replace"),
        pytest.param(lambda: _exec_copy(False), id="exec-of-its-source"),
        pytest.param(lambda: _exec_copy(True), id="exec-with-renamed-locals"),
        pytest.param(
            lambda: _rebuilt(marshal.loads(marshal.dumps(reference.online_softmax.__code__))),
            id="marshal-round-trip",
        ),
        pytest.param(lambda: copy.deepcopy(reference.online_softmax), id="deepcopy"),
        pytest.param(lambda: pickle.loads(pickle.dumps(reference.online_softmax)), id="pickle"),
        pytest.param(lambda: functools.partial(reference.online_softmax), id="partial"),
        pytest.param(
            lambda: functools.wraps(reference.online_softmax)(
                lambda *a, **k: reference.online_softmax(*a, **k)
            ),
            id="wrapped",
        ),
        pytest.param(_extra_constant, id="edited-co-consts"),
        pytest.param(_nop_inserted, id="edited-co-code-nop"),
    ],
)
def test_a_copy_of_a_forbidden_function_is_refused(copy):
    fn = copy()
    assert torch.allclose(fn(X, 4), torch.softmax(X, dim=-1))  # the copy works outside
    with pytest.raises(ForbiddenCallError, match="online_softmax"):
        with forbid_calls(FORBID, exercise="stable_softmax"):
            fn(X, 4)


def test_a_copy_caught_inside_a_try_is_still_reported_when_the_block_ends():
    fn = _replaced()
    with pytest.raises(ForbiddenCallError):
        with forbid_calls(FORBID, exercise="stable_softmax"):
            try:
                fn(X, 4)
            except ForbiddenCallError:
                pass


def test_an_honest_implementation_is_not_refused():
    with forbid_calls(FORBID, exercise="stable_softmax"):
        got = _honest(X, 4)
    assert torch.allclose(got, torch.softmax(X, dim=-1))
    assert code_key(_honest.__code__) != code_key(reference.online_softmax.__code__)
