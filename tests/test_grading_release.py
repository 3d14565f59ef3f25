"""Release, markers, grader restoration and validation of labs (issue 2).

The release and restore tests run in-process on the warm-up lab (no kernel); the validate
tests run nbval: the real warm-up (source and release), and a tiny lab built here whose
graders are broken on purpose.
"""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from mlinfra_lab.cli import main
from mlinfra_lab.grading import (
    MarkerError,
    grader_cells,
    load_source_labs,
    release_node,
    release_notebook,
    replace_solutions,
    restore_graders,
)

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"


def _cell(nb, cell_id):
    return next(c for c in nb.cells if c.get("id") == cell_id)


def _student_ids(nb) -> list[str]:
    """The ids of the cells a release keeps: all but the wrong answers."""
    return [c.id for c in nb.cells if "wrong-answer" not in c.metadata.get("tags", [])]


def test_warmup_has_graded_exercises_with_hidden_tests():
    graders = grader_cells(nbformat.read(str(WARMUP), as_version=4), "00_warmup")
    assert [g.exercise for g in graders] == ["stable_softmax", "logsumexp", "log_softmax"]
    assert sum(g.points for g in graders) == 7
    assert any(g.has_hidden for g in graders)


def test_release_strips_solutions_and_hidden_tests_and_clears_outputs(tmp_path):
    source = nbformat.read(str(WARMUP), as_version=4)
    # give the source an output and a count, to prove the release clears them
    cell = _cell(source, "naive-demo")
    cell.outputs, cell.execution_count = [new_output("stream", name="stdout", text="x")], 3
    src = tmp_path / "00_warmup.ipynb"
    nbformat.write(source, str(src))
    out = release_notebook(src, tmp_path / "release")
    released = nbformat.read(str(out), as_version=4)

    text = "\n".join(c.source for c in released.cells)
    for marker in ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS"):
        assert marker not in text
    assert "shifted = x - x.max" not in text, "a solution line leaked into the release"
    assert "not log(softmax(x))" not in text, "a hidden test leaked into the release"
    stub = _cell(released, "softmax-solution").source.splitlines()
    assert stub == [
        "def stable_softmax(x, axis=-1):",
        '    raise NotImplementedError("stable_softmax: write your solution here")',
    ]
    assert all(
        c.outputs == [] and c.execution_count is None
        for c in released.cells
        if c.cell_type == "code"
    )
    assert released.metadata["mlinfra"]["lab"] == "00_warmup"
    assert [c.id for c in released.cells] == _student_ids(source)
    for g in grader_cells(source, "00_warmup"):
        cell = _cell(released, g.cell_id)
        assert cell.metadata["tags"] == ["grader"]
        assert cell.metadata["points"] == g.points and cell.metadata["exercise"] == g.exercise
        digest = hashlib.sha256(g.source.encode()).hexdigest()
        assert cell.metadata["checksum"] == f"sha256:{digest}"
        assert cell.source == g.visible
    nbformat.validate(released)


def test_release_command_writes_every_lab_of_a_folder(tmp_path, capsys):
    assert main(["release", str(REPO / "labs"), str(tmp_path)]) == 0
    assert (tmp_path / "00_warmup.ipynb").is_file()
    assert "released" in capsys.readouterr().out


def test_solution_stub_keeps_the_span_indentation():
    src = "def f():\n    x = 1\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n"
    assert replace_solutions(src, "ex1") == (
        'def f():\n    x = 1\n    raise NotImplementedError("ex1: write your solution here")'
    )


@pytest.mark.parametrize(
    "source, metadata, match",
    [
        ("### BEGIN SOLUTION\nx = 1", {}, "never closed"),
        (
            "x = 1\n### END HIDDEN TESTS",
            {"tags": ["grader"], "points": 1, "exercise": "e"},
            "without a",
        ),
        ("assert True", {"tags": ["grader"], "exercise": "e"}, "'points' must be a number"),
        ("assert True", {"tags": ["grader"], "points": 1}, "'exercise' must name"),
        ("### BEGIN HIDDEN TESTS\nassert 1\n### END HIDDEN TESTS", {}, "only sit in a grader"),
    ],
)
def test_malformed_markers_raise_an_error_naming_the_cell(source, metadata, match):
    cell = new_code_cell(source, metadata=metadata)
    cell.id = "bad-cell"
    with pytest.raises(MarkerError, match=match) as info:
        release_node(new_notebook(cells=[cell]), "lab")
    assert "bad-cell" in str(info.value)


def test_restore_replaces_edited_graders_and_reinserts_deleted_ones():
    lab = load_source_labs(WARMUP)["00_warmup"]
    sub = release_node(lab.notebook, "00_warmup")
    _cell(sub, "softmax-grader").source = "pass"
    sub.cells = [c for c in sub.cells if c.id != "lse-grader"]
    del _cell(sub, "logsoftmax-grader")["id"]  # an old tool dropped this id: found by checksum
    restored, notes = restore_graders(sub, lab)
    assert [c.id for c in restored.cells] == _student_ids(lab.notebook)
    for g in lab.graders:  # full source text, hidden tests included (guarded if it forbids)
        assert _cell(restored, g.cell_id).source == g.run_source
    assert {k: n.status for k, n in notes.items() if k.endswith("-grader")} == {
        "softmax-grader": "edited",
        "lse-grader": "deleted",
        "logsoftmax-grader": "as released",
    }
    assert notes["logsoftmax-grader"].message == ""


def _tiny_lab(path: Path, graders: dict[str, str]) -> Path:
    """A lab with one solution cell and the given grader cells (id -> source), no torch."""
    solution = new_code_cell(
        textwrap.dedent("""\
        def double(x):
            ### BEGIN SOLUTION
            return 2 * x
            ### END SOLUTION""")
    )
    solution.id = "solution"
    cells = [new_markdown_cell("# Tiny lab"), solution]
    for cell_id, text in graders.items():
        cell = new_code_cell(text, metadata={"tags": ["grader"], "points": 1, "exercise": "double"})
        cell.id = cell_id
        cells.append(cell)
    nb = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def test_validate_names_a_grader_that_cannot_fail_or_fails_on_the_source(tmp_path, capsys):
    labs = tmp_path / "labs"
    _tiny_lab(
        labs / "tiny.ipynb",
        {
            "good-grader": "assert double(2) == 4, 'double(2) must be 4'",
            "constant-grader": "assert 2 * 2 == 4, 'checks a constant'",
            "wrong-grader": "assert double(2) == 5, 'wrong key'",
        },
    )
    placeholder = new_notebook(cells=[new_markdown_cell("# Placeholder")])
    nbformat.write(placeholder, str(labs / "placeholder.ipynb"))
    # --jobs 2: the source and the release run side by side (exercises the multi-job path)
    assert main(["validate", str(labs), "--timeout", "60", "--jobs", "2"]) == 1
    err = capsys.readouterr().err
    fails = [ln for ln in err.splitlines() if ln.startswith("FAIL:")]
    assert len(fails) == 3, err
    assert any(
        "tiny" in ln and "double" in ln and "constant-grader" in ln and "cannot fail" in ln
        for ln in fails
    ), fails
    assert any(
        "wrong-grader" in ln and "fails on the source" in ln and "wrong key" in ln for ln in fails
    ), fails
    assert any("exercise double:" in ln and "no wrong answer" in ln for ln in fails), fails
    assert "warning: lab placeholder: no grader cells" in err


def test_submissions_are_matched_to_a_lab_and_named_after_the_student(tmp_path):
    from mlinfra_lab.grading.submissions import find_submissions

    labs = load_source_labs(WARMUP)
    released = release_node(labs["00_warmup"].notebook, "00_warmup")
    unstamped = release_node(labs["00_warmup"].notebook, "00_warmup")
    del unstamped.metadata["mlinfra"]  # a tool that dropped the metadata
    files = {
        "alice.ipynb": released,  # lab from the metadata
        "bob_00_warmup.ipynb": unstamped,  # lab from the file name
        "carol/00_warmup.ipynb": released,  # a folder per student
        "dave.ipynb": unstamped,  # neither: cannot tell the lab
        "carol/carol.ipynb": released,  # carol twice
    }
    for name, nb in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        nbformat.write(nb, str(tmp_path / name))
    subs, problems = find_submissions([tmp_path], labs)
    assert sorted((s.student, s.lab) for s in subs) == [
        ("alice", "00_warmup"),
        ("bob", "00_warmup"),
        ("carol", "00_warmup"),
    ]
    assert sorted(Path(p.path).name for p in problems) == ["carol.ipynb", "dave.ipynb"]
    assert any("cannot tell which lab" in p.message for p in problems)
    assert any("a second submission" in p.message for p in problems)


def test_a_reworded_grader_is_an_older_release_not_a_student_edit(tmp_path):
    """The instructor rewords a grader's message after release and regrades: a submission
    made from the earlier release differs from the current visible text, but the student
    edited nothing, and the gradebook must not say they did."""
    old = "assert double(2) == 4, 'double(2) should be 4'"
    new = "assert double(2) == 4, 'double(2) must return 4 (twice its argument)'"
    before = load_source_labs(_tiny_lab(tmp_path / "v1" / "tiny.ipynb", {"g": old}))["tiny"]
    after = load_source_labs(_tiny_lab(tmp_path / "v2" / "tiny.ipynb", {"g": new}))["tiny"]
    honest = release_node(before.notebook, "tiny")  # as handed out, untouched
    _, notes = restore_graders(honest, after)
    assert notes["g"].status == "as released" and notes["g"].older_release
    assert "edited" not in notes["g"].message and "older release" in notes["g"].message
    cheat = release_node(after.notebook, "tiny")  # the current release, grader rewritten
    _cell(cheat, "g").source = "pass"
    _, notes = restore_graders(cheat, after)
    assert notes["g"].status == "edited" and "was edited" in notes["g"].message


def test_a_forced_regrade_after_rewording_a_grader_says_no_student_edited_it(tmp_path):
    """The whole flow: release v1, grade, reword the grader in the source, ``--force``."""
    import contextlib
    import io
    import json

    old = "assert double(2) == 4, 'double(2) should be 4'"
    source = _tiny_lab(tmp_path / "labs" / "tiny.ipynb", {"g": old})
    released = release_node(load_source_labs(source)["tiny"].notebook, "tiny")
    for student, body in (("ann", "return 2 * x"), ("eve", "return x")):
        nb = nbformat.from_dict(released)
        _cell(nb, "solution").source = f"def double(x):\n    {body}"
        (tmp_path / "subs" / student).mkdir(parents=True)
        nbformat.write(nb, str(tmp_path / "subs" / student / "tiny.ipynb"))
    argv = ["grade", str(tmp_path / "subs"), "--source", str(source), "--out", str(tmp_path / "gb")]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*argv, "--feedback"]) == 0
        _tiny_lab(source, {"g": old.replace("should be 4", "must return 4 (twice x)")})
        assert main([*argv, "--force", "--feedback"]) == 0
    rows = json.loads((tmp_path / "gb" / "gradebook.json").read_text())["rows"]
    assert {r["student"]: r["points"] for r in rows} == {"ann": 1, "eve": 0}
    assert all("edited" not in r["message"] for r in rows), rows
    assert all("older release" in r["message"] for r in rows)
    assert "edited" not in (tmp_path / "gb" / "feedback" / "eve" / "tiny.md").read_text()
