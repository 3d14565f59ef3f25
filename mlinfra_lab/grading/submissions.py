"""Find the source labs and the submissions, and tell which student and lab each one is.

Contract: `load_source_labs(source)` reads the instructor labs (a notebook or a folder of
them: grader, read-only and wrong-answer cells validated, every ``forbid`` name resolved, so
a lab with a bad marker fails here with a `MarkerError` naming the cell) and `find_submissions(args, labs)` turns command-line paths into `Submission`s plus one
`SubmissionProblem` line per input that cannot be graded, never raising for a bad submission.

Naming convention (also in ``mlinfra-lab grade --help``):
- the lab is ``metadata.mlinfra.lab``, stamped by ``mlinfra-lab release``; when a student's
  tool dropped it, the file name must contain the lab name (``00_warmup``);
- the student is the file name without the lab name and separators
  (``alice.ipynb``, ``alice_00_warmup.ipynb`` -> ``alice``); a file named just after the lab
  (``alice/00_warmup.ipynb``) takes its folder's name, so a folder per student works;
- a folder argument is searched recursively for ``*.ipynb`` (checkpoints skipped).

Design decision: a second submission of the same lab by the same student is reported, not
silently graded twice, because a gradebook with two rows per exercise is ambiguous.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import MarkerError, SourceLabError, SubmissionError
from .forbid import forbidden_codes
from .markers import GraderCell, ReadonlyCell, grader_cells, readonly_cells
from .release import LAB_METADATA_KEY, lab_notebooks, read_notebook
from .variants import WrongAnswer, wrong_answers

__all__ = [
    "SourceLab",
    "Submission",
    "SubmissionProblem",
    "find_submissions",
    "load_source_labs",
    "read_source_lab",
]

_SEPARATORS = "_-. "


@dataclass(frozen=True)
class SourceLab:
    """One instructor lab: its name (file stem), path, notebook and marked cells."""

    name: str
    path: Path
    notebook: Any = field(repr=False, compare=False)
    graders: tuple[GraderCell, ...] = ()
    readonly: tuple[ReadonlyCell, ...] = ()
    wrong_answers: tuple[WrongAnswer, ...] = ()

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


@dataclass(frozen=True)
class SubmissionProblem:
    """An input that cannot be graded, with the one line that says why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def read_source_lab(path: Path) -> SourceLab:
    """Read one source lab; raises `SourceLabError`/`MarkerError` on a bad lab.

    Resolving the ``forbid`` names imports the course modules they name.
    """
    nb, lab = read_notebook(path), path.stem
    graders = tuple(grader_cells(nb, lab))
    for g in graders:
        for name in g.forbid:
            try:
                forbidden_codes(name)
            except MarkerError as err:
                raise MarkerError(f"{lab}: grader cell {g.cell_id}: {err}") from err
    return SourceLab(lab, path, nb, graders, tuple(readonly_cells(nb, lab)),
                     tuple(wrong_answers(nb, lab, graders)))


def load_source_labs(source: Path | str) -> dict[str, SourceLab]:
    """Read every source lab of `source`; raises `SourceLabError`/`MarkerError` on bad labs."""
    labs = {path.stem: read_source_lab(path) for path in lab_notebooks(source)}
    if not labs:
        raise SourceLabError(f"{source}: no *.ipynb source labs found")
    return labs


def _expand(args: Iterable[Path | str]) -> Iterable[tuple[Path, str | None]]:
    """Yield (notebook path, None) or (path, problem) for each command-line argument."""
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.ipynb")
                           if ".ipynb_checkpoints" not in p.parts and p.is_file())
            if not found:
                yield path, "no .ipynb notebooks in this folder"
            yield from ((p, None) for p in found)
        elif path.is_file():
            yield path, None
        else:
            yield path, "no such file or folder"


def lab_of(nb: Any, path: Path, labs: dict[str, SourceLab]) -> str:
    """The source lab a submission belongs to; raises `SubmissionError` if none fits."""
    names = ", ".join(sorted(labs))
    stamped = nb.get("metadata", {}).get(LAB_METADATA_KEY, {}).get("lab")
    if isinstance(stamped, str) and stamped:
        if stamped not in labs:
            raise SubmissionError(f"a notebook of lab '{stamped}', which is not among the "
                                  f"source labs ({names}); pass its lab with --source")
        return stamped
    matches = [name for name in labs if name in path.stem]
    if not matches:
        raise SubmissionError(f"cannot tell which lab this is: no metadata.mlinfra.lab and "
                              f"the file name contains none of the lab names ({names})")
    return max(matches, key=len)


def student_of(path: Path, lab: str) -> str:
    """The student's name from the file name, or the folder's for a file named after the lab."""
    name = path.stem.replace(lab, "").strip(_SEPARATORS)
    return name or path.resolve().parent.name


def _read_submission(path: Path) -> Any:
    """Read a submitted notebook; any failure is a `SubmissionError` with a one-line reason."""
    import nbformat

    try:
        nb = nbformat.read(str(path), as_version=4)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("it has no list of cells")
    # A submission may be any file at all: every way reading it can fail means the same
    # thing to the instructor, so the net is wide on purpose.
    except Exception as err:  # noqa: BLE001
        first = str(err).splitlines()[0] if str(err) else ""
        raise SubmissionError(f"not a readable Jupyter notebook ({type(err).__name__}: "
                              f"{first})") from err
    return nb


def find_submissions(
    args: Sequence[Path | str], labs: dict[str, SourceLab]
) -> tuple[list[Submission], list[SubmissionProblem]]:
    """Resolve `args` into submissions to grade and problems to report (one line each)."""
    submissions: list[Submission] = []
    problems: list[SubmissionProblem] = []
    seen: dict[tuple[str, str], Path] = {}
    for path, problem in _expand(args):
        if problem is None and path.suffix != ".ipynb":
            problem = "not a Jupyter notebook (expected an .ipynb file)"
        if problem is None:
            try:
                nb = _read_submission(path)
                lab = lab_of(nb, path, labs)
            except SubmissionError as err:
                problem = str(err)
        if problem is None:
            student = student_of(path, lab)
            if (student, lab) in seen:
                problem = (f"a second submission of lab '{lab}' by '{student}' "
                           f"(already grading {seen[student, lab]}); remove one")
            else:
                seen[student, lab] = path
                submissions.append(Submission(path, student, lab, nb))
        if problem is not None:
            problems.append(SubmissionProblem(str(path), problem))
    return submissions, problems
