"""Turn a Canvas or Moodle submissions download into the folders ``grade`` reads.

Contract: `collect_download(download, out, lab, roster=None)` reads one assignment's
download (a zip or the folder it was extracted to, `download`), decides whose each
notebook is from the LMS's naming (`lms_names`), takes one notebook per student and writes
it as ``out/<student>/<lab>.ipynb``; it returns a `CollectReport` of what it took, what it
set aside (earlier uploads of a notebook it took) and what it refused, each with the reason.
It raises `CollectError` for a bad call (a lab name that cannot be a file name, a roster
that gives one id to two students) and `download.DownloadError` for a download that cannot
be read at all; a bad entry is that entry's refusal (`download`).

Who a student is:
- the LMS's id in the file's name: Canvas's user id, Moodle's participant id. Without a
  roster the student is that id (``out/12345/``). With a roster (`export.read_roster`: a
  ``student`` column and an ``id`` column, or Canvas's own gradebook export, whose ``ID``
  is the Canvas user id) the student is the roster's name for that id, and an id the
  roster does not list is refused and reported, never guessed from a display name.
- never the file's own name: the student chooses it (a file named after a classmate stays
  the uploader's), and Colab's "Copy of X" or a browser's "X (1)" changes nothing.

One notebook per student:
- Versions of one notebook (the same name once Canvas's ``-1`` and the copy marks are taken
  off, `lms_names.notebook_key`): the LMS's latest is taken, by Canvas's upload number,
  then Canvas's ``-N``; the others are set aside, and the report names both. Copies with
  the same bytes are one notebook.
- Anything else two files that claim one student (two different notebooks, two versions
  the LMS does not order, two ids that the roster, or letter case, makes one student): all
  are refused and reported, and nothing is written for that student, so a file collected
  earlier, and the marks stored for it, stay as they were.

Design decisions:
- Where a notebook is written comes from the id and `lab` only, never from a name in the
  download, so no entry can choose its path; the entries that try (``..``, absolute paths,
  links) are refused all the same, because such a download was tampered with.
- A student's folder that is a link, or a file where the folder should be, is refused: the
  write would go where the link points. The notebook is written to a temporary file in the
  student's folder and renamed into place; an unchanged file is left alone. The time the
  download gives the file becomes its modification time (the late policy reads it).
- `lab` is given, not read from the notebooks: one download is one assignment, and the
  student may have named the file anything; ``grade`` still checks the notebook's own lab.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .download import Entry, Limits, read_download
from .errors import GradingError
from .hygiene import printable, safe_student
from .lms_names import LMS_KINDS, LmsName, notebook_key, parse_lms_path

__all__ = ["CollectError", "CollectReport", "Refusal", "Taken", "collect_download"]

_LAB = re.compile(r"[\w+-][\w.+-]{0,79}")
_NO_NAMING = (
    "no Canvas or Moodle naming (<lastfirst>_<user id>_<number>_<file> or "
    "<Full Name>_<id>_assignsubmission_file_/<file>): cannot tell whose notebook this is"
)


class CollectError(GradingError):
    """A collect call that cannot start: a bad lab name, LMS kind or roster."""


@dataclass(frozen=True)
class Taken:
    """A notebook collected: whose, from which entry, where it went, and notes."""

    student: str
    lms_id: str
    source: str  # the entry's path in the download (printable)
    target: str
    status: str  # "new", "replaced" (another file was there) or "unchanged"
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal:
    """An entry not collected, with the one line that says why."""

    source: str
    reason: str
    student: str = ""

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


@dataclass
class CollectReport:
    """What `collect_download` did."""

    lab: str
    out: str
    lms: str = ""  # the LMS whose naming the download has ("" when no notebook had any)
    taken: list[Taken] = field(default_factory=list)
    set_aside: list[Refusal] = field(default_factory=list)  # earlier uploads, same bytes
    refused: list[Refusal] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # files that are not notebooks

    @property
    def ok(self) -> bool:
        """True when nothing was refused."""
        return not self.refused

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "lab": self.lab,
            "out": self.out,
            "lms": self.lms,
            "taken": [t.__dict__ for t in self.taken],
            "set_aside": [r.__dict__ for r in self.set_aside],
            "refused": [r.__dict__ for r in self.refused],
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class _File:
    entry: Entry
    lms: LmsName
    sha256: str
    key: str  # `notebook_key`: versions of one notebook share it
    again: int  # Canvas's -N
    marks: tuple[str, ...]

    @property
    def order(self) -> tuple[int, int]:
        return self.lms.upload, self.again


def _roster_ids(roster: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """LMS id -> roster student; `CollectError` if one id names two students."""
    ids: dict[str, str] = {}
    for student, fields in roster.items():
        lms_id = (fields.get("id") or "").strip()
        if not lms_id:
            continue
        if lms_id in ids:
            raise CollectError(
                f"the roster gives LMS id {printable(lms_id, 40)} to both "
                f"'{printable(ids[lms_id], 80)}' and '{printable(student, 80)}'; fix the "
                "roster (each student's 'id' is their Canvas user id or Moodle participant id)"
            )
        ids[lms_id] = student
    if not ids:
        raise CollectError(
            "the roster has no 'id' column values: collect maps the LMS's user ids to "
            "students through it (Canvas's gradebook export has them in 'ID')"
        )
    return ids


def _who(f: _File) -> str:
    name = printable(f.lms.name, 60)
    return f"LMS user {f.lms.user_id}" + (f" ({name})" if name else "")


def _choose(files: list[_File]) -> tuple[_File | None, list[str], list[tuple[_File, str]]]:
    """(the file to take or None, notes on it, [(file set aside or refused, why)])."""
    latest = {f.sha256: f for f in sorted(files, key=lambda f: f.order)}  # per content
    same = [f for f in files if f is not latest[f.sha256]]
    aside = [(f, f"the same bytes as {latest[f.sha256].entry.name}, taken") for f in same]
    kept = sorted(latest.values(), key=lambda f: f.order)
    if len(kept) == 1:
        notes = [f"also in the download with the same bytes: {f.entry.name}" for f in same]
        return kept[0], notes, aside
    keys = {f.key for f in kept}
    newest = kept[-1]
    if len(keys) == 1 and newest.order != kept[-2].order:
        older = [f for f in kept if f is not newest]
        what = (
            f"Canvas's upload number {newest.lms.upload}"
            if newest.lms.upload != older[-1].lms.upload
            else f"Canvas's resubmission suffix -{newest.again}"
        )
        notes = [
            f"a resubmission: the latest of {len(kept)} uploads of this notebook (by {what}); "
            f"set aside: {', '.join(f.entry.name for f in older)}"
        ]
        earlier = f"an earlier upload of the notebook taken from {newest.entry.name}"
        aside += [(f, earlier) for f in older]
        return newest, notes, aside
    names = ", ".join(f.entry.name for f in kept)
    why = (
        f"{len(kept)} different notebooks in the download claim {_who(newest)}"
        + (
            " and the LMS gives no order between these versions"
            if len(keys) == 1
            else " (different names, so not versions of one notebook)"
        )
        + f": {names}; none is collected"
    )
    return None, [], [(f, why) for f in kept] + aside


def _existing(path: Path) -> bytes | None:
    """The bytes of regular file `path`, or None (absent, a link, unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read()
    finally:
        os.close(fd)


def _folder(out: Path, student: str) -> Path | str:
    """The student's folder under `out`, made if needed; or why it cannot be used."""
    folder = out / student
    try:
        os.mkdir(folder)
    except FileExistsError:
        mode = os.lstat(folder).st_mode
        if not stat.S_ISDIR(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
            return f"{folder} is {what}; nothing written there (remove it and collect again)"
    return folder


def _write(folder: Path, lab: str, data: bytes, mtime: float | None) -> tuple[str, str]:
    """Write `data` as ``folder/<lab>.ipynb``; (its path, "new"/"replaced"/"unchanged")."""
    target = folder / f"{lab}.ipynb"
    before = _existing(target)
    if before == data:
        return str(target), "unchanged"
    status = "new" if before is None and not os.path.lexists(target) else "replaced"
    fd, tmp = tempfile.mkstemp(prefix=".collect-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if mtime is not None:
            os.utime(tmp, (mtime, mtime))
        os.replace(tmp, target)  # replaces a link itself, never what it points to
    except BaseException:
        os.unlink(tmp)
        raise
    return str(target), status


def _identify(entries: list[Entry], lms: str, report: CollectReport) -> list[_File]:
    files = []
    for entry in entries:
        name = parse_lms_path(entry.parts, lms)
        if name is None or entry.data is None:
            report.refused.append(Refusal(entry.name, _NO_NAMING))
            continue
        key, again, marks = notebook_key(name.original)
        digest = hashlib.sha256(entry.data).hexdigest()
        files.append(_File(entry, name, digest, key, again, marks))
    kinds = sorted({f.lms.lms for f in files})
    if len(kinds) > 1:
        raise CollectError(
            "this download mixes Canvas and Moodle naming, whose ids cannot be told apart; "
            "collect each LMS's download on its own, or pick one with --lms"
        )
    report.lms = kinds[0] if kinds else ""
    return files


def collect_download(
    download: Path | str,
    out: Path | str,
    lab: str,
    roster: Mapping[str, Mapping[str, str]] | None = None,
    lms: str = "auto",
    limits: Limits | None = None,
) -> CollectReport:
    """Collect `download` into ``out/<student>/<lab>.ipynb`` (see the module docstring)."""
    if not _LAB.fullmatch(lab):
        raise CollectError(
            f"--lab {printable(lab, 80)!r}: a lab is named like its notebook without .ipynb "
            "(letters, digits, '_', '-', '.', not starting with '.'), e.g. 00_warmup"
        )
    if lms not in LMS_KINDS:
        raise CollectError(f"--lms must be one of {', '.join(LMS_KINDS)}")
    ids = _roster_ids(roster) if roster is not None else None
    out = Path(out)
    report = CollectReport(lab, str(out))
    found = read_download(download, limits)
    report.refused += [Refusal(e.name, e.problem or "refused") for e in found.refused]
    report.skipped += [e.name for e in found.skipped]
    groups: dict[str, list[_File]] = {}
    for f in _identify(found.notebooks, lms, report):
        groups.setdefault(f.lms.user_id, []).append(f)
    chosen: dict[str, tuple[_File, list[str]]] = {}  # student -> (file, notes)
    for user_id, files in sorted(groups.items()):
        pick, notes, others = _choose(files)
        student = user_id if ids is None else ids.get(user_id, "")
        for f, why in others:
            (report.refused if pick is None else report.set_aside).append(
                Refusal(f.entry.name, why, student)
            )
        if pick is None:
            continue
        if not student:
            report.refused.append(
                Refusal(
                    pick.entry.name,
                    f"{_who(pick)} is not on the roster; not collected: add them (their "
                    "LMS id in the 'id' column) or check that the download is this course's",
                )
            )
        elif safe_student(student) != student or student.startswith("."):
            report.refused.append(
                Refusal(
                    pick.entry.name,
                    f"the roster's name for {_who(pick)}, {printable(student, 80)!r}, cannot "
                    "be a folder name (a separator, a leading dot or a control character)",
                )
            )
        else:
            chosen[student] = (pick, notes)
    _collide(chosen, report)
    if chosen:
        out.mkdir(parents=True, exist_ok=True)
    for student, (pick, notes) in sorted(chosen.items()):
        folder = _folder(out, student)
        if isinstance(folder, str):
            report.refused.append(Refusal(pick.entry.name, folder, student))
            continue
        target, status = _write(folder, lab, pick.entry.data or b"", pick.entry.mtime)
        if pick.marks:
            notes.append(f"a copy's name ({', '.join(pick.marks)}), read without the mark")
        if pick.lms.late:
            notes.append("Canvas marked this submission late")
        report.taken.append(
            Taken(student, pick.lms.user_id, pick.entry.name, target, status, tuple(notes))
        )
    _keep_earlier(report, out)
    return report


def _collide(chosen: dict[str, tuple[_File, list[str]]], report: CollectReport) -> None:
    """Refuse the students whose names differ only in letter case (one folder on a
    case-insensitive disk): all of them, as two files claiming one student."""
    folded: dict[str, list[str]] = {}
    for student in chosen:
        folded.setdefault(student.casefold(), []).append(student)
    for same in folded.values():
        if len(same) < 2:
            continue
        names = ", ".join(chosen[s][0].entry.name for s in same)
        for student in same:
            pick, _ = chosen.pop(student)
            report.refused.append(
                Refusal(
                    pick.entry.name,
                    f"the roster's names {', '.join(same)} differ only in letter case, so "
                    f"these files claim one folder: {names}; none is collected",
                    student,
                )
            )


def _keep_earlier(report: CollectReport, out: Path) -> None:
    """Say, on each refusal of a known student, that a file collected earlier is kept."""
    for k, refusal in enumerate(report.refused):
        if not refusal.student or safe_student(refusal.student) != refusal.student:
            continue
        earlier = out / refusal.student / f"{report.lab}.ipynb"
        if os.path.lexists(earlier) and not any(t.student == refusal.student for t in report.taken):
            report.refused[k] = Refusal(
                refusal.source,
                f"{refusal.reason}; {earlier}, collected earlier, is left as it was (its "
                "stored marks stay)",
                refusal.student,
            )
