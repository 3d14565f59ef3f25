"""using_reference: a later exercise graded with an earlier one's reference, then put back."""

from __future__ import annotations

import pytest

from mlinfra_lab.grading import using_reference


def test_binds_for_the_block_and_restores_even_on_error():
    ns = {"f": "student's", "later": lambda: ns["f"]}
    with using_reference(ns, f="reference", g="new"):
        assert ns["later"]() == "reference" and ns["g"] == "new"
    assert ns["f"] == "student's" and "g" not in ns
    with pytest.raises(AssertionError), using_reference(ns, f="reference"):
        raise AssertionError("the grader failed")
    assert ns["f"] == "student's"


def test_needs_a_name():
    with pytest.raises(TypeError, match="name=reference"), using_reference({}):
        pass


def test_partial_credit_sums_the_grader_cells_of_one_exercise():
    # lab 2's fit_ring: beta (2 points) passed, alpha (1 point) failed -> 2 of 3 on one row
    from mlinfra_lab.grading import CellResult, GradeReport, GradeResult, gradebook_rows

    cells = (
        CellResult("fit-grader", "fit_ring", 2.0, 2.0, True, ""),
        CellResult("fit-grader-alpha", "fit_ring", 0.0, 1.0, False, "alpha = 2.3e-05 s"),
        CellResult("eff-grader", "scaling_efficiency", 2.0, 2.0, True, ""),
    )
    result = GradeResult("ada", "02_scaling_debug", "ada.ipynb", cells)
    assert result.exercises() == {
        "fit_ring": (2.0, 3.0, "alpha = 2.3e-05 s"),
        "scaling_efficiency": (2.0, 2.0, ""),
    }
    rows = gradebook_rows(GradeReport((result,), ()))
    assert [(r["exercise"], r["points"], r["max"]) for r in rows] == [
        ("fit_ring", 2, 3),
        ("scaling_efficiency", 2, 2),
    ]
