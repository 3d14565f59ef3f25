"""Late submissions (issue 30, item 4): the stated policy, and a deadline that re-prices a
stored gradebook without regrading.

The gradebook is a real one (SQLite, views, manifest) written from a small report in
process: the policy is arithmetic on stored scores, so no kernel needs to run.
"""

from __future__ import annotations

import contextlib
import csv
import io

import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.gradebook_db import Policy
from mlinfra_lab.grading.late import (
    LatePolicyError,
    late_penalty,
    lateness,
    parse_due,
    submission_time,
)
from mlinfra_lab.grading.manifest import verify_gradebook
from mlinfra_lab.grading.views import BookSession, store_report

pytestmark = pytest.mark.grading
SECRET = "late-s3cret"
DUE = "2026-12-01T12:00:00+00:00"


@pytest.mark.parametrize(
    ("submitted", "days", "pct"),
    [
        ("2026-12-01T12:00:00+00:00", None, None),  # on the deadline: on time
        ("2026-12-01T12:00:01+00:00", 1, 10.0),  # a second late is a day started
        ("2026-12-02T12:00:00+00:00", 1, 10.0),
        ("2026-12-02T12:00:01+00:00", 2, 20.0),
        ("2026-12-01T13:00:00+01:00", None, None),  # the same instant in another zone
        ("2026-12-30T00:00:00+00:00", 29, 50.0),  # capped
    ],
)
def test_every_day_or_part_of_a_day_costs_the_rate_up_to_the_cap(submitted, days, pct):
    policy = Policy("lab", DUE, 10.0, 50.0)
    penalty = late_penalty(8.0, submitted, policy)
    if days is None:
        assert penalty is None
    else:
        assert (penalty.days, penalty.pct, penalty.points) == (days, pct, 8.0 * pct / 100)


def test_grace_and_the_edges_of_the_policy():
    graced = Policy("lab", DUE, 10.0, 100.0, grace_s=3600)
    assert late_penalty(5.0, "2026-12-01T12:59:59+00:00", graced) is None
    assert late_penalty(5.0, "2026-12-01T13:00:01+00:00", graced).days == 1
    assert late_penalty(0.0, "2027-01-01T00:00:00+00:00", graced).points == 0, "0 stays 0"
    assert late_penalty(5.0, None, graced) is None, "no known time: no penalty"
    assert parse_due("lab2=2026-12-01T12:00") == ("lab2", DUE), "no zone: UTC"
    assert parse_due("2026-12-01T13:00+01:00") == (None, DUE)
    with pytest.raises(LatePolicyError, match="ISO 8601"):
        parse_due("next friday")
    assert submission_time("x.ipynb", "2026-12-01T13:00+01:00") == DUE


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _book(tmp_path):
    cells = (
        CellResult("g1", "softmax", 2.0, 2.0, True, ""),
        CellResult("g2", "lse", 2.0, 2.0, True, ""),
    )
    report = GradeReport(
        tuple(GradeResult(s, "00_warmup", f"{s}.ipynb", cells, "ab" * 32) for s in ("ann", "ben")),
        (),
        sources=(("00_warmup", "/labs/00_warmup.ipynb", "cd" * 32),),
    )
    times = {("ann", "00_warmup"): "2026-12-01T11:00:00+00:00", ("ben", "00_warmup"): "2026-12-03T11:00:00+00:00"}  # fmt: skip
    with BookSession(tmp_path / "gb", SECRET, create=True) as book:
        store_report(book.db, report, command="grade", by="test", submitted_at=times)
        book.commit()
    return tmp_path / "gb"


def _totals(gb) -> dict[str, float]:
    totals: dict[str, float] = {}
    with open(gb / "gradebook.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            totals[row["student"]] = totals.get(row["student"], 0.0) + float(row["points"])
    return totals


def test_a_deadline_reprices_the_stored_gradebook_without_regrading(tmp_path):
    gb = _book(tmp_path)
    assert _totals(gb) == {"ann": 4.0, "ben": 4.0}
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--due", f"00_warmup={DUE}", "--late-penalty", "25"])  # fmt: skip
    assert code == 0, err
    assert _totals(gb) == {"ann": 4.0, "ben": 2.0}, "ben: 2 days late, -50% of 4"
    with open(gb / "gradebook.csv", newline="") as fh:
        late = [r for r in csv.DictReader(fh) if r["exercise"] == "late penalty"]
    assert [(r["student"], r["points"], r["max"]) for r in late] == [("ben", "-2", "0")]
    assert "2 days late" in late[0]["message"] and "25%" in late[0]["message"]
    # a later cap keeps the deadline and the rate it does not name
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--late-cap", "30"])
    assert code == 0, err
    assert _totals(gb) == pytest.approx({"ann": 4.0, "ben": 2.8})
    assert verify_gradebook(gb, SECRET).ok
    code, err = _cli(["grade", "--secret", SECRET, "--out", str(gb), "--due", "nolab=2026-12-01"])
    assert code == 2 and "no lab 'nolab'" in err


def test_the_message_says_how_late_not_only_the_days_counted():
    policy = Policy("00_warmup", "2026-12-01T12:00:00+00:00", 10.0, 100.0)
    penalty = late_penalty(4.0, "2026-12-01T12:31:00+00:00", policy)
    assert penalty is not None and penalty.days == 1 and penalty.points == pytest.approx(0.4)
    text = penalty.message(policy)
    assert text.startswith("submitted 31 minutes late") and "submitted 1 day" not in text
    assert "counted 1 day late" in text
    assert lateness(59) == "less than a minute" and lateness(3600 * 5 + 120) == "5 hours 2 minutes"
    assert lateness(86400 * 2 + 3600 * 3 + 60) == "2 days 3 hours" and lateness(86400) == "1 day"
