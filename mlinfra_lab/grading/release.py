"""Write the student version of a lab: solutions stubbed, hidden tests removed, outputs cleared.

Contract: `release_notebook(src, out)` writes the student notebook of one instructor lab and
`release_dir(src, out)` does it for every ``*.ipynb`` of a folder; the released notebook
carries ``metadata.mlinfra.lab`` (the lab's name, its file stem) and, on every grader and
read-only cell, ``metadata.checksum`` of the source text; read-only cells are marked
``editable: false, deletable: false``; no cell tagged ``wrong-answer`` is in it; every
written-answer cell (tagged ``manual``) holds `manual.PLACEHOLDER` instead of the model answer.

Design decisions:
- Grader cells keep their id, tags and metadata: grading finds them by id, restores their
  full source text (hidden tests included) and scores them with the points in the metadata.
- The checksum covers the full source text of the grader, so grading can report a
  submission made from an older release of the lab (its graders no longer match).
- Every code cell loses its outputs and execution count: no solution output leaks, and nbval
  does not compare stale outputs.
- Wrong answers (``wrong-answer`` cells) are checked like the other markers, so a malformed
  one fails the release too, then dropped: every cell with that tag, whatever its type.
- Read-only cells carry Jupyter's own ``editable``/``deletable`` flags, so the notebook
  interface refuses edits; grading does not rely on them (it restores those cells by id).
- The lab name is stamped into the notebook metadata because students rename files; the
  grader falls back to the file name only when the metadata is gone.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .errors import MarkerError, SourceLabError
from .manual import PLACEHOLDER, is_manual, manual_cells
from .markers import (
    HIDDEN_BEGIN,
    clear_outputs,
    grader_cells,
    has_markers,
    is_grader,
    is_readonly,
    readonly_cells,
    replace_solutions,
    solution_exercise,
    strip_hidden,
)
from .variants import is_wrong_answer, wrong_answers

__all__ = [
    "clear_outputs",
    "lab_notebooks",
    "read_notebook",
    "release_dir",
    "release_node",
    "release_notebook",
]

LAB_METADATA_KEY = "mlinfra"


def read_notebook(path: Path) -> Any:
    """Read a notebook as nbformat v4, raising `SourceLabError` with the path on failure."""
    import nbformat

    try:
        return nbformat.read(str(path), as_version=4)
    except (OSError, ValueError) as err:  # NotJSONError is a ValueError
        raise SourceLabError(f"{path}: cannot read as a Jupyter notebook ({err})") from err


def lab_notebooks(src: Path | str) -> list[Path]:
    """The lab notebooks at `src`: the file itself, or the folder's ``*.ipynb``, sorted."""
    src = Path(src)
    if src.is_file():
        return [src]
    if not src.is_dir():
        raise SourceLabError(f"{src}: no such file or folder of lab notebooks")
    return sorted(p for p in src.glob("*.ipynb") if p.is_file())


def release_node(nb: Any, lab: str) -> Any:
    """Return the student version of notebook node `nb` (a deep copy; `nb` is unchanged)."""
    graders = grader_cells(nb, lab)
    wrong_answers(nb, lab, graders)  # validates them; they are dropped below
    manual_cells(nb, lab)  # validates the written-answer cells; their text is replaced below
    checksums = {c.cell_id: c.checksum for c in graders}
    checksums |= {c.cell_id: c.checksum for c in readonly_cells(nb, lab)}
    out = copy.deepcopy(nb)
    clear_outputs(out.cells)
    for index, cell in enumerate(out.cells):
        where = f"{lab}: cell {cell.get('id') or f'#{index}'}"
        if is_wrong_answer(cell):
            continue  # dropped below, after the loop (the indices are the source's)
        if is_manual(cell):  # the source's text is the model answer: never released
            cell.source = PLACEHOLDER
            continue
        if cell.cell_type != "code":
            if has_markers(cell.source):
                raise MarkerError(
                    f"{where} is a {cell.cell_type} cell with solution or "
                    "hidden-test markers; markers belong in code cells"
                )
            continue
        if is_grader(cell):
            cell.source = strip_hidden(cell.source, where)
            cell.metadata["checksum"] = checksums[cell.id]
        elif is_readonly(cell):
            cell.metadata.update(editable=False, deletable=False, checksum=checksums[cell.id])
        elif has_markers(cell.source):
            if any(ln.strip() == HIDDEN_BEGIN for ln in cell.source.splitlines()):
                raise MarkerError(
                    f"{where}: hidden tests may only sit in a grader cell "
                    "(tag it 'grader' with 'points' and 'exercise' metadata)"
                )
            cell.source = replace_solutions(cell.source, solution_exercise(nb, index), where)
    out.cells = [cell for cell in out.cells if not is_wrong_answer(cell)]
    out.metadata[LAB_METADATA_KEY] = {"lab": lab, "version": "student"}
    return out


def release_notebook(src: Path | str, out: Path | str) -> Path:
    """Write the student version of lab `src` to `out` (a file, or a folder to write into)."""
    import nbformat

    src, out = Path(src), Path(out)
    if not src.is_file():
        raise SourceLabError(f"{src}: no such lab notebook")
    target = out / src.name if out.is_dir() or not out.suffix else out
    if target.resolve() == src.resolve():
        raise SourceLabError(
            f"{src}: refusing to overwrite the source with its release; choose another OUT"
        )
    released = release_node(read_notebook(src), src.stem)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(released, str(target))
    return target


def release_dir(src: Path | str, out: Path | str) -> list[Path]:
    """Release every lab of `src` (a notebook or a folder of them) into folder `out`."""
    labs = lab_notebooks(src)
    if not labs:
        raise SourceLabError(f"{src}: no *.ipynb lab notebooks in this folder")
    Path(out).mkdir(parents=True, exist_ok=True)
    return [release_notebook(lab, Path(out) / lab.name) for lab in labs]
