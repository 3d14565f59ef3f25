"""Find the source labs and the submissions, and tell which student and lab each one is.

Contract: `load_source_labs(source)` reads the instructor labs (a notebook or a folder of
them: grader, read-only and wrong-answer cells validated, every ``forbid`` name resolved, so
a lab with a bad marker fails here with a `MarkerError` naming the cell) and
`find_submissions(args, labs)` turns command-line paths into `Submission`s plus one
`SubmissionProblem` line per input that cannot be graded, never raising for a bad
submission. Every submission and every source lab carries the SHA-256 of its bytes as
read, for the gradebook's manifest.

Naming convention (also in ``mlinfra-lab grade --help``):
- the lab is ``metadata.mlinfra.lab``, stamped by ``mlinfra-lab release``; when a student's
  tool dropped it, the file name must contain the lab name (``00_warmup``);
- folder layout: under a folder argument, a notebook inside a sub-folder belongs to that
  collection folder (``submissions/alice/00_warmup.ipynb`` -> ``alice``, deeper folders
  too); a file name that names another student there (``submissions/bob/alice_00_warmup``)
  is reported, not graded;
- flat layout: a notebook directly in a folder argument, or given as a file, is named by
  the file name without the lab name and separators (``alice.ipynb``,
  ``alice_00_warmup.ipynb`` -> ``alice``); a file named just after the lab takes the name
  of the folder it is in;
- a folder argument is searched recursively for ``*.ipynb`` (checkpoints skipped);
- Colab's ``Copy of X.ipynb`` and a browser's ``X (1).ipynb`` read as ``X.ipynb``
  (`copy_names`), with a note on the submission; two files that then name the same student
  and lab are a second submission, reported with that reason.

Input hygiene:
- A symbolic link is never followed nor read, whether given or met inside a folder: it is
  reported, as is anything that is not a regular file (a FIFO, a device). Files are
  opened with ``O_NOFOLLOW`` and checked with ``fstat`` on the open descriptor, so a file
  swapped for a link after the folder was listed is refused too. A file that is one of the
  source labs (same file, or the same bytes) is refused.
- Messages never quote a file's contents: a file that is not a notebook is described by
  the kind of error (JSON's own position message), never by its text.
- Every field of a parsed notebook that grading reads is type-checked first (`wellformed`):
  a malformed one (a code cell whose ``source`` is a number) is reported as not graded, with
  the student and lab its file name gives, and the rest of the batch goes on.
  Any other failure while identifying a file is that file's problem, never the batch's.
- Student identifiers are made from file and folder names by `hygiene.safe_student`, and
  every `SubmissionProblem` field passes `hygiene.printable`: a terminal escape in a file
  name reaches neither the console nor the gradebook.
- Budgets (see `budgets`): a file over ``max_bytes`` is refused before it is read, a
  notebook over ``max_cells`` cells after it is parsed. Between the two, its JSON's shape
  (how many values, how deep) is checked in one bounded pass before it is parsed
  (`json_budget`): a small file of millions of tiny objects costs only its own row.
- A notebook older than nbformat 4 is upgraded (nbformat's own converter); the upgrade
  gives new random cell ids, so grader and read-only cells get their source id back from
  the checksum the release wrote in their metadata. One without those checksums is
  reported, not graded (its graders could not be put back in place: a silent 0).

Design decisions:
- Two files of the same student and lab: the first (a file in that student's collection
  folder before a flat one, a name without a copy mark before one with, then command-line
  order) is graded with a note naming the
  other, which is reported as a second submission. Both show: a file named after another
  student can no longer take the real one's place silently. The same path given twice is
  graded once; a hard link to a file already read (another path, the same inode) is
  reported and noted on the first, never skipped silently.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import stat
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .budgets import DEFAULT_MAX_BYTES, DEFAULT_MAX_CELLS, file_too_large, too_many_cells
from .copy_names import describe, original_stem
from .errors import MarkerError, SourceLabError, SubmissionError
from .forbid import forbidden_codes
from .hygiene import printable, safe_student
from .json_budget import json_too_complex
from .manual import ManualCell, manual_cells
from .markers import GraderCell, ReadonlyCell, grader_cells, readonly_cells
from .release import LAB_METADATA_KEY, lab_notebooks, read_notebook
from .variants import WrongAnswer, wrong_answers
from .wellformed import malformed

__all__ = [
    "SourceLab",
    "Submission",
    "SubmissionProblem",
    "find_submissions",
    "load_source_labs",
    "read_source_lab",
]

_SEPARATORS = "_-. "
_SAFE_NAME = re.compile(r"^[\w.+-]{1,80}$")  # a lab name from a file that may be quoted
LINK = "a symbolic link: links are never followed; submit the notebook file itself"


@dataclass(frozen=True)
class SourceLab:
    """One instructor lab: its name (file stem), path, notebook and marked cells."""

    name: str
    path: Path
    notebook: Any = field(repr=False, compare=False)
    graders: tuple[GraderCell, ...] = ()
    readonly: tuple[ReadonlyCell, ...] = ()
    wrong_answers: tuple[WrongAnswer, ...] = ()
    sha256: str = ""  # of the file's bytes when it was read
    manual: tuple[ManualCell, ...] = ()  # written answers, graded by hand

    @property
    def restored(self) -> tuple[GraderCell | ReadonlyCell, ...]:
        """The cells grading restores from the source by id (graders, read-only), in order."""
        return tuple(sorted((*self.graders, *self.readonly), key=lambda c: c.index))


@dataclass(frozen=True)
class Submission:
    """One notebook to grade."""

    path: Path
    student: str
    lab: str
    notebook: Any = field(repr=False, compare=False)
    sha256: str = ""  # of the file's bytes as read and graded
    notes: tuple[str, ...] = ()  # for the gradebook: an upgrade, a disputed name


@dataclass(frozen=True)
class SubmissionProblem:
    """An input that cannot be graded, with the one line that says why (and, when known,
    whose and which lab it is, so the gradebook can show the student as not graded)."""

    path: str
    message: str
    student: str = ""
    lab: str = ""
    sha256: str = ""

    def __post_init__(self) -> None:  # every field may come from a file name (`hygiene`)
        for name in ("path", "message", "student", "lab"):
            object.__setattr__(self, name, printable(getattr(self, name)))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_source_lab(path: Path) -> SourceLab:
    """Read one source lab; raises `SourceLabError`/`MarkerError` on a bad lab.

    Resolving the ``forbid`` names imports the course modules they name.
    """
    nb, lab = read_notebook(path), path.stem
    try:
        digest = _sha256(path.read_bytes())
    except OSError as err:
        raise SourceLabError(f"{path}: cannot read ({err})") from err
    graders = tuple(grader_cells(nb, lab))
    for g in graders:
        for name in g.forbid:
            try:
                forbidden_codes(name)
            except MarkerError as err:
                raise MarkerError(f"{lab}: grader cell {g.cell_id}: {err}") from err
    return SourceLab(
        lab,
        path,
        nb,
        graders,
        tuple(readonly_cells(nb, lab)),
        tuple(wrong_answers(nb, lab, graders)),
        digest,
        tuple(manual_cells(nb, lab)),
    )


def load_source_labs(source: Path | str) -> dict[str, SourceLab]:
    """Read every source lab of `source`; raises `SourceLabError`/`MarkerError` on bad labs."""
    labs = {path.stem: read_source_lab(path) for path in lab_notebooks(source)}
    if not labs:
        raise SourceLabError(f"{source}: no *.ipynb source labs found")
    return labs


@dataclass(frozen=True)
class _Found:
    """A file a command-line argument names: where it is, and its collection folder."""

    path: Path
    folder: str | None  # the sub-folder of a folder argument it is under (folder layout)
    home: str  # the name of the folder it is in, for a file named just after the lab


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _walk(root: Path) -> list[_Found | SubmissionProblem]:
    """The notebooks under folder `root` and the links and special files met, path order;
    no link is followed (``os.scandir`` entries are classified without following)."""
    home = Path(os.path.abspath(root)).name
    found: list[_Found | SubmissionProblem] = []
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as err:
            found.append(
                SubmissionProblem(str(folder), f"cannot list this folder ({type(err).__name__})")
            )
            continue
        for entry in entries:
            path = Path(entry.path)
            if entry.name == ".ipynb_checkpoints":
                continue
            if entry.is_symlink():
                found.append(SubmissionProblem(str(path), LINK))
            elif entry.is_dir(follow_symlinks=False):
                folders.append(path)
            elif entry.name.endswith(".ipynb"):
                if entry.is_file(follow_symlinks=False):
                    parts = path.relative_to(root).parts
                    found.append(_Found(path, parts[0] if len(parts) > 1 else None, home))
                else:
                    mode = entry.stat(follow_symlinks=False).st_mode
                    found.append(
                        SubmissionProblem(str(path), f"{_kind(mode)}, not a regular file: not read")
                    )
    return sorted(found, key=lambda f: Path(f.path))


def _expand(args: Iterable[Path | str]) -> Iterator[_Found | SubmissionProblem]:
    """Yield a `_Found` per notebook the arguments name, or the problem with an argument."""
    for arg in args:
        path = Path(arg)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            yield SubmissionProblem(str(path), "no such file or folder")
            continue
        except OSError as err:
            yield SubmissionProblem(str(path), f"cannot be examined ({type(err).__name__})")
            continue
        if stat.S_ISLNK(mode):
            yield SubmissionProblem(str(path), LINK)
        elif stat.S_ISDIR(mode):
            found = _walk(path)
            if not found:
                yield SubmissionProblem(str(path), "no .ipynb notebooks in this folder")
            yield from found
        elif stat.S_ISREG(mode):
            yield _Found(path, None, Path(os.path.abspath(path)).parent.name)
        else:
            yield SubmissionProblem(str(path), f"{_kind(mode)}, not a regular file: not read")


def _read_file(path: Path, max_bytes: int | None) -> tuple[bytes, tuple[int, int]]:
    """The bytes of regular file `path` and its (device, inode), never following a link;
    raises `SubmissionError` (a link, a special file, over `max_bytes`, unreadable)."""
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise SubmissionError(LINK) from err
        raise SubmissionError(f"cannot be opened ({type(err).__name__})") from err
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError(f"{_kind(info.st_mode)}, not a regular file: not read")
        too_large = file_too_large(info.st_size, max_bytes)
        if too_large:
            raise SubmissionError(too_large)
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:  # it grew while being read
                raise SubmissionError(file_too_large(size, max_bytes) or "")
    except OSError as err:
        raise SubmissionError(f"cannot be read ({type(err).__name__})") from err
    finally:
        os.close(fd)
    return b"".join(chunks), (info.st_dev, info.st_ino)


@contextmanager
def _quiet_nbformat() -> Iterator[None]:
    """nbformat logs a validation error with the offending JSON (file contents): mute it."""
    from traitlets.log import get_logger

    logger = get_logger()
    level = (logger.logger if isinstance(logger, logging.LoggerAdapter) else logger).level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _parse(data: bytes) -> tuple[Any, int]:
    """(the notebook as nbformat 4, its nbformat version in the file); raises
    `SubmissionError` whose message never quotes the file."""
    import nbformat

    unreadable = "not a readable Jupyter notebook"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SubmissionError(f"{unreadable} (not UTF-8 text)") from err
    too_complex = json_too_complex(text)  # before any parser builds the objects
    if too_complex:
        raise SubmissionError(too_complex)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise SubmissionError(
            f"{unreadable} (not JSON: {err.msg} at line {err.lineno}, column {err.colno})"
        ) from err
    except (ValueError, RecursionError) as err:
        raise SubmissionError(f"{unreadable} (not JSON: {type(err).__name__})") from err
    version = raw.get("nbformat") if isinstance(raw, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise SubmissionError(f"{unreadable} (JSON without an nbformat version)")
    if not 1 <= version <= 4:
        raise SubmissionError(f"{unreadable} (nbformat {version}; this grader reads 1 to 4)")
    try:
        with _quiet_nbformat():
            nb = nbformat.reads(text, as_version=4)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
    # A submission may be any JSON at all: every way converting it can fail means the same
    # thing to the instructor, so the net is wide on purpose (the message names the type).
    except Exception as err:
        raise SubmissionError(
            f"{unreadable} (nbformat {version}: {type(err).__name__} while reading it)"
        ) from err
    return nb, version


def lab_of(nb: Any, path: Path, labs: dict[str, SourceLab]) -> str:
    """The source lab a submission belongs to; raises `SubmissionError` if none fits."""
    names = ", ".join(sorted(labs))
    stamped = nb.get("metadata", {}).get(LAB_METADATA_KEY, {}).get("lab")
    if isinstance(stamped, str) and stamped:
        if stamped not in labs:
            said = f"'{stamped}'" if _SAFE_NAME.match(stamped) else "an unknown name"
            raise SubmissionError(
                f"a notebook of lab {said}, which is not among the "
                f"source labs ({names}); pass its lab with --source"
            )
        return stamped
    lab = _lab_from_name(path, labs)
    if lab is None:
        raise SubmissionError(
            f"cannot tell which lab this is: no metadata.mlinfra.lab and "
            f"the file name contains none of the lab names ({names})"
        )
    return lab


def _lab_from_name(path: Path, labs: dict[str, SourceLab]) -> str | None:
    stem = original_stem(path.stem)[0]
    matches = [name for name in labs if name in stem]
    return max(matches, key=len) if matches else None


def _student(found: _Found, lab: str) -> tuple[str, str | None]:
    """(the student, or None) and, in the folder layout, why the file name disagrees."""
    stem = original_stem(found.path.stem)[0]  # Colab's "Copy of X", a browser's "X (1)"
    named = safe_student(stem.replace(lab, "").strip(_SEPARATORS))
    folder = safe_student(found.folder) if found.folder is not None else None
    if folder is None:
        return named or safe_student(found.home), None
    if named and named.casefold() != folder.casefold():
        return folder, (
            f"the file name says student '{named}' but it is in the collection folder of "
            f"'{folder}' (the student in a folder layout); not graded until the two "
            "agree: rename or move the file, or grade the folder that holds one sub-folder "
            "per student"
        )
    return folder, None


def _recover_ids(nb: Any, lab: SourceLab, version: int) -> str:
    """Give the restored cells of notebook `nb`, upgraded from nbformat `version` (random
    new ids), their source ids back by checksum; return the note for the gradebook.
    Raises `SubmissionError` when none can be matched while the lab has some."""
    by_checksum = {c.checksum: c.cell_id for c in lab.restored}
    taken = {c.get("id") for c in nb.cells}
    matched = 0
    for cell in nb.cells:
        cell_id = by_checksum.get(cell.get("metadata", {}).get("checksum"))
        if cell_id and cell_id not in taken:
            cell["id"] = cell_id
            taken.add(cell_id)
            matched += 1
    if lab.graders and not matched:
        raise SubmissionError(
            f"an nbformat {version} notebook: upgraded to nbformat 4, but none of its cells "
            "carries the checksum of a grader cell, so the graders cannot be put back in "
            "place; not graded: save it as nbformat 4 (open it in Jupyter and save) and "
            "grade it again"
        )
    return (
        f"graded after upgrading the file from nbformat {version} to 4 (grader cells "
        "matched by their release checksums)"
    )


def _source_files(labs: dict[str, SourceLab]) -> dict[object, str]:
    """Each source lab's SHA-256 and (device, inode) -> its name: a submission that is one
    of them is refused."""
    known: dict[object, str] = {}
    for name, lab in labs.items():
        known[lab.sha256] = name
        try:
            info = os.stat(lab.path)
        except OSError:
            continue
        known[info.st_dev, info.st_ino] = name
    return known


def _identify(
    found: _Found,
    labs: dict[str, SourceLab],
    max_bytes: int | None,
    max_cells: int | None,
    sources: dict[object, str],
) -> tuple[Submission | SubmissionProblem, tuple[int, int] | None]:
    """Read and identify one found file: a `Submission`, or the `SubmissionProblem` (with
    the student and lab when known); plus the file's (device, inode) when it was read."""
    path, where = found.path, str(found.path)
    if path.suffix != ".ipynb":
        return SubmissionProblem(where, "not a Jupyter notebook (expected an .ipynb file)"), None
    try:
        data, inode = _read_file(path, max_bytes)
    except SubmissionError as err:
        lab = _lab_from_name(path, labs)
        student = _student(found, lab)[0] if lab else ""
        return SubmissionProblem(where, str(err), student, lab or ""), None
    digest = _sha256(data)
    source = sources.get(inode) or sources.get(digest)
    if source is not None:
        return SubmissionProblem(
            where,
            f"this file is the instructor's source lab "
            f"'{source}' itself (same file or same bytes); not graded",
            sha256=digest,
        ), inode
    try:
        nb, version = _parse(data)
        problem = malformed(nb)
        if problem is not None:
            raise SubmissionError(f"a malformed notebook, not graded ({problem})")
    except SubmissionError as err:  # whose and which lab from the file name: its metadata is bad
        lab = _lab_from_name(path, labs)
        student = _student(found, lab)[0] if lab else ""
        return SubmissionProblem(where, str(err), student, lab or "", digest), inode
    try:
        lab = lab_of(nb, path, labs)
    except SubmissionError as err:
        return SubmissionProblem(where, str(err), sha256=digest), inode
    student, disagreement = _student(found, lab)
    problem = disagreement or too_many_cells(len(nb.cells), max_cells)
    notes: tuple[str, ...] = ()
    if problem is None and version < 4:
        try:
            notes = (_recover_ids(nb, labs[lab], version),)
        except SubmissionError as err:
            problem = str(err)
    if problem is not None:
        return SubmissionProblem(where, problem, student, lab, digest), inode
    marks = original_stem(path.stem)[1]
    if marks:
        notes = (*notes, describe(path.name, marks))
    return Submission(path, student, lab, nb, digest, notes), inode


def find_submissions(
    args: Sequence[Path | str],
    labs: dict[str, SourceLab],
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    max_cells: int | None = DEFAULT_MAX_CELLS,
) -> tuple[list[Submission], list[SubmissionProblem]]:
    """Resolve `args` into submissions to grade and problems to report (one line each)."""
    sources = _source_files(labs)
    items: list[Submission | SubmissionProblem] = []
    in_folder: set[str] = set()  # paths of the notebooks found in a collection folder
    named: set[str] = set()  # absolute paths met: a folder and a file in it name it twice
    read: dict[tuple[int, int], int] = {}  # (device, inode) -> index in items
    for found in _expand(args):
        if isinstance(found, SubmissionProblem):
            items.append(found)
            continue
        if os.path.abspath(found.path) in named:
            continue  # the same path named twice: graded once
        named.add(os.path.abspath(found.path))
        try:
            item, inode = _identify(found, labs, max_bytes, max_cells, sources)
        # the net under the checks above: whatever a file does, it is this file's problem
        except Exception as err:  # noqa: BLE001
            item, inode = (
                SubmissionProblem(
                    str(found.path), f"cannot be read as a submission ({type(err).__name__})"
                ),
                None,
            )
        if inode is not None and inode in read:  # another path to the same file
            first = items[read[inode]]
            items.append(
                SubmissionProblem(
                    str(found.path),
                    f"the same file as {first.path} (a hard link); not graded: "
                    "each submission must be a file of its own",
                    sha256=getattr(item, "sha256", ""),
                )
            )
            if isinstance(first, Submission):
                items[read[inode]] = replace(
                    first,
                    notes=(
                        *first.notes,
                        (f"disputed: {found.path} is a hard link to this same file"),
                    ),
                )
            continue
        if inode is not None:
            read[inode] = len(items)
        if found.folder is not None:
            in_folder.add(str(found.path))
        items.append(item)
    return _settle_duplicates(items, in_folder)


def _settle_duplicates(
    items: list[Submission | SubmissionProblem],
    in_folder: set[str],
) -> tuple[list[Submission], list[SubmissionProblem]]:
    """Grade one submission per (student, lab): one in the student's collection folder
    first, then one whose name has no copy mark, else the first given; note the others on
    it and report them."""
    groups: dict[tuple[str, str], list[Submission]] = {}
    for item in items:
        if isinstance(item, Submission):
            groups.setdefault((item.student, item.lab), []).append(item)
    keep: dict[int, Submission] = {}
    extra: dict[int, SubmissionProblem] = {}
    for (student, lab), subs in groups.items():
        # the student's collection folder first, then a file without a copy mark (so that
        # "Copy of bob_lab.ipynb" never displaces bob_lab.ipynb), then the order given
        first = min(
            subs, key=lambda s: (str(s.path) not in in_folder, bool(original_stem(s.path.stem)[1]))
        )
        others = [s for s in subs if s is not first]
        kept = first
        if others:
            names = ", ".join(str(s.path) for s in others)
            kept = replace(
                first,
                notes=(
                    *first.notes,
                    (
                        f"disputed: {names} also names itself {student}'s submission of this lab and "
                        f"was not graded; check that this file is {student}'s"
                    ),
                ),
            )
        keep[id(first)] = kept
        copies = any(original_stem(s.path.stem)[1] for s in subs)
        hint = (
            " (their names differ only by a Colab 'Copy of' or a browser's '(N)', which "
            "are read as the same name: keep the file to grade, remove the other)"
            if copies
            else ""
        )
        for s in others:
            extra[id(s)] = SubmissionProblem(
                str(s.path),
                f"a second submission of lab '{lab}' by '{student}' (already "
                f"grading {first.path}, noted there){hint}; not graded: if this file is "
                f"{student}'s and the other is not, remove the other and grade again",
                student,
                lab,
                s.sha256,
            )
    submissions: list[Submission] = []
    problems: list[SubmissionProblem] = []
    for item in items:
        if isinstance(item, SubmissionProblem):
            problems.append(item)
        elif id(item) in keep:
            submissions.append(keep[id(item)])
        elif id(item) in extra:
            problems.append(extra[id(item)])
    return submissions, problems
