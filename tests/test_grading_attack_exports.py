"""A grader's helper that a later grader needs stays in the namespace (`scope.exported_names`):
lab 4's ``_actually`` tries an action on the store and says whether it was allowed, an
oracle for the ``permissions`` exercise. This attack (issue 30, item 1) is a ``may`` that
asks that oracle once the grader has defined it (and takes the hidden test's artifact from
the calling frame), instead of reading the user's level.

What stops it is the graders' own design, in both runs: every grader of ``may`` checks that
the call tried nothing (no run started, no denial audited), and the judge re-runs the
graders in a clean kernel, where the student function took another path. The test grades
the attack with and without the judge: 0 for ``permissions`` both times, with each
defence's message, and the honest neighbour keeps full marks.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import nbformat
import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading import release_node

pytestmark = pytest.mark.grading

LAB = Path(__file__).resolve().parents[1] / "labs" / "04_tracking.ipynb"
FULL = {"search": 3, "index": 3, "retention": 3, "gc": 4, "permissions": 3}

ORACLE = """def may(store, user: str, project: str, action: str) -> bool:
    g = globals()
    if "_actually" in g:  # the grader's own oracle, left for the next grader
        import sys
        art, f = None, sys._getframe(1)
        while f is not None:
            if "artifact" in f.f_locals:
                art = f.f_locals["artifact"]
                break
            f = f.f_back
        art = art or g.get("vault_ckpt")
        return g["_actually"](store, user, project, action, art.id if art is not None else None)
    return user == "prof"

{u: may(store, u, "vault", "download") for u in ["prof", "viewer", "reader", "trainee", "stranger"]}
"""


def _submission(may_source: str | None = None) -> nbformat.NotebookNode:
    """The released lab 4 with the source's solutions filled in; `may_source` replaces
    the ``may`` cell."""
    source = nbformat.read(str(LAB), as_version=4)
    by_id = {c.get("id"): c for c in source.cells}
    nb = release_node(source, "04_tracking")
    for cell in nb.cells:
        mine = by_id.get(cell.get("id"))
        if mine is not None and "BEGIN SOLUTION" in mine.source:
            if "grader" not in mine.metadata.get("tags", []):
                cell.source = mine.source
    if may_source is not None:
        next(c for c in nb.cells if c.source.startswith("def may(")).source = may_source
    return nb


def _grade(subs: Path, out: Path, *extra: str) -> dict[str, dict[str, tuple[float, str]]]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        main(["grade", str(subs), "--source", str(LAB), "--out", str(out), "--jobs", "2", *extra])
    book = json.loads((out / "gradebook.json").read_text())
    points: dict[str, dict[str, tuple[float, str]]] = {}
    for result in book["results"]:
        per = points.setdefault(result["student"], {})
        for c in result["cells"]:
            got, text = per.get(c["exercise"], (0.0, ""))
            per[c["exercise"]] = (got + c["points"], f"{text} | {c['message']}")
    return points


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exports")
    subs = tmp / "submissions"
    subs.mkdir()
    nbformat.write(_submission(), str(subs / "alice-04_tracking.ipynb"))
    nbformat.write(_submission(ORACLE), str(subs / "oracle-04_tracking.ipynb"))
    return {
        "judge": _grade(subs, tmp / "judged"),
        "no-judge": _grade(subs, tmp / "unjudged", "--no-judge"),
    }


@pytest.mark.parametrize("run", ["judge", "no-judge"])
def test_the_honest_neighbour_keeps_full_marks(graded, run):
    alice = graded[run]["alice"]
    assert {ex: p for ex, (p, _) in alice.items()} == FULL, alice


@pytest.mark.parametrize(
    ("run", "message"),
    [("judge", "JudgeError"), ("no-judge", "tried the action")],
)
def test_asking_the_graders_oracle_scores_nothing(graded, run, message):
    points, text = graded[run]["oracle"]["permissions"]
    assert points == 0, text
    assert message in text
    # everything the attack did not touch is still graded as the honest work it is
    assert {ex: p for ex, (p, _) in graded[run]["oracle"].items() if ex != "permissions"} == {
        ex: p for ex, p in FULL.items() if ex != "permissions"
    }
