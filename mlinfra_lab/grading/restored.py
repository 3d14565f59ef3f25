"""The restored notebook of a graded submission: graders back in place, hidden tests left out.

Contract: `restored_notebook(submission, lab)` returns the submission as grading restored
it (`restore.restore_graders`: every grader and read-only cell of the source lab back by id,
in the source's order, outputs cleared), except that each grader holds its *visible* text,
the text the release gave the student; `write_restored(submissions, source, out)` writes
one per submission found (a refused input is grading's to report) as
``OUT/STUDENT/LAB.ipynb`` and returns a `RestoredRun` (what it wrote, what it skipped and
why). `RestoredLeakError` stops it before a notebook whose restored cells would quote a line
of a hidden test is written (a bug of this module).

Why: a student who disputes a grade, and the instructor who answers, rerun that notebook
in a plain Jupyter kernel with ``pytest --nbval-lax OUT/STUDENT/LAB.ipynb``: nbval makes each
code cell a test item ``Cell N`` (code cells counted from 0, the numbering grading's kernel
runner uses), and a grader cell that fails there names the visible check that failed.

Design decisions:
- The same cell semantics as grading: under ``--nbval-lax`` a cell passes when it runs
  without raising, and no output is compared; that is `kernel_runner`'s rule, which also
  reads the kernel's ``execute_reply``. nbval's own markers (``# NBVAL_SKIP``, the tags
  ``nbval-skip``, ``raises-exception``, ...) change that rule and grading honours none of
  them, so here the tags are dropped and the comment markers reworded (``# NBVAL_SKIP
  (not honoured: grading runs every cell)``): nbval runs every cell as grading did.
- What is comparable: grading's verdict on a grader is its visible tests, its hidden tests,
  the judge and the ``forbid`` guard together; this notebook holds the visible tests only.
  A grader that passed in grading passes here; one that fails here failed in grading,
  with the same assertion message; one can fail in grading and pass here only through what
  is not here (a hidden test, the judge, the guard, a budget).
  This holds for a notebook that leaves the grader's machinery alone: grading undoes a
  student cell that redefines a read-only helper or patches IPython before each grader
  (`kernel_reset`), a plain kernel does not.
- Hidden tests never leave the instructor's side: a grader's text here is
  `markers.GraderCell.visible`, and before a notebook is written its restored cells are
  checked against every hidden line of the lab (`messages.hidden_lines`) that the release
  does not also show. A student's own cells are theirs and are not checked: what they
  hold, they had.
- No secret and no seed: the notebook carries neither, so in a plain kernel
  `secret.grading_rng` draws the public default's numbers, as in the student's own run. A
  visible test with fixed inputs gives grading's verdict whatever the secret; one that draws
  from `grading_seed` (lab 2's mysteries) gives the verdict on the inputs the student saw.
- The notebook's metadata ``mlinfra`` names the lab, ``"version": "restored"``, and the
  SHA-256 of the submission and of the source lab, so an appeal names the exact files.
- Written under ``OUT`` only: a student or lab name that is not one plain folder name, or a
  folder that is a symbolic link, is skipped with the reason; files are replaced
  atomically. ``OUT`` inside a submissions or source folder is refused (`SubmissionError`):
  the next run would read the restored notebooks as its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import GradingError, SubmissionError
from .feedback import safe_component
from .manifest import atomic_write
from .messages import hidden_lines
from .release import LAB_METADATA_KEY
from .restore import restore_graders
from .submissions import SourceLab, Submission, find_submissions, load_source_labs

__all__ = [
    "NBVAL_MARKERS",
    "RestoredLeakError",
    "RestoredRun",
    "refuse_inside",
    "restored_notebook",
    "write_restored",
]

# nbval's comment markers and (lower-case, dashed) tags: each changes how nbval runs a cell
NBVAL_MARKERS = (
    "NBVAL_IGNORE_OUTPUT",
    "NBVAL_CHECK_OUTPUT",
    "NBVAL_RAISES_EXCEPTION",
    "NBVAL_SKIP",
    "PYTEST_VALIDATE_IGNORE_OUTPUT",
)
_NBVAL_TAGS = {m.lower().replace("_", "-") for m in NBVAL_MARKERS} | {"raises-exception"}
_NOT_HONOURED = " (not honoured: grading runs every cell)"


class RestoredLeakError(GradingError):
    """A restored notebook would quote a hidden test; it is not written (report this bug)."""


@dataclass
class RestoredRun:
    """What one `write_restored` call did."""

    written: list[tuple[str, str, Path]] = field(default_factory=list)  # (student, lab, path)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (submission path, why)


def _neutralise(cell: Any) -> None:
    """Drop nbval's tags from `cell` and reword its comment markers (see the docstring)."""
    tags = cell.get("metadata", {}).get("tags")
    if isinstance(tags, list):
        kept = [t for t in tags if t not in _NBVAL_TAGS]
        if kept != tags:
            cell.metadata["tags"] = kept
    lines = cell.source.splitlines(keepends=True)
    for k, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#") and stripped.lstrip("#").strip() in NBVAL_MARKERS:
            end = len(line.rstrip("\r\n"))
            lines[k] = line[:end] + _NOT_HONOURED + line[end:]
    cell.source = "".join(lines)


def _check_no_hidden(nb: Any, lab: SourceLab) -> None:
    """`RestoredLeakError` when a restored cell of `nb` holds a hidden line of `lab` that
    the release does not also show (``with np.errstate(...):`` may be in both)."""
    released = ["".join(g.visible.split()) for g in lab.graders]
    hidden = [
        line
        for g in lab.graders
        for line in hidden_lines(g.source)
        if not any(line in text for text in released)
    ]
    restored = {c.cell_id for c in lab.restored}
    for cell in nb.cells:
        if cell.get("id") in restored:
            squashed = "".join(str(cell.source).split())
            if any(line in squashed for line in hidden):
                raise RestoredLeakError(
                    f"{lab.name}: the restored cell {cell.get('id')} quotes a hidden test; "
                    "no restored notebook was written (this is a bug of mlinfra_lab: report it)"
                )


def restored_notebook(submission: Submission, lab: SourceLab) -> Any:
    """The restored notebook of `submission`, a submission of `lab` (see the docstring)."""
    nb, _notes = restore_graders(submission.notebook, lab, visible=True)
    for cell in nb.cells:
        if cell.get("cell_type") == "code":
            _neutralise(cell)
    _check_no_hidden(nb, lab)
    nb.metadata[LAB_METADATA_KEY] = {
        "lab": lab.name,
        "version": "restored",
        "submission_sha256": submission.sha256,
        "source_sha256": lab.sha256,
    }
    return nb


def refuse_inside(out: Path | str, folders: Sequence[Path | str]) -> None:
    """`SubmissionError` when folder `out` is inside one of `folders` (see the docstring)."""
    target = Path(out).resolve()
    for folder in folders:
        if Path(folder).is_dir() and target.is_relative_to(Path(folder).resolve()):
            raise SubmissionError(
                f"--write-restored {out}: inside {folder}, a folder grading reads "
                "(submissions or source labs), where the next run would read the restored "
                "notebooks as its inputs; choose a folder outside it"
            )


def write_restored(
    submissions: Sequence[Path | str],
    source: Path | str,
    out: Path | str,
    max_bytes: int | None = None,
    max_cells: int | None = None,
    students: frozenset[str] = frozenset(),
) -> RestoredRun:
    """Write the restored notebook of every submission found in `submissions` (as grading
    finds them, with the same size limits; only those of `students` when given) into
    ``out/STUDENT/LAB.ipynb``."""
    import nbformat

    out = Path(out)
    refuse_inside(out, [*submissions, source])
    labs = load_source_labs(source)
    found, _refused = find_submissions(submissions, labs, max_bytes, max_cells)  # grade says
    run = RestoredRun()
    for sub in found:
        if students and sub.student not in students:
            continue
        if not (safe_component(sub.student) and safe_component(sub.lab)):
            why = "not a plain folder name (a separator or control code)"
            run.skipped.append((str(sub.path), why))
            continue
        folder = out / sub.student
        if folder.is_symlink() or out.is_symlink():
            run.skipped.append((str(sub.path), f"{folder} is a symbolic link; not followed"))
            continue
        try:
            nb = restored_notebook(sub, labs[sub.lab])
        except RestoredLeakError:
            raise
        # a malformed cell of a student's file is that file's loss, as in grading
        except Exception as err:  # noqa: BLE001
            run.skipped.append((str(sub.path), f"cannot be restored ({type(err).__name__})"))
            continue
        path = folder / f"{sub.lab}.ipynb"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(path, nbformat.writes(nb).encode("utf-8"))
        except OSError as err:
            why = err.strerror or type(err).__name__
            run.skipped.append((str(sub.path), f"{path} cannot be written ({why})"))
            continue
        run.written.append((sub.student, sub.lab, path))
    return run
