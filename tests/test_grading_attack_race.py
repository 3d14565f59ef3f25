"""A student function that changes what the grader checks while the grader runs (issue 30).

Lab 0's hidden tests compute the expected value *after* the call, so a function cannot
return it; these submissions wait for it instead. Each ``stable_softmax`` answers the
visible tests' known inputs honestly (as answers copied from the release would) and, for
the hidden tests' inputs, returns an array of zeros, then, once the grader has computed
``want``, copies ``want`` into that very array (the grader's ``got``) and rewrites the
judge's record of the call to match, so that both kernels would pass:

- ``tracer``: a trace function it installs on the grader's frame (``sys.settrace`` and
  ``f_trace``) runs between the grader's lines, in the grader's own thread;
- ``thread``: a thread it starts watches the grader's frame (``sys._current_frames``) and
  does the same when it gets the interpreter (a race it usually wins: only the defended
  run, which scores 0 whoever wins, is asserted);
- ``early``: the same thread, started by the solution cell before any grader runs.

Before the fix the ``tracer`` submission scored 7/7. Now the recorder of each student
call (`judge_record`) refuses a call that returns with a trace function installed or a
thread of the notebook's (one the kernel did not have before its first cell) running: the trace is removed before the grader goes on, and the
call raises `GraderRaceError` in both kernels (a thread still running fails every later
grader's calls too). The honest neighbour keeps 7/7.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_grading_pipeline import _result_points as _points
from test_grading_pipeline import _student_copy, _write_cases

from mlinfra_lab.grading import ExecutionConfig, grade_submissions
from mlinfra_lab.grading.sandbox import make_sandbox

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
FULL = {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}

VISIBLE = """def stable_softmax(x, axis=-1):
    import sys
    x = np.asarray(x)
    seen = [[1.0, 2.0, 3.0], [10.0, 50.0, 89.0], [1.0, 5.0, 12.0], [[0.0, 0.0], [0.0, 1000.0]]]
    if any(np.shape(v) == x.shape and np.array_equal(np.asarray(v, x.dtype), x) for v in seen):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)
    out = np.zeros_like(x)
    record = sys.modules["mlinfra_lab.grading.judge_record"]._state

    grader = sys._getframe(1)
    while grader is not None and grader.f_code.co_name != "_mlinfra_grader":
        grader = grader.f_back
    stale = grader.f_locals.get("want")  # the previous case's

    def fix(frame):
        want = frame.f_locals.get("want")
        if frame.f_locals.get("got") is out and want is not None and want is not stale:
            np.copyto(out, want, casting="unsafe")
            record["calls"][-1]["result"] = record["encoder"].value(out)
            return True
        return False
"""

TRACER = (
    VISIBLE
    + """
    def line(frame, event, arg):
        if event == "line":
            fix(frame)
        return line

    grader.f_trace = line
    sys.settrace(lambda frame, event, arg: None)
    return out"""
)

THREAD = (
    VISIBLE
    + """
    import threading

    main = threading.get_ident()

    def watch():
        for _ in range(2_000_000):
            frame = sys._current_frames().get(main)
            while frame is not None and frame is not grader:
                frame = frame.f_back
            if frame is not None and fix(frame):
                return

    sys.setswitchinterval(1e-6)
    threading.Thread(target=watch, daemon=True).start()
    return out"""
)


EARLY = """import sys, threading
HOLD = {}

def stable_softmax(x, axis=-1):
    x = np.asarray(x)
    seen = [[1.0, 2.0, 3.0], [10.0, 50.0, 89.0], [1.0, 5.0, 12.0], [[0.0, 0.0], [0.0, 1000.0]]]
    if any(np.shape(v) == x.shape and np.array_equal(np.asarray(v, x.dtype), x) for v in seen):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "_mlinfra_grader":
        frame = frame.f_back
    HOLD.update(out=np.zeros_like(x), stale=frame.f_locals.get("want") if frame else None)
    return HOLD["out"]

def _watch(main=threading.get_ident()):
    while True:
        frame = sys._current_frames().get(main)
        while frame is not None and frame.f_code.co_name != "_mlinfra_grader":
            frame = frame.f_back
        if frame is None or "out" not in HOLD:
            continue
        want = frame.f_locals.get("want")
        if frame.f_locals.get("got") is HOLD["out"] and want is not None and want is not HOLD["stale"]:
            np.copyto(HOLD["out"], want, casting="unsafe")
            record = sys.modules["mlinfra_lab.grading.judge_record"]._state
            record["calls"][-1]["result"] = record["encoder"].value(HOLD["out"])
            HOLD["stale"] = want

sys.setswitchinterval(1e-6)
threading.Thread(target=_watch, daemon=True).start()  # in the cell, before any grader"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("race")
    cases = {
        "alice": _student_copy(),
        "tracer": _student_copy(softmax_solution=TRACER),
        "thread": _student_copy(softmax_solution=THREAD),
        "early": _student_copy(softmax_solution=EARLY),
    }
    paths = _write_cases(tmp, cases)
    report = grade_submissions(
        paths, WARMUP, ExecutionConfig(cell_timeout=60.0, jobs=2), sandbox=make_sandbox("auto")
    )
    return {r.student: r for r in report.results}


def test_the_honest_neighbour_keeps_full_marks(graded):
    assert _points(graded["alice"]) == FULL, graded["alice"].cells


@pytest.mark.parametrize("student", ["tracer", "thread", "early"])
def test_a_function_that_changes_the_check_while_it_runs_scores_nothing(graded, student):
    points = _points(graded[student])
    assert points["stable_softmax"] == 0.0, graded[student].cells
    if student == "tracer":  # its trace was removed: the later graders run as usual
        assert points == {**FULL, "stable_softmax": 0.0}, graded[student].cells
    message = graded[student].exercises()["stable_softmax"][2]
    assert "GraderRaceError" in message, message
