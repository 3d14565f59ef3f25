"""Put a source lab's grader cells back into a submission before it is executed.

Contract: `restore_graders(submission_nb, lab)` returns a copy of the submission in which
every grader cell of the source lab is the instructor's cell (full text with hidden tests,
metadata, id), found by cell id; a deleted grader is re-inserted where the source has it;
all outputs are cleared. It also returns, per grader id, what was changed, for the gradebook.

Design decisions:
- The cell id is the key, not the position or the tag: students insert, delete and move
  cells, and may strip tags; ids survive all of that in Jupyter (nbformat >= 4.5).
- A deleted grader goes back right after the nearest cell that precedes it in the source and
  still exists in the submission, so it runs after the student's solution cell it tests.
- A student's copy of a grader (new id) stays as an ordinary, unscored cell; a duplicate of a
  grader id is dropped. A cell without any id (a tool that saved nbformat < 4.5) is matched
  by the checksum the release put in its metadata.
- Every status is reported (`RestoreNote`): "as released", "edited", "deleted", and
  "older release" when the submission's checksum differs from the current source's, so an
  instructor can see who edited graders and who worked from an outdated release.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .markers import GraderCell
from .release import clear_outputs
from .submissions import SourceLab

__all__ = ["RestoreNote", "restore_graders"]


@dataclass(frozen=True)
class RestoreNote:
    """What the submission had in place of one grader cell."""

    cell_id: str
    status: str  # "as released", "edited", "deleted"
    older_release: bool  # the submission's checksum is not the current source's

    @property
    def message(self) -> str:
        """Empty for an untouched grader, else a sentence for the gradebook."""
        parts = []
        if self.status == "edited":
            parts.append("grader cell was edited in the submission; the source grader was run")
        elif self.status == "deleted":
            parts.append("grader cell was missing from the submission; the source grader "
                         "was re-inserted and run")
        if self.older_release:
            parts.append("the submission was made from an older release of this grader")
        return "; ".join(parts)


def _status(cell: Any | None, grader: GraderCell) -> RestoreNote:
    if cell is None:
        return RestoreNote(grader.cell_id, "deleted", older_release=False)
    checksum = cell.get("metadata", {}).get("checksum")
    older = checksum is not None and checksum != grader.checksum
    edited = cell.get("source", "").rstrip() != grader.visible.rstrip()
    return RestoreNote(grader.cell_id, "edited" if edited else "as released", older)


def restore_graders(submission_nb: Any, lab: SourceLab) -> tuple[Any, dict[str, RestoreNote]]:
    """Return (notebook ready to execute, notes per grader id); `submission_nb` is unchanged."""
    nb = copy.deepcopy(submission_nb)
    source_cells = lab.notebook.cells
    by_id = {g.cell_id: g for g in lab.graders}
    notes: dict[str, RestoreNote] = {}
    cells = []
    by_checksum = {g.checksum: g.cell_id for g in lab.graders}
    for cell in nb.cells:
        cell_id = cell.get("id")
        if not cell_id:  # a tool that wrote nbformat < 4.5 dropped the ids: use the checksum
            cell_id = by_checksum.get(cell.get("metadata", {}).get("checksum"))
        if cell_id in by_id:
            if cell_id in notes:
                continue  # a duplicate of a grader id: drop it
            grader = by_id[cell_id]
            notes[cell_id] = _status(cell, grader)
            cell = copy.deepcopy(source_cells[grader.index])
        cells.append(cell)
    for grader in lab.graders:  # source order, so a re-inserted grader can anchor the next
        if grader.cell_id in notes:
            continue
        notes[grader.cell_id] = _status(None, grader)
        position = 0
        present = {c.get("id"): i for i, c in enumerate(cells)}
        for previous in reversed(source_cells[: grader.index]):
            if previous.get("id") in present:
                position = present[previous.get("id")] + 1
                break
        cells.insert(position, copy.deepcopy(source_cells[grader.index]))
    clear_outputs(cells)
    nb.cells = cells
    return nb, notes
