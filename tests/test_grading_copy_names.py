"""Colab's "Copy of X.ipynb" and a browser's "X (1).ipynb" are read as X.ipynb.

Before `copy_names`, a student's folder holding ``Copy of 00_warmup.ipynb`` was refused
("the file name says student 'Copy of' but it is in the collection folder of 'alice'"), and
in the flat layout ``carol_00_warmup (2).ipynb`` became a student named ``carol_ (2)``.
Now both are graded as the student's lab, with a note; two files that read as the same
name are one submission and one reported problem that says why; a copy never displaces the
unmarked file of the student it names. Identification only: no kernel runs here.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from mlinfra_lab.grading import load_source_labs, release_node
from mlinfra_lab.grading.copy_names import original_stem
from mlinfra_lab.grading.submissions import find_submissions

pytestmark = pytest.mark.grading
WARMUP = Path(__file__).resolve().parents[1] / "labs" / "00_warmup.ipynb"


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    labs = load_source_labs(WARMUP)
    released = release_node(labs["00_warmup"].notebook, "00_warmup")
    root = tmp_path_factory.mktemp("copies")
    files = {
        "folders/alice/Copy of 00_warmup.ipynb": "a",
        "folders/bob/00_warmup (1).ipynb": "b",
        "folders/dan/00_warmup.ipynb": "d1",  # two files that read as one
        "folders/dan/00_warmup (1).ipynb": "d2",
        "folders/erin/00_warmup.ipynb": "e",  # the honest neighbour
        "flat/carol_00_warmup (2).ipynb": "c",
        "flat/Copy of frank_00_warmup.ipynb": "mallory",  # a copy named after frank
        "flat/frank_00_warmup.ipynb": "frank",
    }
    for name, tag in files.items():
        nb = nbformat.from_dict(released)
        nb.metadata["tag"] = tag  # different bytes per file
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(root / name))
    subs, problems = find_submissions([root / "folders", root / "flat"], labs)
    return {s.student: s for s in subs}, problems


def test_copies_are_graded_as_the_lab_of_their_student(found):
    subs, _ = found
    assert {s: (sub.lab, sub.notebook.metadata["tag"]) for s, sub in subs.items()} == {
        "alice": ("00_warmup", "a"),
        "bob": ("00_warmup", "b"),
        "carol": ("00_warmup", "c"),
        "dan": ("00_warmup", "d1"),
        "erin": ("00_warmup", "e"),
        "frank": ("00_warmup", "frank"),
    }
    assert any("a Colab copy ('Copy of')" in n for n in subs["alice"].notes)
    assert any("a browser's copy ('(1)')" in n for n in subs["bob"].notes)
    assert subs["erin"].notes == (), "the honest neighbour has nothing to explain"


def test_two_files_that_read_as_one_are_both_shown_with_the_reason(found):
    subs, problems = found
    by_student = {p.student: p for p in problems}
    assert set(by_student) == {"dan", "frank"}
    assert "(1).ipynb" in by_student["dan"].path and "Colab 'Copy of'" in by_student["dan"].message
    assert "Copy of frank" in by_student["frank"].path, "the copy never displaces frank's file"
    assert any("disputed" in n for n in subs["dan"].notes)


def test_only_the_marks_tools_write_are_taken_off():
    assert original_stem("Copy of Copy of x (1) (2)") == ("x", ("Copy of", "Copy of", "(2)", "(1)"))  # fmt: skip
    for stem in ("Copy", "lab_02", "(1)", "Copy of", "copy of x"):
        assert original_stem(stem) == (stem, ())
