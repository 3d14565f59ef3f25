"""A generated class packed as a Canvas "Download Submissions" zip, for ``bench grading``.

Contract: `pack_canvas(finals, drafts, zip_path, roster_path, seed)` writes the class's
notebooks (`finals`: student -> the notebook to grade; `drafts`: student -> an earlier
upload of the same notebook, for the students who resubmitted) into one flat zip under
Canvas's own file names, and beside it the roster Canvas's gradebook export gives
(``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section``, its points-possible
row and its test student). It returns a `CanvasDownload`: for every student the zip
entries in upload order (the last is the one ``collect`` must take), and how many files
carry each naming case. `check_collected(report, download)` raises `CollectMismatch`
unless ``collect``'s JSON report took exactly those last entries, one per student, and set
the drafts aside.

The names, as Canvas writes them (see `lms_names`):
``<lastfirst>[_LATE]_<user id>_<upload number>_<the file's name>``. Students are dealt,
after a seeded shuffle, in turn to four cases: the plain name, Canvas's ``_LATE`` mark,
a browser's ``00_warmup (1).ipynb`` and Colab's ``Copy of 00_warmup.ipynb``; those who
resubmitted are dealt first, so that three students, two of them resubmitting, cover
every case. Their draft is uploaded first, then the final one,
with a larger upload number; a plain-named final follows a draft saved from Colab (another
name, one notebook), the others follow a draft of the same name and so carry Canvas's
``-1`` (``Copy of 00_warmup-1.ipynb``).

Design decisions:
- The gradebook's name of a student is the roster's ``SIS Login ID`` (the folder name the
  plain benchmark uses), so the two modes' gradebooks compare row for row; the zip names
  carry only what Canvas puts there (a sortable name, the user id), and display names
  may repeat, as they do in a real class: identity is the id.
- Each student's upload numbers and the zip's timestamps come from one counter, so the zip
  is the same bytes for the same seed; a few PDFs (a written report) ride along, as in a
  real download, and ``collect`` must skip them.
"""

from __future__ import annotations

import csv
import json
import random
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import GradingError

__all__ = ["NAMING_CASES", "CanvasDownload", "CollectMismatch", "check_collected", "pack_canvas"]

NAMING_CASES = ("plain", "late", "browser", "colab")  # dealt in this order
_LASTS = ("Smith", "Garcia", "Nguyen", "Okafor", "Muller", "Rossi", "Kim", "Dubois", "Silva", "Novak")  # fmt: skip
_FIRSTS = ("Jane", "Ali", "Mei", "Tomas", "Amara", "Lucas", "Priya", "Sven", "Ines", "Kofi")
_FIRST_USER_ID = 100_000
_FIRST_UPLOAD = 7_000_000
_START = (2026, 12, 1, 9, 0, 0)  # the zip's time of the first upload; one minute apart after


class CollectMismatch(GradingError):
    """``collect`` took other files than the download's latest upload of each student."""


@dataclass(frozen=True)
class CanvasStudent:
    """One student of the download."""

    student: str  # the roster's SIS Login ID: the gradebook's name
    user_id: str  # Canvas's user id, in every zip name of theirs
    case: str  # one of NAMING_CASES
    entries: tuple[str, ...]  # their zip entries in upload order; collect takes the last


@dataclass(frozen=True)
class CanvasDownload:
    """What `pack_canvas` wrote."""

    zip: Path
    roster: Path
    students: tuple[CanvasStudent, ...]

    def naming(self) -> dict[str, int]:
        """Files per naming case (by its name), and the resubmissions by kind (the record)."""
        counts = dict.fromkeys((*NAMING_CASES, "resubmitted_with_-1", "resubmitted_renamed"), 0)
        for s in self.students:
            for entry in s.entries:
                case = (
                    "late" if "_LATE_" in entry
                    else "colab" if "_Copy of " in entry
                    else "browser" if " (1)" in entry
                    else "plain"
                )  # fmt: skip
                counts[case] += 1
            if len(s.entries) > 1:
                suffixed = s.entries[-1].endswith("-1.ipynb")
                counts["resubmitted_with_-1" if suffixed else "resubmitted_renamed"] += 1
        return counts


def _file_name(case: str, again: bool) -> str:
    """The name a student's tool gave the notebook; `again`: Canvas's second upload of it."""
    stem = {"colab": "Copy of 00_warmup", "browser": "00_warmup (1)"}.get(case, "00_warmup")
    return f"{stem}{'-1' if again else ''}.ipynb"


def pack_canvas(
    finals: Mapping[str, Path],
    drafts: Mapping[str, Path],
    zip_path: Path,
    roster_path: Path,
    seed: int = 0,
) -> CanvasDownload:
    """Write the Canvas-style download of `finals` and `drafts` (see the module docstring)."""
    rng = random.Random(seed)
    again, once = (
        sorted(s for s in finals if s in drafts),
        sorted(s for s in finals if s not in drafts),
    )
    rng.shuffle(again)
    rng.shuffle(once)
    order = again + once  # those who resubmitted are dealt the cases first
    user_ids = {s: str(_FIRST_USER_ID + k) for k, s in enumerate(sorted(finals))}
    upload = 0
    students: list[CanvasStudent] = []
    rows: list[list[str]] = []
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:

        def add(name: str, data: bytes) -> None:
            nonlocal upload
            minute = _START[4] + upload
            when = (*_START[:3], _START[3] + minute // 60, minute % 60, 0)
            archive.writestr(zipfile.ZipInfo(name, date_time=when), data)
            upload += 1

        for k, student in enumerate(order):
            case = NAMING_CASES[k % len(NAMING_CASES)]
            last, first = rng.choice(_LASTS), rng.choice(_FIRSTS)
            user_id = user_ids[student]
            entries = []
            if student in drafts:  # the draft: never late; Colab's copy before a plain final
                name = _file_name("colab" if case == "plain" else case, False)
                entry = f"{(last + first).lower()}_{user_id}_{_FIRST_UPLOAD + upload}_{name}"
                add(entry, Path(drafts[student]).read_bytes())
                entries.append(entry)
            late = "_LATE" if case == "late" else ""
            name = _file_name(case, again=student in drafts and case != "plain")
            entry = f"{(last + first).lower()}{late}_{user_id}_{_FIRST_UPLOAD + upload}_{name}"
            add(entry, Path(finals[student]).read_bytes())
            entries.append(entry)
            if k % 50 == 2:  # a written report beside the notebook: not a notebook, skipped
                add(f"{(last + first).lower()}_{user_id}_{_FIRST_UPLOAD + upload}_report.pdf", b"%PDF-1.4\n")  # fmt: skip
            students.append(CanvasStudent(student, user_id, case, tuple(entries)))
            rows.append([f"{last}, {first}", user_id, f"S{user_id}", student, "Section 1"])
    with open(roster_path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section"])
        out.writerow(["    Points Possible", "", "", "", ""])
        rows.sort(key=lambda row: row[3])  # by login, as Canvas's export sorts by name
        out.writerows(rows)
        out.writerow(["Student, Test", "999999", "", "", "Section 1"])
    return CanvasDownload(Path(zip_path), Path(roster_path), tuple(students))


def check_collected(report_path: Path, download: CanvasDownload) -> dict[str, int]:
    """Check ``collect --report``'s JSON against `download`; counts for the record."""
    report = json.loads(Path(report_path).read_text(encoding="utf-8"))
    taken = {t["student"]: t["source"] for t in report["taken"]}
    want = {s.student: s.entries[-1] for s in download.students}
    wrong = sorted(s for s in want if taken.get(s) != want[s])
    drafts = {e for s in download.students for e in s.entries[:-1]}
    aside = {r["source"] for r in report["set_aside"]}
    if wrong or len(taken) != len(want) or aside != drafts or report["refused"]:
        sample = "; ".join(f"{s}: took {taken.get(s)!r}, expected {want[s]!r}" for s in wrong[:3])
        raise CollectMismatch(
            f"collect took {len(taken)} notebooks for {len(want)} students, set aside "
            f"{len(aside)} of {len(drafts)} drafts, refused {len(report['refused'])}: {sample}"
        )
    return {
        "collected": len(taken),
        "set_aside": len(aside),
        "skipped_not_notebooks": len(report["skipped"]),
    }
