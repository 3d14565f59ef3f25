"""Export the gradebook for a learning-management system: one row per student, a total per lab.

Contract: `export_table(report, fmt, roster)` returns the header and rows of the CSV that
`fmt` (one of `FORMATS`) expects; `write_export(report, fmt, path, roster)` writes it
atomically (``grade --export FORMAT``, into ``GRADEBOOK_DIR/export-FORMAT.csv``).
`read_roster(path)` reads an optional roster CSV: a ``student`` column with the names the
gradebook uses, and any of ``name``, ``id``, ``sis_user_id``, ``sis_login_id``,
``section``, ``email``, ``username``, ``idnumber`` to fill the LMS's identifier columns; or
Canvas's own gradebook export, whose ``SIS Login ID`` is then the gradebook's name (the
folder a submission was collected in). A roster that lacks a student of the gradebook is
refused (`ExportError` names them): a silent fall-back to folder names could match
another LMS user.

The formats, as the systems document them:
- ``canvas``: Canvas's gradebook import reads the columns its own export writes:
  ``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per
  assignment, and a second row ``Points Possible`` with each assignment's maximum (see
  ``Course#gradebook_to_csv`` in instructure/canvas-lms, and e.g. Ohio State's "Import CSV
  File for Carmen Grades": a student is matched by ID, SIS User ID or SIS Login ID; a
  column that names no existing assignment creates one; a blank cell changes nothing).
  Without a roster the student's name fills ``Student`` and ``SIS Login ID`` (collect
  submissions in folders named by login ID and the import matches them). A lab's column
  is headed by the lab's name, which creates an assignment, unless ``--canvas-column
  LAB="Title (id)"`` names an existing one: Canvas then updates assignment ``id``.
- ``moodle``: Moodle's "Import grades from CSV" (``grade/import/csv``) maps one column to
  identify the user (``Username``, ``ID number`` or ``Email address`` here; it matches on
  username, ID number, email or user id) and each other column to a grade item chosen on
  its form; it takes no points-possible row, so there is none, and no maximum: a grade
  item's maximum is set in Moodle (the item's "Maximum grade"), to the lab's maximum
  that the summary's total row gives (``max``). Without a roster,
  ``Username`` is the student's name.
- ``csv``: ``student``, one column per lab, ``total`` and ``max``: for anything else.

Design decisions:
- A lab's total is what the gradebook's rows add up to: machine scores, hand-graded points
  and the late penalty. A student who submitted a lab that could not be graded, or none,
  gets an empty cell for it (an LMS reads that as "no grade", not 0).
- Cells a spreadsheet would run as a formula are escaped as in the gradebook (`csv_safe`).
- Canvas takes any row whose first cell contains ``Points Possible`` as the row of maxima
  (``row[0] =~ /Points Possible/`` in its importer), wherever it sits. Only the export's
  own second row may: in a student's name the words are joined by a hyphen
  (``Points-Possible``), matched without regard to case or the spaces between them.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from .errors import GradingError
from .formula import csv_safe
from .grade import GradeReport
from .manifest import atomic_write

__all__ = [
    "FORMATS",
    "ExportError",
    "canvas_columns",
    "canvas_name",
    "export_table",
    "read_roster",
    "write_export",
]

FORMATS = ("canvas", "moodle", "csv")
CANVAS_IDS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_IDS = ("Username", "ID number", "Email address")
ROSTER_FIELDS = ("name", "id", "sis_user_id", "sis_login_id", "section", "email", "username", "idnumber")  # fmt: skip

Roster = dict[str, dict[str, str]]
POINTS_POSSIBLE = "Points Possible"
_POINTS_POSSIBLE = re.compile(r"(?i)(points)\s*(possible)")
_CANVAS_ID = re.compile(r"\S.*\(\d+\)$")  # "Title (id)": Canvas matches the id


class ExportError(GradingError):
    """An export that cannot be written (an unknown format, an unreadable roster)."""


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 4)


def _canvas_roster_row(row: dict[str, str]) -> tuple[str, dict[str, str]] | None:
    """(student, fields) of a row of Canvas's own gradebook export, or None for a row that
    is no student (its points-possible row, its test student)."""
    name = (row.get("Student") or "").strip()
    login = (row.get("SIS Login ID") or "").strip()
    if not login or _POINTS_POSSIBLE.search(name) or name in ("Student, Test", "Test Student"):
        return None
    fields = dict.fromkeys(ROSTER_FIELDS, "")
    fields.update(name=name, id=(row.get("ID") or "").strip(), sis_login_id=login,
                  sis_user_id=(row.get("SIS User ID") or "").strip(),
                  section=(row.get("Section") or "").strip())  # fmt: skip
    return login, fields


def read_roster(path: Path | str) -> Roster:
    """student -> the roster's fields for that student (see the module docstring)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            columns = reader.fieldnames or ()
            if "student" not in columns and "SIS Login ID" in columns:  # Canvas's own export
                return dict(filter(None, (_canvas_roster_row(row) for row in reader)))
            if "student" not in columns:
                raise ExportError(
                    f"{path}: a roster needs a 'student' column (the names in the "
                    f"gradebook) and any of {', '.join(ROSTER_FIELDS)}, or is Canvas's own "
                    "gradebook export (Student, ID, SIS User ID, SIS Login ID, Section)"
                )
            return {
                row["student"].strip(): {k: (row.get(k) or "").strip() for k in ROSTER_FIELDS}
                for row in reader
                if (row.get("student") or "").strip()
            }
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ExportError(f"{path}: cannot read the roster ({err})") from None


def canvas_name(text: str) -> str:
    """`text` as a Canvas ``Student`` cell that its importer cannot take for the row of
    maxima (see the module docstring)."""
    return _POINTS_POSSIBLE.sub(r"\1-\2", text)


def _totals(report: GradeReport) -> tuple[list[str], dict[str, dict[str, float]], dict[str, float]]:
    """(labs in order, student -> lab -> total, lab -> points possible)."""
    labs: dict[str, float] = {}
    totals: dict[str, dict[str, float]] = {}
    for r in report.results:
        labs[r.lab] = max(labs.get(r.lab, 0.0), r.max_points)
        totals.setdefault(r.student, {})[r.lab] = max(r.points, 0.0)
    for p in report.problems:  # identified, not graded: listed with an empty cell
        if p.student and p.lab:
            labs.setdefault(p.lab, 0.0)
            totals.setdefault(p.student, {})
    return sorted(labs), totals, labs


def canvas_columns(specs: Iterable[str]) -> dict[str, str]:
    """``LAB=Title (id)`` flags -> lab -> the Canvas column naming that assignment."""
    columns: dict[str, str] = {}
    for spec in specs:
        lab, _, title = spec.partition("=")
        if not lab.strip() or not _CANVAS_ID.search(title.strip()):
            raise ExportError(
                f"--canvas-column {spec!r}: write LAB=Title (id), the assignment's column as "
                "Canvas's own gradebook export heads it, e.g. 00_warmup='Lab 0 (4172)'"
            )
        columns[lab.strip()] = title.strip()
    return columns


def export_table(
    report: GradeReport,
    fmt: str,
    roster: Roster | None = None,
    columns: Mapping[str, str] | None = None,
) -> tuple[list[str], list[list[object]]]:
    """The header and rows of the `fmt` export of `report` (see the module docstring);
    `columns` (lab -> ``Title (id)``) heads a lab's Canvas column."""
    if fmt not in FORMATS:
        raise ExportError(f"--export {fmt!r}: choose one of {', '.join(FORMATS)}")
    unknown = sorted(set(columns or {}) - {r.lab for r in report.results} - {p.lab for p in report.problems})  # fmt: skip
    if unknown:
        raise ExportError(f"--canvas-column: no lab {', '.join(unknown)} in this gradebook")
    labs, totals, possible = _totals(report)
    students = sorted(totals)
    missing = [st for st in students if roster is not None and st not in roster]
    if missing:
        raise ExportError(
            f"--roster: {len(missing)} students of the gradebook are not in the roster "
            f"({', '.join(missing[:10])}{', ...' if len(missing) > 10 else ''}); add them, "
            "or leave --roster out to identify every student by the gradebook's name"
        )
    roster = roster or {}
    scores = [[_number(totals[s][lab]) if lab in totals[s] else "" for lab in labs] for s in students]  # fmt: skip
    if fmt == "canvas":
        header = [*CANVAS_IDS, *((columns or {}).get(lab, lab) for lab in labs)]
        rows: list[list[object]] = [[POINTS_POSSIBLE, "", "", "", "", *(_number(possible[lab]) for lab in labs)]]  # fmt: skip
        for s, marks in zip(students, scores, strict=True):
            who = roster.get(s, {})
            rows.append(
                [canvas_name(who.get("name") or s), who.get("id", ""), who.get("sis_user_id", ""),
                 who.get("sis_login_id") or (s if not who else ""), who.get("section", ""),
                 *marks]
            )  # fmt: skip
        return header, rows
    if fmt == "moodle":
        header = [*MOODLE_IDS, *labs]
        rows = []
        for s, marks in zip(students, scores, strict=True):
            who = roster.get(s, {})
            rows.append([who.get("username") or s, who.get("idnumber", ""), who.get("email", ""), *marks])  # fmt: skip
        return header, rows
    header = ["student", *labs, "total", "max"]
    rows = [
        [s, *marks, _number(sum(totals[s].values())), _number(sum(possible.values()))]
        for s, marks in zip(students, scores, strict=True)
    ]
    return header, rows


def write_export(
    report: GradeReport,
    fmt: str,
    path: Path | str,
    roster: Roster | None = None,
    columns: Mapping[str, str] | None = None,
) -> Path:
    """Write the `fmt` export of `report` to `path`, atomically; return `path`."""
    header, rows = export_table(report, fmt, roster, columns)
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(header)
    writer.writerows([csv_safe(v) for v in row] for row in rows)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.getvalue().encode("utf-8"))
    return path
