"""Graders that cannot be bypassed (issue 11): forbidden calls, the secret, read-only cells,
wrong answers.

The guard itself is tested in-process (no kernel). The end-to-end tests share three nbval
batches built on one small synthetic lab (numpy and hashlib only, no torch): grading with
the default secret, grading with another secret, and validating. The course function the
lab forbids is a real, light one (`mlinfra_lab.grading.markers.checksum`), standing in for
the course's implementations of an answer (``online_softmax`` and the like).

The lab: exercise ``checksum`` (its grader forbids the course's ``checksum``; a wrong
answer calls it), ``digest`` (same forbid list; no wrong answer), ``double`` (a hidden test
drawing its inputs from `grading_rng`, run through a read-only wrapper ``lab_double``; one
wrong answer is caught, one passes on purpose).
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

from mlinfra_lab.cli import main
from mlinfra_lab.grading import (
    DEFAULT_SECRET,
    SECRET_ENV,
    CallGuardError,
    ForbiddenCallError,
    MarkerError,
    forbid_calls,
    grading_rng,
    guard_source,
    load_source_labs,
    release_node,
    restore_graders,
)
from mlinfra_lab.grading import markers as course

pytestmark = pytest.mark.grading

FORBID = ["mlinfra_lab.grading.markers.checksum"]
MESSAGE = (
    "ForbiddenCallError: exercise {}: your code called "
    "mlinfra_lab.grading.markers.checksum, the course's own implementation; "
    "write it yourself"
)
OTHER_SECRET = "not-the-release-secret-8c1f"
CELL_TIMEOUT = "30"


def _code(cell_id: str, text: str, **metadata) -> nbformat.NotebookNode:
    cell = new_code_cell(textwrap.dedent(text).strip(), metadata=metadata)
    cell.id = cell_id
    return cell


def _wrong(cell_id: str, exercise: str, why: str, text: str, **more) -> nbformat.NotebookNode:
    cell = new_raw_cell(
        textwrap.dedent(text).strip(),
        metadata={"tags": ["wrong-answer"], "exercise": exercise, "why": why, **more},
    )
    cell.id = cell_id
    return cell


def _grader(cell_id: str, exercise: str, points: int, text: str, forbid=()):
    meta = {"tags": ["grader"], "points": points, "exercise": exercise}
    if forbid:
        meta["forbid"] = list(forbid)
    return _code(cell_id, text, **meta)


def _lab_cells(grader_calls_forbidden: bool = False) -> list:
    cells = [
        new_markdown_cell("# Guarded lab"),
        _code(
            "setup",
            """
            import hashlib
            import numpy as np
            from mlinfra_lab.grading import grading_rng""",
        ),
        _code(
            "checksum-solution",
            """
            def my_checksum(text):
                ### BEGIN SOLUTION
                return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
                ### END SOLUTION""",
            exercise="checksum",
        ),
        _grader(
            "checksum-grader",
            "checksum",
            1,
            """
            assert my_checksum("abc") == "sha256:" + hashlib.sha256(b"abc").hexdigest(), \\
                "my_checksum('abc') is not 'sha256:' + the hex digest" """,
            FORBID,
        ),
        _wrong(
            "checksum-wrong",
            "checksum",
            "calls the course's own checksum",
            """
            from mlinfra_lab.grading.markers import checksum as _course_checksum

            def my_checksum(text):
                return _course_checksum(text)""",
        ),
        _code(
            "digest-solution",
            """
            def my_digest(text):
                ### BEGIN SOLUTION
                return hashlib.sha256(text.encode()).hexdigest()
                ### END SOLUTION""",
            exercise="digest",
        ),
        _grader(
            "digest-grader",
            "digest",
            1,
            """
            assert my_digest("xyz") == hashlib.sha256(b"xyz").hexdigest(), \\
                "my_digest('xyz') is not the hex digest" """,
            FORBID,
        ),
        _code(
            "lab-helper",
            '''
            def lab_double(x):
                """The course's wrapper the grader calls (read-only)."""
                return double(np.asarray(x, dtype=float))''',
            tags=["readonly"],
        ),
        _code(
            "double-solution",
            """
            def double(x):
                ### BEGIN SOLUTION
                return 2 * x
                ### END SOLUTION""",
            exercise="double",
        ),
        _grader(
            "double-grader",
            "double",
            2,
            """
            # the hidden test draws its inputs from the grading secret
            ### BEGIN HIDDEN TESTS
            x = grading_rng("double").normal(size=4)
            assert np.allclose(lab_double(x), 2 * x), "double(x) must be 2 * x"
            ### END HIDDEN TESTS""",
        ),
        _wrong(
            "double-wrong-triple",
            "double",
            "triples instead of doubling",
            """
            def double(x):
                return 3 * x""",
        ),
        _wrong(
            "double-wrong-passes",
            "double",
            "x + x (which is right: the graders pass)",
            """
            def double(x):
                return x + x""",
            replaces="double-solution",
        ),
    ]
    if grader_calls_forbidden:  # a grader that itself calls a function it forbids
        cells.append(
            _grader(
                "digest-grader-2",
                "digest",
                1,
                """
            assert my_digest("q") == course_checksum("q")[7:], "my_digest('q') is wrong" """,
                FORBID,
            )
        )
        cells[1].source += "\nfrom mlinfra_lab.grading.markers import checksum as course_checksum"
    return cells


def _write_lab(path: Path, **options) -> Path:
    nb = new_notebook(
        cells=_lab_cells(**options),
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def _cell(nb, cell_id):
    return next(c for c in nb.cells if c.get("id") == cell_id)


# ---------------------------------------------------------------- the guard, in-process


def test_forbidden_calls_fail_through_aliases_threads_and_a_swallowed_error():
    alias = course.checksum  # bound before the guard, as a student's earlier cell would
    with pytest.raises(
        ForbiddenCallError,
        match="exercise ex1: your code called "
        r"mlinfra_lab.grading.markers.checksum, the course's own",
    ):
        with forbid_calls(FORBID, exercise="ex1"):
            alias("x")
    with pytest.raises(ForbiddenCallError, match="exercise ex2"):
        with forbid_calls(FORBID, exercise="ex2"):
            try:
                {"f": course.checksum}["f"]("x")
            except ForbiddenCallError:
                pass  # the student's code swallows it: leaving the block raises it again

    def in_a_thread():
        with contextlib.suppress(ForbiddenCallError):  # the thread swallows it too
            alias("x")

    with (
        pytest.raises(ForbiddenCallError, match="exercise ex3"),
        forbid_calls(FORBID, exercise="ex3"),
    ):
        worker = threading.Thread(target=in_a_thread)
        worker.start()
        worker.join()
    with forbid_calls(FORBID, exercise="ok"):  # other code, even the same module, runs
        assert course.has_markers("x = 1") is False
    assert sys.getprofile() is None


LAZY_GUARD = """
import json, sys
from mlinfra_lab.grading.errors import ForbiddenCallError
from mlinfra_lab.grading.forbid import forbid_calls
NAME = "mlinfra_lab.attention.reference.online_softmax"
caught = []

def student(how):
    import importlib
    module = importlib.import_module("mlinfra_lab.attention.reference")
    fn = module.online_softmax
    if how == "copy":  # a fresh function object over a renamed code: a copy
        import types
        code = fn.__code__.replace(co_name="mine")
        fn = types.FunctionType(code, fn.__globals__, "mine", fn.__defaults__)
    return fn([1.0, 2.0, 3.0], 2)

guard = forbid_calls([NAME], exercise="lazy")  # a fresh process: as a fresh kernel
imported_by_guard = "torch" in sys.modules or "mlinfra_lab.attention" in sys.modules
try:
    with guard:
        student(sys.argv[1])
except ForbiddenCallError as err:
    caught.append(str(err))
print(json.dumps([imported_by_guard, caught]))
"""


def test_a_module_the_kernel_never_imported_is_watched_from_its_source():
    """The guard does not import an entry's module (torch, Triton: seconds per notebook);
    a student function that imports it inside the grader, or calls a copy of its code, is
    still refused."""
    for how in ("import", "copy"):
        done = subprocess.run(
            [sys.executable, "-c", LAZY_GUARD, how], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        imported_by_guard, caught = json.loads(done.stdout.splitlines()[-1])
        assert imported_by_guard is (sys.version_info < (3, 11)), how  # see source_codes
        assert len(caught) == 1 and "called mlinfra_lab.attention.reference" in caught[0], how


def test_a_class_forbids_the_functions_of_its_body():
    from mlinfra_lab.grading.execute import ExecutionConfig

    with (
        pytest.raises(ForbiddenCallError, match=r"ExecutionConfig\.__init__"),
        forbid_calls(["mlinfra_lab.grading.execute.ExecutionConfig"], exercise="cls"),
    ):
        ExecutionConfig(cell_timeout=1.0)


def test_the_guard_fails_closed_and_restores_the_previous_profile(monkeypatch):
    def previous(frame, event, arg):
        return None

    sys.setprofile(previous)
    try:
        with (
            pytest.raises(CallGuardError, match="removed while the grader ran"),
            forbid_calls(FORBID, exercise="ex"),
        ):
            sys.setprofile(None)  # a student switching the guard off
        assert sys.getprofile() is previous
    finally:
        sys.setprofile(None)
    monkeypatch.setattr(sys, "setprofile", lambda fn: None)  # replaced before the grader
    with pytest.raises(CallGuardError, match="cannot be installed"):
        with forbid_calls(FORBID, exercise="ex"):
            pass


@pytest.mark.parametrize(
    "name, match",
    [
        ("numpy.exp", "must be the dotted path"),
        ("mlinfra_lab.grading.markers.no_such_function", "does not resolve"),
        ("mlinfra_lab.grading.markers.GRADER_TAG", "not a Python function"),
    ],
)
def test_forbid_names_are_validated(name, match):
    with pytest.raises(MarkerError, match=match):
        forbid_calls([name], exercise="ex")


def test_guard_source_indents_the_grader_but_not_its_multiline_strings():
    text = 'expected = """a\n  b"""\nassert expected.split() == ["a", "b"]'
    guarded = guard_source(text, FORBID, "ex")
    namespace: dict = {}
    exec(compile(guarded, "<grader>", "exec"), namespace)  # runs, and the string is intact
    assert namespace["expected"] == "a\n  b"
    assert guarded.splitlines()[1] == f"with _mlinfra_forbid_calls({FORBID!r}, exercise='ex'):"


# ------------------------------------------------ markers, release and restore, in-process


def test_release_drops_wrong_answers_locks_readonly_cells_and_keeps_graders_plain(tmp_path):
    lab = load_source_labs(_write_lab(tmp_path / "guarded.ipynb"))["guarded"]
    assert [w.cell_id for w in lab.wrong_answers] == [
        "checksum-wrong",
        "double-wrong-triple",
        "double-wrong-passes",
    ]
    assert {w.replaces for w in lab.wrong_answers} == {"checksum-solution", "double-solution"}
    released = release_node(lab.notebook, "guarded")
    assert not any("wrong-answer" in c.metadata.get("tags", []) for c in released.cells)
    text = "\n".join(c.source for c in released.cells)
    assert "_course_checksum" not in text and "3 * x" not in text
    helper = _cell(released, "lab-helper")
    assert helper.metadata["editable"] is False and helper.metadata["deletable"] is False
    assert "_mlinfra_forbid_calls" not in text, "the student sees the grader as written"
    for cell_type in ("code", "markdown"):  # a wrong answer that is not raw is never released
        bad = copy.deepcopy(lab.notebook)
        _cell(bad, "checksum-wrong").cell_type = cell_type
        with pytest.raises(MarkerError, match="make it a raw cell"):
            release_node(bad, "guarded")

    # grading puts an edited read-only cell back, and runs the forbid graders guarded
    helper.source = "def lab_double(x):\n    return 2 * np.asarray(x)"
    restored, notes = restore_graders(released, lab)
    assert _cell(restored, "lab-helper").source == _cell(lab.notebook, "lab-helper").source
    assert "read-only cell lab-helper was edited" in notes["lab-helper"].message
    assert _cell(restored, "checksum-grader").source.startswith(
        "from mlinfra_lab.grading.forbid import forbid_calls"
    )
    deleted = copy.deepcopy(released)
    deleted.cells = [c for c in released.cells if c.id != "lab-helper"]
    restored, notes = restore_graders(deleted, lab)
    assert [c.id for c in restored.cells] == [c.id for c in released.cells]
    assert notes["lab-helper"].status == "deleted"


def _malformed(cells_edit) -> list:
    cells = _lab_cells()
    cells_edit(cells)
    return cells


@pytest.mark.parametrize(
    "edit, cell_id, match",
    [
        (
            lambda cs: cs[4].update(cell_type="code", outputs=[], execution_count=None),
            "checksum-wrong",
            "make it a raw cell",
        ),
        (lambda cs: cs[4].metadata.update(exercise="nope"), "checksum-wrong", "no grader"),
        (
            lambda cs: cs[4].metadata.update(replaces="checksum-grader"),
            "checksum-wrong",
            "not a code cell of the student's",
        ),
        (
            lambda cs: cs[5].metadata.update(exercise="checksum"),
            "checksum-wrong",
            "2 solution cells",
        ),
        (
            lambda cs: cs[7].update(source="### BEGIN SOLUTION\nx = 1\n### END SOLUTION"),
            "lab-helper",
            "holds solution or hidden-test markers",
        ),
        (
            lambda cs: cs[3].metadata.update(forbid=["mlinfra_lab.grading.markers.nope"]),
            "checksum-grader",
            "does not resolve",
        ),
    ],
    ids=[
        "wrong-answer-not-raw",
        "unknown-exercise",
        "replaces-a-grader",
        "two-solution-cells",
        "markers-in-readonly",
        "unresolved-forbid",
    ],
)
def test_malformed_guards_are_marker_errors_naming_the_cell(tmp_path, edit, cell_id, match):
    nb = new_notebook(cells=_malformed(edit))
    nbformat.write(nb, str(tmp_path / "bad.ipynb"))
    with pytest.raises(MarkerError, match=match) as info:
        load_source_labs(tmp_path / "bad.ipynb")
    assert cell_id in str(info.value)


# ---------------------------------------------------------- grading, two nbval batches


def _submission(lab_nb, **cells: str):
    """The released lab with the source solutions filled in, then `cells` (id with
    underscores for dashes -> text) replacing cell texts; a text of None deletes the cell."""
    nb = release_node(lab_nb, "guarded")
    for cell in nb.cells:
        if cell.id.endswith("-solution"):
            cell.source = _cell(lab_nb, cell.id).source
    for key, text in cells.items():
        if text is None:
            nb.cells = [c for c in nb.cells if c.id != key.replace("_", "-")]
        else:
            _cell(nb, key.replace("_", "-")).source = textwrap.dedent(text).strip()
    return nb


SWALLOWED = """
    from mlinfra_lab.grading.markers import checksum

    def my_checksum(text):
        try:
            return checksum(text)
        except Exception:  # the guard's error, caught: the block's end still reports it
            return "sha256:" + hashlib.sha256(text.encode()).hexdigest()"""
ALIASED = """
    from mlinfra_lab.grading import markers
    digest_impl = markers.checksum

    def my_digest(text):
        return digest_impl(text).split(":")[1]"""
DIRECT = """
    from mlinfra_lab.grading.markers import checksum

    def my_checksum(text):
        return checksum(text)"""


SHADOWED = """
    def double(x):
        raise NotImplementedError("double: write your solution here")

    def lab_double(x):  # the read-only wrapper, redefined below its own cell
        return 2 * np.asarray(x, dtype=float)"""


def _grade(tmp: Path, lab: Path, subs: dict[str, object], *secret: str):
    for name, nb in subs.items():
        nbformat.write(nb, str(tmp / f"{name}.ipynb"))
    out, err, stdout = tmp / "gradebook", io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as mp,
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(stdout),
    ):
        mp.delenv(SECRET_ENV, raising=False)
        code = main(
            [
                "grade",
                *[str(tmp / f"{n}.ipynb") for n in subs],
                "--source",
                str(lab),
                "--out",
                str(out),
                "--timeout",
                CELL_TIMEOUT,
                *secret,
            ]
        )
    rows: dict[str, dict[str, dict]] = {}
    with open(out / "gradebook.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            rows.setdefault(row["student"], {})[row["exercise"]] = row
    return code, rows, (out / "gradebook.json").read_text(), err.getvalue() + stdout.getvalue()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Batch 1 (default secret): alice (honest, deleted the read-only helper), mallory
    (checksum: the course's, error swallowed; digest: an alias; double: a stub plus the
    read-only helper redefined in a later cell), trudy (checksum: the
    course's; double: a stub plus an edited helper), eve (double: outputs hard-coded).
    Batch 2 (another secret): alice and eve."""
    tmp = tmp_path_factory.mktemp("guards")
    lab = _write_lab(tmp / "labs" / "guarded.ipynb")
    source = nbformat.read(str(lab), as_version=4)
    seen = 2 * grading_rng("double", DEFAULT_SECRET).normal(size=4)  # what eve computed
    hard_coded = f"def double(x):\n    return np.array({seen.tolist()!r})"
    subs = {
        "alice": _submission(source, lab_helper=None),
        "mallory": _submission(
            source, checksum_solution=SWALLOWED, digest_solution=ALIASED, double_solution=SHADOWED
        ),
        "trudy": _submission(
            source,
            checksum_solution=DIRECT,
            double_solution="""
            def double(x):
                raise NotImplementedError("double: write your solution here")""",
            lab_helper="def lab_double(x):\n    return 2 * np.asarray(x, dtype=float)",
        ),
        "eve": _submission(source, double_solution=hard_coded),
    }
    (tmp / "one").mkdir()
    (tmp / "two").mkdir()
    first = _grade(tmp / "one", lab, subs)
    second = _grade(
        tmp / "two", lab, {k: subs[k] for k in ("alice", "eve")}, "--secret", OTHER_SECRET
    )
    return first, second


def _points(rows):
    return {exercise: float(row["points"]) for exercise, row in rows.items()}


def test_calling_the_course_implementation_scores_zero_with_the_reason(graded):
    code, rows, _, _ = graded[0]
    assert code == 0
    assert _points(rows["alice"]) == {"checksum": 1, "digest": 1, "double": 2}
    mallory, trudy = rows["mallory"], rows["trudy"]
    assert _points(mallory) == {"checksum": 0, "digest": 0, "double": 0}
    assert "NotImplementedError" in mallory["double"]["message"]  # the helper was re-run
    assert mallory["checksum"]["message"] == MESSAGE.format("checksum")  # swallowed
    assert mallory["digest"]["message"] == MESSAGE.format("digest")  # through an alias
    assert trudy["checksum"]["message"] == MESSAGE.format("checksum")  # a direct call
    assert float(trudy["digest"]["points"]) == 1  # an honest neighbour in the same notebook


def test_readonly_cells_are_restored_at_grading(graded):
    rows = graded[0][1]
    trudy = rows["trudy"]["double"]
    assert float(trudy["points"]) == 0, "an edited read-only wrapper must not pass the grader"
    assert "NotImplementedError" in trudy["message"]
    assert "read-only cell lab-helper was edited" in trudy["message"]
    alice = rows["alice"]["double"]
    assert float(alice["points"]) == 2
    assert "read-only cell lab-helper was missing" in alice["message"]


def test_hard_coded_hidden_outputs_fail_under_another_secret(graded):
    (_, default_rows, default_json, default_out), (code, rows, book, out) = graded
    assert float(default_rows["eve"]["double"]["points"]) == 2  # the default secret: fooled
    assert code == 0
    assert _points(rows["eve"]) == {"checksum": 1, "digest": 1, "double": 0}
    assert "double(x) must be 2 * x" in rows["eve"]["double"]["message"]
    assert _points(rows["alice"]) == {"checksum": 1, "digest": 1, "double": 2}
    assert json.loads(default_json)["config"]["non_default_secret"] is False
    assert "public default secret" in default_out
    assert json.loads(book)["config"]["non_default_secret"] is True
    assert OTHER_SECRET not in book and OTHER_SECRET not in out


# ------------------------------------------------------------- validating, one nbval batch


def test_validate_names_wrong_answers_that_pass_and_exercises_without_any(tmp_path, capsys):
    lab = _write_lab(tmp_path / "labs" / "guarded.ipynb", grader_calls_forbidden=True)
    assert main(["validate", str(lab), "--timeout", CELL_TIMEOUT]) == 1
    fails = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("FAIL:")]
    assert len(fails) == 3, fails
    assert any(
        "exercise double, cell double-wrong-passes" in ln
        and "x + x" in ln
        and "passes every grader" in ln
        for ln in fails
    ), fails
    assert any("exercise digest:" in ln and "no wrong answer" in ln for ln in fails), fails
    assert any(
        "cell digest-grader-2" in ln and "fails on the source" in ln and "ForbiddenCallError" in ln
        for ln in fails
    ), fails
    # caught: the triple (its grader fails) and the course's checksum (the guard refuses it)
    assert not any("double-wrong-triple" in ln or "checksum-wrong" in ln for ln in fails)
