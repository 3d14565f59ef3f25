"""The persistent gradebook: one SQLite file in the gradebook folder, the record that every
other gradebook file is a view of.

Contract: `GradebookDB(path)` opens (or creates) ``gradebook.sqlite``; `store_run` records
one grading run (who, when, config, sources) and upserts its results by student x lab x
grader cell, never touching an instructor's entries; `add_manual` appends an instructor's
points and/or comment for one cell (who, when, from which sheet); `set_policy` stores a
lab's deadline and late penalty; `state()` reads everything back as a `BookState`, from
which `views` writes the CSV, JSON, manual sheet, feedback and exports. Standard library
only (``sqlite3``).

Design decisions:
- Machine scores and instructor entries live in separate tables: a regrade replaces a
  student's ``scores`` rows and nothing else, so hand-entered points and comments survive
  every regrade and every ``--force`` (they are matched again by cell id, as graders are).
- ``manual_entries`` is append-only: the latest entry with points gives the points, the
  latest with a comment gives the comment, and every earlier one stays as history with its
  author and time. A blank in a sheet adds nothing (pending stays pending).
- An entry for a written answer keeps the text it marked and its digest
  (`manual.answer_digest`). It counts only while the submission's answer has that digest:
  after a resubmission with another answer, the answer is pending again and the earlier
  text and mark stay in the history (``current: false``), evidence an instructor may need.
  A schema-1 gradebook is migrated in its working copy; its older entries carry no digest
  and count as before.
- One row per (student, lab) in ``submissions``: the file graded, its SHA-256, when it was
  submitted (for the late policy), which run graded it. A later input of that student and
  lab that cannot be graded goes to ``problems`` and leaves the earlier grade standing.
- The database is sealed in ``manifest.json`` with the other gradebook files (see
  `manifest`), and every command verifies the folder before it changes the database.
- Times are ISO 8601 in UTC (``2026-12-05T16:00:00+00:00``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .errors import GradingError
from .manual import answer_digest

__all__ = [
    "DB_NAME",
    "BookState",
    "GradebookDB",
    "GradebookDBError",
    "ManualEntry",
    "Policy",
    "StoredSubmission",
    "now_utc",
]

DB_NAME = "gradebook.sqlite"
SCHEMA_VERSION = "2"
_MIGRATIONS = {  # from version -> the statements that bring it to the next
    "1": (
        "ALTER TABLE manual_entries ADD COLUMN answer TEXT",
        "ALTER TABLE manual_entries ADD COLUMN answer_sha256 TEXT",
    ),
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, at TEXT NOT NULL, by TEXT NOT NULL, command TEXT NOT NULL,
    config TEXT NOT NULL, sandbox TEXT NOT NULL, warnings TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    lab TEXT PRIMARY KEY, path TEXT NOT NULL, sha256 TEXT NOT NULL, run_id INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    student TEXT NOT NULL, lab TEXT NOT NULL, path TEXT NOT NULL, sha256 TEXT NOT NULL,
    submitted_at TEXT, notes TEXT NOT NULL, run_id INTEGER NOT NULL REFERENCES runs(id),
    PRIMARY KEY (student, lab));
CREATE TABLE IF NOT EXISTS scores (
    student TEXT NOT NULL, lab TEXT NOT NULL, cell_id TEXT NOT NULL, position INTEGER NOT NULL,
    exercise TEXT NOT NULL, points REAL NOT NULL, max_points REAL NOT NULL,
    passed INTEGER NOT NULL, message TEXT NOT NULL, manual INTEGER NOT NULL,
    answer TEXT NOT NULL, run_id INTEGER NOT NULL REFERENCES runs(id),
    PRIMARY KEY (student, lab, cell_id));
CREATE TABLE IF NOT EXISTS manual_entries (
    id INTEGER PRIMARY KEY, student TEXT NOT NULL, lab TEXT NOT NULL, cell_id TEXT NOT NULL,
    points REAL, comment TEXT, at TEXT NOT NULL, by TEXT NOT NULL, sheet TEXT NOT NULL,
    answer TEXT, answer_sha256 TEXT);
CREATE TABLE IF NOT EXISTS problems (
    path TEXT PRIMARY KEY, message TEXT NOT NULL, student TEXT NOT NULL, lab TEXT NOT NULL,
    sha256 TEXT NOT NULL, run_id INTEGER NOT NULL REFERENCES runs(id));
CREATE TABLE IF NOT EXISTS policies (
    lab TEXT PRIMARY KEY, due TEXT NOT NULL, pct_per_day REAL NOT NULL, cap_pct REAL NOT NULL,
    grace_s REAL NOT NULL, at TEXT NOT NULL, by TEXT NOT NULL);
"""


class GradebookDBError(GradingError):
    """The gradebook database cannot be used (the message says which file and what to do)."""


def now_utc() -> str:
    """The current time, ISO 8601 in UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class ManualEntry:
    """The instructor's current points and comment for one cell, and who entered them."""

    points: float | None
    comment: str
    at: str
    by: str


@dataclass(frozen=True)
class Policy:
    """A lab's deadline and late penalty (see `late`)."""

    lab: str
    due: str
    pct_per_day: float
    cap_pct: float
    grace_s: float = 0.0


@dataclass(frozen=True)
class StoredSubmission:
    """One graded (student, lab) as the database holds it."""

    student: str
    lab: str
    path: str
    sha256: str
    submitted_at: str | None
    notes: tuple[str, ...]
    graded_at: str
    graded_by: str
    cells: tuple[dict, ...]  # CellResult fields, in lab order


@dataclass
class BookState:
    """Everything the views are written from."""

    submissions: list[StoredSubmission] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)
    manual: dict[tuple[str, str, str], ManualEntry] = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)  # every manual entry, oldest first
    # (student, lab, cell id) -> the latest hand mark given for an answer since changed
    outdated: dict[tuple[str, str, str], ManualEntry] = field(default_factory=dict)
    policies: dict[str, Policy] = field(default_factory=dict)
    sources: list[tuple[str, str, str]] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    sandbox: str = ""
    warnings: list[str] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)


class GradebookDB:
    """The gradebook's SQLite database (see the module docstring); a context manager."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if self.path.is_symlink():
            raise GradebookDBError(f"{self.path} is a symbolic link; give a real gradebook folder")
        try:
            self._db = sqlite3.connect(self.path)
            self._db.executescript(_SCHEMA)
            found = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        except sqlite3.DatabaseError as err:
            raise GradebookDBError(
                f"{self.path}: not a gradebook database ({err}); grade into another --out "
                "or restore this file from a backup"
            ) from None
        if found is None:
            self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            self._db.commit()
            return
        version = found[0]
        while version in _MIGRATIONS:  # an older gradebook: brought up to date in its copy
            with self._db:
                for statement in _MIGRATIONS[version]:
                    self._db.execute(statement)
                version = str(int(version) + 1)
                self._db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (version,))
        if version != SCHEMA_VERSION:
            raise GradebookDBError(
                f"{self.path}: schema {version}, this tool reads {SCHEMA_VERSION}; "
                "use the mlinfra_lab version that wrote it"
            )

    def __enter__(self) -> GradebookDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    # -- writing -----------------------------------------------------------------------
    def store_run(
        self,
        *,
        command: str,
        by: str,
        config: dict,
        sandbox: str,
        warnings: Sequence[str],
        sources: Iterable[tuple[str, str, str]],
        results: Iterable[dict],
        problems: Iterable[dict],
        submitted_at: dict[tuple[str, str], str | None] | None = None,
    ) -> int:
        """Record one run and upsert its results (dicts in ``GradeReport.as_dict`` form) and
        problems, in one transaction; return the run's id."""
        submitted_at = submitted_at or {}
        with self._db:
            cur = self._db.execute(
                "INSERT INTO runs (at, by, command, config, sandbox, warnings) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (now_utc(), by, command, json.dumps(config), sandbox, json.dumps(list(warnings))),
            )
            run = int(cur.lastrowid or 0)
            for lab, path, digest in sources:
                self._db.execute(
                    "INSERT INTO sources VALUES (?, ?, ?, ?) ON CONFLICT(lab) DO UPDATE SET "
                    "path = excluded.path, sha256 = excluded.sha256, run_id = excluded.run_id",
                    (lab, path, digest, run),
                )
            for r in results:
                key = (r["student"], r["lab"])
                self._db.execute(
                    "INSERT INTO submissions VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(student, lab) DO UPDATE SET path = excluded.path, "
                    "sha256 = excluded.sha256, submitted_at = excluded.submitted_at, "
                    "notes = excluded.notes, run_id = excluded.run_id",
                    (*key, r["submission"], r.get("sha256", ""), submitted_at.get(key),
                     json.dumps(list(r.get("notes", ()))), run),
                )  # fmt: skip
                self._db.execute("DELETE FROM scores WHERE student = ? AND lab = ?", key)
                self._db.execute(
                    "DELETE FROM problems WHERE (student = ? AND lab = ?) OR path = ?",
                    (*key, r["submission"]),
                )
                for k, c in enumerate(r["cells"]):
                    self._db.execute(
                        "INSERT INTO scores VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (*key, c["cell_id"], k, c["exercise"], c["points"], c["max_points"],
                         int(c["passed"]), c["message"], int(c.get("manual", False)),
                         c.get("answer", ""), run),
                    )  # fmt: skip
            for p in problems:
                self._db.execute(
                    "INSERT INTO problems VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE "
                    "SET message = excluded.message, student = excluded.student, "
                    "lab = excluded.lab, sha256 = excluded.sha256, run_id = excluded.run_id",
                    (p["path"], p["message"], p.get("student", ""), p.get("lab", ""),
                     p.get("sha256", ""), run),
                )  # fmt: skip
        return run

    def add_manual(
        self,
        entries: Iterable[tuple[str, str, str, float | None, str | None]],
        *,
        by: str,
        sheet: str,
    ) -> int:
        """Append (student, lab, cell_id, points or None, comment or None) entries; entries
        with neither are skipped. An entry for a written answer stores the answer's text as
        graded now and its `answer_digest`. Returns how many were stored."""
        at, stored = now_utc(), 0
        with self._db:
            for student, lab, cell_id, points, comment in entries:
                if points is None and not comment:
                    continue
                found = self._db.execute(
                    "SELECT answer FROM scores WHERE student = ? AND lab = ? AND cell_id = ? "
                    "AND manual = 1",
                    (student, lab, cell_id),
                ).fetchone()
                answer = found[0] if found else None  # a written answer's text, bound below
                self._db.execute(
                    "INSERT INTO manual_entries (student, lab, cell_id, points, comment, at, "
                    "by, sheet, answer, answer_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (student, lab, cell_id, points, comment or None, at, by, sheet, answer,
                     None if answer is None else answer_digest(answer)),
                )  # fmt: skip
                stored += 1
        return stored

    def set_policy(self, policy: Policy, *, by: str) -> None:
        """Store (replace) `policy` for its lab."""
        with self._db:
            self._db.execute(
                "INSERT INTO policies VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(lab) DO UPDATE "
                "SET due = excluded.due, pct_per_day = excluded.pct_per_day, cap_pct = "
                "excluded.cap_pct, grace_s = excluded.grace_s, at = excluded.at, by = excluded.by",
                (policy.lab, policy.due, policy.pct_per_day, policy.cap_pct, policy.grace_s,
                 now_utc(), by),
            )  # fmt: skip

    # -- reading -----------------------------------------------------------------------
    def graded(self) -> dict[tuple[str, str], str]:
        """(student, lab) -> the SHA-256 of the file graded, for every graded submission."""
        rows = self._db.execute("SELECT student, lab, sha256 FROM submissions")
        return {(s, lab): digest for s, lab, digest in rows}

    def source_digests(self) -> dict[str, str]:
        """lab -> the SHA-256 of the source lab its latest grading used."""
        return dict(self._db.execute("SELECT lab, sha256 FROM sources"))

    def state(self) -> BookState:
        """Everything the views need, in a stable order (student, then lab)."""
        q = self._db.execute
        runs = {
            rid: {"id": rid, "at": at, "by": by, "command": cmd, "config": json.loads(cfg),
                  "sandbox": sb, "warnings": json.loads(w)}
            for rid, at, by, cmd, cfg, sb, w in q("SELECT * FROM runs ORDER BY id")
        }  # fmt: skip
        cells: dict[tuple[str, str], list[dict]] = {}
        for s, lab, cid, _, ex, pts, mx, ok, msg, man, ans, _run in q(
            "SELECT * FROM scores ORDER BY student, lab, position"
        ):
            cells.setdefault((s, lab), []).append(
                {"cell_id": cid, "exercise": ex, "points": pts, "max_points": mx,
                 "passed": bool(ok), "message": msg, "manual": bool(man), "answer": ans}
            )  # fmt: skip
        state = BookState()
        used: set[int] = set()
        for s, lab, path, digest, sub_at, notes, run in q(
            "SELECT * FROM submissions ORDER BY student, lab"
        ):
            used.add(run)
            state.submissions.append(
                StoredSubmission(
                    s, lab, path, digest, sub_at, tuple(json.loads(notes)),
                    runs[run]["at"], runs[run]["by"], tuple(cells.get((s, lab), ())),
                )
            )  # fmt: skip
        for path, msg, s, lab, digest, run in q("SELECT * FROM problems ORDER BY path"):
            used.add(run)
            state.problems.append(
                {"path": path, "message": msg, "student": s, "lab": lab, "sha256": digest}
            )
        answers = {(s, lab, c["cell_id"]): c["answer"] for (s, lab), cs in cells.items()
                   for c in cs if c["manual"]}  # fmt: skip
        for s, lab, cid, pts, comment, at, by, sheet, text, digest in q(
            "SELECT student, lab, cell_id, points, comment, at, by, sheet, answer, "
            "answer_sha256 FROM manual_entries ORDER BY id"
        ):
            now = answers.get((s, lab, cid))
            current = digest is None or now is None or digest == answer_digest(now)
            state.history.append(
                {"student": s, "lab": lab, "cell_id": cid, "points": pts, "comment": comment,
                 "at": at, "by": by, "sheet": sheet, "answer": text, "answer_sha256": digest,
                 "current": current}
            )  # fmt: skip
            if not current:  # given for another text: history only
                if pts is not None:
                    state.outdated[(s, lab, cid)] = ManualEntry(pts, comment or "", at, by)
                continue
            old = state.manual.get((s, lab, cid), ManualEntry(None, "", at, by))
            state.manual[(s, lab, cid)] = ManualEntry(
                pts if pts is not None else old.points,
                comment if comment is not None else old.comment,
                at,
                by,
            )
        for lab, due, rate, cap, grace, _at, _by in q("SELECT * FROM policies"):
            state.policies[lab] = Policy(lab, due, rate, cap, grace)
        state.sources = [tuple(r) for r in q("SELECT lab, path, sha256 FROM sources ORDER BY lab")]
        grading = [r for r in runs.values() if r["command"] in ("grade", "merge", "import")]
        if grading:
            state.config, state.sandbox = grading[-1]["config"], grading[-1]["sandbox"]
        state.warnings = [w for rid in sorted(used) for w in runs[rid]["warnings"]]
        state.runs = [{k: v for k, v in r.items() if k != "config"} for r in runs.values()]
        return state
