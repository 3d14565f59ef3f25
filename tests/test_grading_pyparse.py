"""The grader's ``ast.parse`` under ``--jobs`` threads (issue 30: a crash CI saw twice).

CPython 3.11 keeps the recursion depth of its C-to-``ast`` converter in state all threads
share (see `mlinfra_lab.grading.pyparse`). The schedule that breaks it is made here on
purpose instead of waited for: thread A parses with the garbage collector primed so that
it collects inside A's conversion, where a finalizer written in Python hands the
interpreter to thread B, which parses too; A then finds its depth moved and raises
``SystemError``. With `pyparse.parse` B waits for A's parse to end, and both trees are
right. The same schedule with the bare ``ast.parse`` raises (the second test, on 3.11).
"""

from __future__ import annotations

import ast
import gc
import sys
import threading
from collections.abc import Callable

import pytest

from mlinfra_lab.grading.pyparse import parse

TEXT = "def f(x):\n    return [g(y) for y in x if y]\n" * 20
HANDOVER = 2.0  # seconds A's finalizer waits for B's parse to finish (it cannot, with the lock)
PRIMED = 50  # containers allocated before a collection: the parser makes a few, the converter ~700


class _Handover:
    """A cycle whose finalizer, run by the collector inside A's parse, lets B parse."""

    def __init__(self, b_started: threading.Event, b_done: threading.Event) -> None:
        self.me = self
        self.b_started, self.b_done = b_started, b_done

    def __del__(self) -> None:
        self.b_started.set()
        self.b_done.wait(HANDOVER)


def _race(parse_fn: Callable[[str], ast.Module]) -> tuple[list[BaseException], list[ast.Module]]:
    """Run the schedule of the module docstring with `parse_fn`; (errors, trees)."""
    errors: list[BaseException] = []
    trees: list[ast.Module] = []
    b_started, b_done = threading.Event(), threading.Event()

    def thread_a() -> None:
        threshold = gc.get_threshold()
        gc.collect()
        gc.disable()
        try:
            gc.set_threshold(PRIMED)  # collects inside the conversion, past the parser's few
            _Handover(b_started, b_done)  # unreachable now, collected only by the collector
            gc.enable()
            trees.append(parse_fn(TEXT))
        except BaseException as err:  # noqa: BLE001 - the test reads it
            errors.append(err)
        finally:
            gc.set_threshold(*threshold)
            b_started.set()  # a collector that ran elsewhere must not leave B waiting

    def thread_b() -> None:
        b_started.wait()
        try:
            trees.append(parse_fn(TEXT))
        except BaseException as err:  # noqa: BLE001
            errors.append(err)
        finally:
            b_done.set()

    was_enabled = gc.isenabled()
    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        if was_enabled:
            gc.enable()
    return errors, trees


def test_parsing_from_two_threads_inside_a_collection_gives_two_right_trees():
    errors, trees = _race(parse)
    assert errors == []
    assert [ast.dump(t) for t in trees] == [ast.dump(ast.parse(TEXT))] * 2


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the race is shown on CPython 3.11")
def test_the_same_schedule_breaks_the_bare_ast_parse():
    errors, _ = _race(ast.parse)
    assert any(
        isinstance(e, SystemError) and "recursion depth mismatch" in str(e) for e in errors
    ), errors
