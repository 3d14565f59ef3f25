"""Submissions that lie from inside their own kernel (issue 14, item 2: the judge).

A kernel-side reset before each grader cannot undo what a student's function does *while*
the grader calls it. One module-scoped ``mlinfra-lab grade --jobs 2`` call grades, beside an
honest neighbour, warm-up submissions whose wrong functions patch numpy's comparisons and
``abs`` during each call (so the grader in their kernel passes them), and two that also
forge the record the judge reads: one with a value naming a class outside the course
(``subprocess.Popen``), one with a symbolic link to the instructor's lab in the record's
place. Each must score 0 where it lied, the honest neighbour full marks, and nothing of the
instructor's lab may reach the gradebook. The same patching submission graded with
``--no-judge`` keeps full marks: the attack is real, and only the judge stops it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import nbformat
import pytest
from test_grading_pipeline import _student_copy, _write  # the same warm-up submissions
from test_grading_sandbox import require_bubblewrap

from mlinfra_lab.cli import main

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
FULL = {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}

LIE = """import builtins
import numpy as np


def _lie():
    # while the grader calls us: every comparison it makes agrees
    yes = lambda *a, **k: True
    np.all = np.allclose = np.isclose = yes
    np.abs = lambda x, *a, **k: np.zeros_like(np.asarray(x, dtype=float))
    np.max = lambda *a, **k: 0.0
    builtins.abs = lambda x: 0.0


def stable_softmax(x, axis=-1):
    _lie()
    e = np.exp(np.asarray(x))
    return e / e.sum(axis=axis, keepdims=True)


def logsumexp(x, axis=-1):
    _lie()
    return np.log(np.exp(np.asarray(x)).sum(axis=axis))"""

FORGE = """
import mlinfra_lab.grading.judge_record as _jr

_real_disarm = _jr.disarm


def _forged_disarm():
    for call in _jr._state["calls"]:
        call.pop("raised", None)
        call["result"] = {"~": "dataclass", "cls": "subprocess:Popen", "v": {"args": ["id"]}}
    return _real_disarm()


_jr.disarm = _forged_disarm"""

LINK = f"""
import os
import mlinfra_lab.grading.judge_record as _jr


def _linked_disarm():
    path = _jr._state["path"]
    _jr._reset()
    os.symlink({str(WARMUP)!r}, path)
    return "done"


_jr.disarm = _linked_disarm"""


def _liar(extra: str = ""):
    nb = _student_copy(softmax_solution=LIE + extra, lse_solution="pass")
    return nb


def _grade(subs: Path, out: Path, *flags: str) -> tuple[int, dict, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            ["grade", str(subs), "--source", str(WARMUP), "--out", str(out)]
            + ["--timeout", "30", "--jobs", "2", "--sandbox", "bwrap", *flags]
        )
    rows: dict[str, dict[str, dict]] = {}
    with open(out / "gradebook.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            rows.setdefault(row["student"], {})[row["exercise"]] = row
    return code, rows, err.getvalue()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require_bubblewrap()
    tmp = tmp_path_factory.mktemp("judge")
    subs = {
        "honest": _student_copy(),
        "patcher": _liar(),
        "forger": _liar(FORGE),
        "linker": _liar(LINK),
    }
    for student, nb in subs.items():
        _write(nb, tmp / "judged" / f"{student}.ipynb")
    _write(subs["patcher"], tmp / "unjudged" / "patcher.ipynb")
    judged = _grade(tmp / "judged", tmp / "gb-judged")
    unjudged = _grade(tmp / "unjudged", tmp / "gb-unjudged", "--no-judge")
    return {"judged": judged, "unjudged": unjudged, "out": tmp / "gb-judged"}


def _points(rows: dict[str, dict]) -> dict[str, float]:
    return {ex: float(r["points"]) for ex, r in rows.items()}


def test_the_patching_attack_wins_in_its_own_kernel(graded):
    code, rows, err = graded["unjudged"]
    assert code == 0, err
    assert _points(rows["patcher"]) == FULL


def test_the_judge_scores_the_values_not_the_kernel_s_comparisons(graded):
    code, rows, err = graded["judged"]
    assert code == 0, err
    assert _points(rows["honest"]) == FULL
    assert _points(rows["patcher"]) == {"stable_softmax": 0, "logsumexp": 0, "log_softmax": 3}
    for exercise in ("stable_softmax", "logsumexp"):
        assert rows["patcher"][exercise]["message"].startswith("judged outside your kernel:")


def test_a_forged_record_is_refused_before_anything_is_built(graded):
    _, rows, _ = graded["judged"]
    assert _points(rows["forger"]) == {ex: 0 for ex in FULL}
    assert "not the course's class" in rows["forger"]["stable_softmax"]["message"]


def test_a_link_in_place_of_the_record_is_never_followed(graded):
    _, rows, _ = graded["judged"]
    assert _points(rows["linker"]) == {ex: 0 for ex in FULL}
    message = rows["linker"]["stable_softmax"]["message"]
    # a sealed working folder (bubblewrap as root) takes no link at all: no record came
    assert "not a plain file" in message or "wrote no record" in message, message
    book = (graded["out"] / "gradebook.json").read_text()
    assert "BEGIN HIDDEN TESTS" not in book and "grading_rng" not in book
    assert json.loads(book)  # still a gradebook


SHADOW = """
import types

np = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
np.allclose = lambda *a, **k: True  # the grader's np, in this kernel: everything is close


def double(x):
    return 3 * x"""


def test_a_rebound_np_is_the_student_s_own_the_judge_imports_the_instructor_s(tmp_path):
    """The guards lab's grader checks ``np.allclose(lab_double(x), 2 * x)`` with the ``np`` its
    setup cell imported; this submission rebinds ``np`` in its solution cell. The judge runs
    the instructor's setup imports itself, so it compares with numpy's own ``allclose``."""
    from test_grading_guards import _submission, _write_lab

    lab = _write_lab(tmp_path / "labs" / "guarded.ipynb")
    source = nbformat.read(str(lab), as_version=4)
    _write(_submission(source, double_solution=SHADOW), tmp_path / "subs" / "shadow.ipynb")
    _write(_submission(source), tmp_path / "subs" / "honest.ipynb")
    points = {}
    for flags in ((), ("--no-judge",)):
        err = io.StringIO()
        out = tmp_path / f"gb{len(flags)}"
        with contextlib.redirect_stderr(err):
            code = main(
                ["grade", str(tmp_path / "subs"), "--source", str(lab), "--out", str(out)]
                + ["--timeout", "30", "--jobs", "2", *flags]
            )
        assert code == 0, err.getvalue()
        with open(out / "gradebook.csv", newline="") as fh:
            points[flags] = {
                (r["student"], r["exercise"]): float(r["points"]) for r in csv.DictReader(fh)
            }
    assert points[("--no-judge",)][("shadow", "double")] == 2  # the attack works in-kernel
    assert points[()][("shadow", "double")] == 0
    assert points[()][("honest", "double")] == 2
