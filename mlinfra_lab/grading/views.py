"""The gradebook folder as views of its database: open it verified, change it, rewrite it.

Contract: ``with BookSession(out_dir, secret) as book:`` verifies the folder against its
manifest (an empty or new folder needs ``create=True``), opens a working copy of
``gradebook.sqlite`` as ``book.db`` (a `GradebookDB`), and `book.report()` is the
`GradeReport` the database holds now (manual points and late penalties applied);
`book.commit()` rewrites ``gradebook.csv``, ``gradebook.json``, ``manual.csv``, the
database and ``manifest.json``, each atomically, and returns that report. Leaving the block
without `commit` changes nothing on disk.

Design decisions:
- Work on a copy: the database is copied beside itself and the copy is changed; `commit`
  puts it in place with the views it was written with, so a run that stops half-way (an
  error, Ctrl-C) leaves the old database and its old, matching manifest.
- A hand mark given for another text of the answer (the student resubmitted) does not
  count: the cell reads pending (or "no answer") with the earlier mark named, and the
  earlier text is in ``gradebook.json``'s record (see `gradebook_db`).
- Verify before changing, as ``--merge`` and ``--manual`` always did: a database edited
  outside this tool must not come out sealed. ``manual.csv`` filled in but not merged is
  refused by name (a regrade would rewrite it, losing what was typed), except by the
  ``--manual`` merge of that very sheet.
- A folder graded before the database existed (``gradebook.json`` and a manifest only) is
  imported on first use: its results become a run named ``import`` and its hand-graded
  points become manual entries, so they survive regrades too.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from .errors import GradingError
from .grade import GradeReport
from .gradebook import Comments, write_gradebook
from .gradebook_db import DB_NAME, BookState, GradebookDB
from .late import LATE_CELL_ID, LATE_EXERCISE, late_penalty
from .manifest import MANIFEST_NAME, verify_gradebook
from .merge import report_from_json

__all__ = ["BookError", "BookSession", "report_from_state", "store_report"]

BY_HAND = "graded by hand"


class BookError(GradingError):
    """The gradebook folder cannot be changed as asked (the message says what to do)."""


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 4)


def report_from_state(state: BookState) -> tuple[GradeReport, Comments]:
    """The `GradeReport` of `state` (manual points and late penalties applied) and the
    instructor's comments by (student, lab, cell id)."""
    comments = {key: e.comment for key, e in state.manual.items() if e.comment}
    later = {(p["student"], p["lab"]): p["message"] for p in state.problems if p["lab"]}
    results = []
    for sub in state.submissions:
        cells = []
        for cell in sub.cells:
            cell = dict(cell)
            entry = state.manual.get((sub.student, sub.lab, cell["cell_id"]))
            if cell["manual"] and entry and entry.points is not None:
                points = min(entry.points, cell["max_points"])
                cell.update(
                    points=points,
                    passed=points == cell["max_points"],
                    message=f"{BY_HAND}: {_number(points)} / {_number(cell['max_points'])}",
                )
            elif cell["manual"]:
                was = state.outdated.get((sub.student, sub.lab, cell["cell_id"]))
                if was is not None and was.points is not None:
                    cell["message"] += (
                        f"; the answer changed since it was {BY_HAND} ({_number(was.points)} "
                        f"/ {_number(cell['max_points'])} by {was.by}, {was.at}: that text "
                        "and mark are kept in gradebook.json's record)"
                    )
            cells.append(cell)
        policy = state.policies.get(sub.lab)
        penalty = policy and late_penalty(sum(c["points"] for c in cells), sub.submitted_at, policy)
        if policy and penalty:
            cells.append(
                {"cell_id": LATE_CELL_ID, "exercise": LATE_EXERCISE, "points": -penalty.points,
                 "max_points": 0.0, "passed": False, "message": penalty.message(policy),
                 "manual": False, "answer": ""}
            )  # fmt: skip
        notes = list(sub.notes)
        if (sub.student, sub.lab) in later:
            notes.append(
                "a later file was not graded, so this grade stands: "
                + later[(sub.student, sub.lab)]
            )
        results.append(
            {"student": sub.student, "lab": sub.lab, "submission": sub.path,
             "cells": cells, "sha256": sub.sha256, "notes": notes}
        )  # fmt: skip
    data = {
        "config": state.config,
        "results": results,
        "problems": state.problems,
        "warnings": state.warnings,
        "sources": [{"lab": lab, "path": p, "sha256": d} for lab, p, d in state.sources],
    }
    return report_from_json(data), comments


def _record(state: BookState) -> dict:
    """What ``gradebook.json`` adds from the database: who graded and entered what, when."""
    return {
        "record": {
            "submissions": [
                {
                    "student": s.student,
                    "lab": s.lab,
                    "path": s.path,
                    "submitted_at": s.submitted_at,
                    "graded_at": s.graded_at,
                    "graded_by": s.graded_by,
                }
                for s in state.submissions
            ],  # fmt: skip
            "manual_entries": state.history,
            "policies": [asdict(p) for p in state.policies.values()],
            "runs": state.runs,
        }
    }


def store_report(
    db: GradebookDB,
    report: GradeReport,
    *,
    command: str,
    by: str,
    submitted_at: dict[tuple[str, str], str | None] | None = None,
) -> int:
    """Store `report` as one run of `command` (see `GradebookDB.store_run`); the points of
    written answers it carries as graded by hand become manual entries (an import, a
    merged chunk), so that they survive later regrades."""
    data = report.as_dict()
    run = db.store_run(
        command=command,
        by=by,
        config=data["config"],
        sandbox=report.sandbox,
        warnings=report.warnings,
        sources=report.sources,
        results=data["results"],
        problems=data["problems"],
        submitted_at=submitted_at,
    )
    db.add_manual(
        (
            (r.student, r.lab, c.cell_id, c.points, None)
            for r in report.results
            for c in r.cells
            if c.manual and c.message.startswith(BY_HAND)
        ),
        by=by,
        sheet=f"({command})",
    )
    return run


class BookSession:
    """A verified gradebook folder open for one change (see the module docstring)."""

    def __init__(
        self, out_dir: Path | str, secret: str, *, create: bool = False, filled_in: bool = False
    ) -> None:
        self.out = Path(out_dir)
        self.secret = secret
        self.create = create
        self.filled_in = filled_in
        self.state: BookState | None = None
        self.comments: Comments = {}
        self._tmp: Path | None = None
        self.db: GradebookDB

    def _verify(self) -> bool:
        """Check the folder; True when it holds a gradebook."""
        if not any((self.out / n).exists() for n in (DB_NAME, MANIFEST_NAME, "gradebook.json")):
            if not self.create:
                raise BookError(
                    f"{self.out}: no gradebook here; grade first (mlinfra-lab grade "
                    f"SUBMISSIONS --source LABS --out {self.out})"
                )
            return False
        check = verify_gradebook(
            self.out,
            self.secret,
            frozenset({"manual.csv"}) if self.filled_in else frozenset(),
            records_only=True,  # exports and reports are rewritten or left unsealed
        )
        if check.ok:
            return True
        sheet = str(self.out / "manual.csv")
        if any(p.startswith(sheet) for p in check.problems):
            raise BookError(
                f"{sheet} was changed since it was written (points being filled in?): merge it "
                f"first with 'mlinfra-lab grade --manual {sheet} --out {self.out}', or move "
                "it away; nothing was changed"
            )
        raise BookError(
            f"{self.out}: not changed, it fails verification: "
            + "; ".join(check.problems)
            + " (restore the edited file, check the secret, or grade into a new --out)"
        )

    def __enter__(self) -> BookSession:
        had_book = self._verify()
        self.out.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.out, prefix=f".{DB_NAME}.", suffix=".tmp")
        os.close(fd)
        self._tmp = Path(tmp)
        legacy = had_book and not (self.out / DB_NAME).exists()
        if had_book and not legacy:
            shutil.copyfile(self.out / DB_NAME, self._tmp, follow_symlinks=False)
        self.db = GradebookDB(self._tmp)
        if legacy:
            data = json.loads((self.out / "gradebook.json").read_text(encoding="utf-8"))
            store_report(self.db, report_from_json(data), command="import", by="(import)")
        return self

    def report(self) -> GradeReport:
        """The report the working database holds now."""
        self.state = self.db.state()
        report, self.comments = report_from_state(self.state)
        return replace(report, config=report.config.with_secret(self.secret))

    def commit(self) -> GradeReport:
        """Rewrite every view and the database, sealed; return the report written."""
        report = self.report()
        assert self.state is not None and self._tmp is not None
        self.db.close()
        write_gradebook(
            report,
            self.out,
            self.secret,
            comments=self.comments,
            extra_files={DB_NAME: self._tmp.read_bytes()},
            extra_json=_record(self.state),
        )
        self._tmp.unlink(missing_ok=True)
        self._tmp = None
        return report

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self.db.close()
            self._tmp.unlink(missing_ok=True)
            for suffix in ("-journal", "-wal", "-shm"):
                Path(str(self._tmp) + suffix).unlink(missing_ok=True)
