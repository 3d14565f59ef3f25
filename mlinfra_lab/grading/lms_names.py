"""Whose file is this: the names Canvas and Moodle give the files of a submissions download.

Contract: `parse_lms_path(parts, lms)` reads the path of one file inside a download (its
components, outermost first) and returns an `LmsName` (which LMS, the LMS's id of the
student, the display name, the order the LMS gives resubmissions, the file's original name)
or None when the path carries no LMS naming. `notebook_key(original)` is the name a file was
submitted as, with Canvas's resubmission suffix and Colab's and browsers' copy marks taken
off: two files of one student with the same key are versions of one notebook.

The namings, as the systems write them:
- Canvas ("Download Submissions"), a flat zip:
  ``<lastfirst>[_late]_<user id>_<number>_<original file name>``, e.g.
  ``smithjane_12345_678901_00_warmup.ipynb`` or ``smithjane_LATE_12345_678902_...``. The
  name is the student's sortable name, lower-cased, letters only; the number grows with
  each upload (the newest is the largest); a file uploaded again under a name the student
  already used gets ``-1``, ``-2`` before its extension (``00_warmup-1.ipynb``).
- Moodle ("Download all submissions"): a folder per submission,
  ``<Full Name>_<participant id>_assignsubmission_file_/`` holding the files as uploaded
  (``assignsubmission_onlinetext_`` for online text), or, with "download submissions in
  folders" off, flat files ``<Full Name>_<participant id>_assignsubmission_file_<name>``.

Design decisions:
- The LMS writes its prefix first and the student chooses only what follows, so the
  prefix is read from the left: the first ``_<digits>_`` of the name is the LMS's. A file a
  student names ``smithjane_12345_1_00_warmup.ipynb`` arrives as
  ``doejohn_777_9_smithjane_12345_1_00_warmup.ipynb`` and is doejohn's.
- Moodle is tried first, Canvas second, and the two cannot both match: after Moodle's
  first ``_<digits>_`` comes ``assignsubmission_``, after Canvas's come more digits.
- In a Moodle folder download the outermost folder named like a submission decides: a
  student who uploads a folder named like someone else's submission stays the owner of
  everything in it.
- Identity is the LMS's numeric id, never the display name (two students may share one);
  the name is kept for the report only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .copy_names import original_stem

__all__ = ["LMS_KINDS", "LmsName", "notebook_key", "parse_lms_path"]

LMS_KINDS = ("auto", "canvas", "moodle")
Lms = Literal["canvas", "moodle"]

_FIRST_ID = re.compile(r"_(\d{1,18})_")
_MOODLE_REST = re.compile(r"assignsubmission_([a-z]+)_(.*)", re.S)
_CANVAS = re.compile(r"(.*?)(_late)?_(\d{1,18})_(\d{1,18})_(.+)", re.S | re.I)
_CANVAS_AGAIN = re.compile(r"-(\d{1,4})$")  # "00_warmup-1": Canvas's second upload of a name


@dataclass(frozen=True)
class LmsName:
    """What the LMS's naming says about one file of a download."""

    lms: Lms
    user_id: str  # Canvas's user id, Moodle's participant id: digits
    name: str  # the display name in the prefix (for the report only)
    original: str  # the file's name (Moodle: its path in the submission) as uploaded
    upload: int = -1  # Canvas: the number that grows with each upload; Moodle: -1
    late: bool = False  # Canvas marked the submission late
    plugin: str = "file"  # Moodle: the submission plugin (file, onlinetext)


def _moodle(text: str) -> tuple[str, str, str, str] | None:
    """(name, participant id, plugin, rest) of a Moodle-made name, else None."""
    first = _FIRST_ID.search(text)
    if first is None or first.start() == 0:
        return None
    rest = _MOODLE_REST.fullmatch(text, first.end())
    if rest is None:
        return None
    return text[: first.start()], first.group(1), rest.group(1), rest.group(2)


def _canvas(text: str) -> LmsName | None:
    found = _CANVAS.fullmatch(text)
    if found is None:
        return None
    name, late, user, upload, original = found.groups()
    return LmsName("canvas", user, name, original, int(upload), late=bool(late))


def parse_lms_path(parts: tuple[str, ...], lms: str = "auto") -> LmsName | None:
    """The `LmsName` of the file at `parts` (path components, outermost first) in a
    download of `lms` (one of `LMS_KINDS`), or None when no LMS naming fits."""
    if lms in ("auto", "moodle"):
        for depth, part in enumerate(parts[:-1]):  # a folder per submission, outermost wins
            found = _moodle(part)
            if found is not None and found[3] == "":
                name, user, plugin, _ = found
                return LmsName("moodle", user, name, "/".join(parts[depth + 1 :]), plugin=plugin)
        found = _moodle(parts[-1])  # the flat layout
        if found is not None and found[3]:
            name, user, plugin, original = found
            return LmsName("moodle", user, name, original, plugin=plugin)
    if lms in ("auto", "canvas"):
        return _canvas(parts[-1])
    return None


def _again(stem: str) -> tuple[str, int]:
    """`stem` without Canvas's ``-N`` (a second upload of the same name), and N (0: none)."""
    found = _CANVAS_AGAIN.search(stem)
    if found is None or found.start() == 0:
        return stem, 0
    return stem[: found.start()], int(found.group(1))


def notebook_key(original: str) -> tuple[str, int, tuple[str, ...]]:
    """(the name a file was submitted as, case-folded, without folders, extension,
    Canvas's ``-N`` and copy marks; that N, 0 if none; the copy marks found)."""
    stem = original.rsplit("/", 1)[-1]
    if stem.lower().endswith(".ipynb"):
        stem = stem[: -len(".ipynb")]
    stem, n = _again(stem)  # Canvas appends -N last: "Copy of 00_warmup (1)-1"
    stem, marks = original_stem(stem)
    if not n:  # a browser's copy of a file Canvas had renamed: "00_warmup-1 (1)"
        stem, n = _again(stem)
    return stem.casefold(), n, marks
