"""Read an LMS submissions download, a zip or a folder, without trusting any name in it.

Contract: `read_download(path, limits)` lists every file of the download and returns a
`Download`: the notebooks (``*.ipynb``) it read, each as its path components and bytes; the
entries it refused, each with one line saying why; and the other files it skipped (PDFs,
online-text pages). It raises `DownloadError` only when the download as a whole cannot be
read (not a zip, more entries than `Limits.max_entries`). Nothing is extracted: the bytes
are kept in memory, and where they are written is decided later from the LMS's ids
(`collect`), never from a name in the download.

What is refused, entry by entry (the rest of the download is still read):
- a name that leaves the download: absolute (``/x``, ``C:x``), with a ``..`` component, a
  backslash (Windows' separator, which some tools honour) or an empty component (the "zip
  slip"); a name with a control character or a bidirectional override (a terminal escape,
  or a name that displays as another);
- a symbolic link (a zip entry whose Unix mode says so, a link in a folder), a hard link
  (a folder's file with more than one name: the same bytes could be claimed from two
  students' folders), anything that is not a regular file, an encrypted zip entry;
- a name that occurs twice in a zip, or twice once case and Unicode normalisation are
  ignored (an extraction would keep one of them silently: which one depends on the tool);
- a notebook over `Limits.max_bytes`, or any notebook once those read add up to
  `Limits.max_total` (the zip bomb: a few kilobytes that inflate to gigabytes). Sizes are
  checked twice: the size the zip declares, before reading, and the bytes actually
  inflated, counted while reading.

Design decisions:
- Only notebooks are read; other files are listed as skipped and never inflated, so a bomb
  hidden in a PDF costs nothing.
- A folder is walked with ``os.scandir`` without following links, and each notebook opened
  with ``O_NOFOLLOW`` and checked with ``fstat`` on the open descriptor (a file swapped for
  a link after the listing is refused too), as `submissions` reads submissions.
- macOS's ``__MACOSX/`` and ``.DS_Store`` (added when a download is re-zipped on a Mac) are
  skipped like any other file that is not a notebook.
"""

from __future__ import annotations

import errno
import os
import stat
import time
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .budgets import DEFAULT_MAX_BYTES, file_too_large, human_bytes
from .errors import GradingError
from .hygiene import printable

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_MAX_TOTAL",
    "Download",
    "DownloadError",
    "Entry",
    "Limits",
    "read_download",
    "unsafe_name",
]

DEFAULT_MAX_ENTRIES = 20_000  # files and folders; a class of 1,000 with a few files each
DEFAULT_MAX_TOTAL = 2 * 10**9  # bytes of notebooks read, inflated
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_CHUNK = 1 << 20


class DownloadError(GradingError):
    """A download that cannot be read at all (not a zip or folder, too many entries)."""


@dataclass(frozen=True)
class Limits:
    """What reading one download may cost (``None``: no limit)."""

    max_bytes: int | None = DEFAULT_MAX_BYTES  # one notebook
    max_total: int | None = DEFAULT_MAX_TOTAL  # all notebooks read, together
    max_entries: int | None = DEFAULT_MAX_ENTRIES  # entries listed, of any kind


@dataclass(frozen=True)
class Entry:
    """One file of a download: its path components (outermost first), and what became of
    it (`data` for a notebook read; `problem` for one refused; neither for one skipped)."""

    parts: tuple[str, ...]
    data: bytes | None = field(default=None, repr=False)
    problem: str | None = None
    mtime: float | None = None  # the time the download gives the file (the late policy)

    @property
    def name(self) -> str:
        """The path inside the download, printable (safe for a console and a report)."""
        return printable("/".join(self.parts), 300)


@dataclass(frozen=True)
class Download:
    """What `read_download` found."""

    notebooks: list[Entry]
    refused: list[Entry]
    skipped: list[Entry]


def unsafe_name(name: str) -> str | None:
    """Why the path `name` (``/``-separated, as a zip stores it) may not be used, or None."""
    if any(unicodedata.category(c) == "Cc" or c in _BIDI for c in name):
        return "its name holds a control character or a bidirectional override"
    if "\\" in name:
        return "its name holds a backslash (a Windows path separator that can leave the folder)"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "an absolute path (it would be written outside the folder: a zip slip)"
    parts = name.rstrip("/").split("/")
    if ".." in parts:
        return "a '..' in its path (it would be written outside the folder: a zip slip)"
    if "" in parts:
        return "an empty component in its path"
    return None


def _is_notebook(parts: tuple[str, ...]) -> bool:
    return parts[-1].lower().endswith(".ipynb") and parts[0] != "__MACOSX"


class _Budget:
    """The bytes of notebooks read so far, against `Limits`."""

    def __init__(self, limits: Limits) -> None:
        self.limits, self.total = limits, 0

    def refuse(self, size: int) -> str | None:
        """Why a notebook of (declared or read) `size` bytes is not read, or None."""
        too_large = file_too_large(size, self.limits.max_bytes)
        if too_large:
            return too_large.replace("the file is", "the notebook is")
        cap = self.limits.max_total
        if cap is not None and self.total + size > cap:
            return (
                f"the notebooks of this download add up to more than {human_bytes(cap)} "
                "(--max-total): not read; a zip that inflates this far is not a class's "
                "notebooks"
            )
        return None


def _zip_mode(info: zipfile.ZipInfo) -> int:
    return (info.external_attr >> 16) & 0xFFFF if info.create_system == 3 else 0


def _zip_refusal(info: zipfile.ZipInfo, counts: dict[str, int]) -> str | None:
    bad = unsafe_name(info.filename)
    if bad:
        return bad
    mode = _zip_mode(info)
    if stat.S_ISLNK(mode):
        return "a symbolic link: links are never followed nor created"
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
        return "not a regular file"
    if info.flag_bits & 0x1:
        return "an encrypted entry"
    seen = counts[_fold(info.filename)]
    if seen > 1:
        return (
            f"the download holds {seen} entries of this name (letter case and Unicode "
            "normalisation aside): none is read, as an extraction would keep one silently"
        )
    return None


def _fold(name: str) -> str:
    return unicodedata.normalize("NFC", name).casefold()


def _zip_time(info: zipfile.ZipInfo) -> float | None:
    try:  # a zip stores local time, as unzip restores it
        return time.mktime((*info.date_time, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def _read_zip(path: Path, limits: Limits) -> Download:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        raise DownloadError(f"{path}: not a readable zip file ({err})") from None
    out = Download([], [], [])
    budget = _Budget(limits)
    with archive:
        infos = archive.infolist()
        if limits.max_entries is not None and len(infos) > limits.max_entries:
            raise DownloadError(
                f"{path}: {len(infos):,} entries, more than --max-entries "
                f"{limits.max_entries:,}; nothing collected (raise the limit if this "
                "really is one assignment's download)"
            )
        counts: dict[str, int] = {}
        for info in infos:
            key = _fold(info.filename)
            counts[key] = counts.get(key, 0) + 1
        for info in infos:
            if info.is_dir() and not unsafe_name(info.filename):
                continue
            parts = tuple(info.filename.rstrip("/").split("/"))
            problem = _zip_refusal(info, counts)
            if problem is None and not _is_notebook(parts):
                out.skipped.append(Entry(parts))
                continue
            problem = problem or budget.refuse(info.file_size)
            data = None
            if problem is None:
                data, problem = _inflate(archive, info, budget)
            if problem is not None or data is None:
                out.refused.append(Entry(parts, problem=problem))
            else:
                budget.total += len(data)
                out.notebooks.append(Entry(parts, data, mtime=_zip_time(info)))
    return out


def _inflate(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _Budget
) -> tuple[bytes | None, str | None]:
    """(the entry's bytes, None) or (None, why not), counting what is really inflated."""
    chunks, size = [], 0
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(_CHUNK):
                size += len(chunk)
                problem = budget.refuse(size)
                if problem:
                    return None, problem
                chunks.append(chunk)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, ValueError) as err:
        return None, f"a damaged zip entry ({type(err).__name__})"
    return b"".join(chunks), None


def _read_file(path: Path, budget: _Budget) -> tuple[bytes | None, str | None, float | None]:
    """(bytes, None, mtime) of regular file `path` with one name, or (None, why not, None)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if err.errno == errno.ELOOP:
            return None, "a symbolic link: links are never followed", None
        return None, f"cannot be opened ({type(err).__name__})", None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file", None
        if info.st_nlink > 1:
            return (
                None,
                (
                    f"a hard link (this file has {info.st_nlink} names, so the same bytes "
                    "can be claimed from more than one place); not read: copy the file"
                ),
                None,
            )
        problem = budget.refuse(info.st_size)
        chunks, size = [], 0
        while problem is None and (chunk := os.read(fd, _CHUNK)):
            size += len(chunk)
            problem = budget.refuse(size)  # it grew while being read
            chunks.append(chunk)
    except OSError as err:
        return None, f"cannot be read ({type(err).__name__})", None
    finally:
        os.close(fd)
    if problem is not None:
        return None, problem, None
    return b"".join(chunks), None, info.st_mtime


def _read_folder(root: Path, limits: Limits) -> Download:
    out = Download([], [], [])
    budget = _Budget(limits)
    listed = 0
    folders: list[tuple[str, ...]] = [()]
    found: list[tuple[tuple[str, ...], os.DirEntry[str]]] = []
    while folders:
        here = folders.pop()
        try:
            with os.scandir(root.joinpath(*here)) as listing:
                entries = list(listing)
        except OSError as err:
            out.refused.append(
                Entry(here or (".",), problem=f"cannot list this folder ({type(err).__name__})")
            )
            continue
        listed += len(entries)
        if limits.max_entries is not None and listed > limits.max_entries:
            raise DownloadError(
                f"{root}: more than --max-entries {limits.max_entries:,} files and "
                "folders; nothing collected"
            )
        for entry in entries:
            parts = (*here, entry.name)
            problem = unsafe_name(entry.name)
            if problem is None and entry.is_symlink():
                problem = "a symbolic link: links are never followed"
            if problem is not None:
                out.refused.append(Entry(parts, problem=problem))
            elif entry.is_dir(follow_symlinks=False):
                folders.append(parts)
            else:
                found.append((parts, entry))
    for parts, entry in sorted(found, key=lambda f: f[0]):
        if not _is_notebook(parts):
            out.skipped.append(Entry(parts))
            continue
        data, problem, mtime = _read_file(Path(entry.path), budget)
        if data is None:
            out.refused.append(Entry(parts, problem=problem))
        else:
            budget.total += len(data)
            out.notebooks.append(Entry(parts, data, mtime=mtime))
    return out


def read_download(path: Path | str, limits: Limits | None = None) -> Download:
    """Read the download at `path`, a zip file or a folder (see the module docstring)."""
    path, limits = Path(path), limits or Limits()
    try:
        mode = os.lstat(path).st_mode
    except OSError as err:
        raise DownloadError(f"{path}: cannot be read ({type(err).__name__})") from None
    if stat.S_ISLNK(mode):
        raise DownloadError(f"{path}: a symbolic link; give the zip or folder itself")
    if stat.S_ISDIR(mode):
        return _read_folder(path, limits)
    if stat.S_ISREG(mode):
        return _read_zip(path, limits)
    raise DownloadError(f"{path}: neither a zip file nor a folder")
