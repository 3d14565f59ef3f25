"""Put a source lab's grader and read-only cells back into a submission before it is executed.

Contract: `restore_graders(submission_nb, lab)` returns a copy of the submission in which
every grader cell and every ``readonly`` cell of the source lab is the instructor's cell
(full text with hidden tests, metadata, id), found by cell id; a deleted one is re-inserted
where the source has it; a grader with ``forbid`` metadata runs inside its guard (see
`forbid`); all outputs are cleared. It also returns, per restored cell id, what was
changed, for the gradebook. With ``visible=True`` each grader holds its visible text instead
(the release's: hidden tests and guard left out, the release's checksum in its metadata):
the restored notebook a student reruns under nbval (see `restored`).

Design decisions:
- The cell id is the key, not the position or the tag: students insert, delete and move
  cells, and may strip tags; ids survive all of that in Jupyter (nbformat >= 4.5).
- A deleted grader goes back right after the nearest cell that precedes it in the source and
  still exists in the submission, so it runs after the student's solution cell it tests.
- Restored cells run in the source's order: a student who moves a later grader
  above an earlier one (to catch, in their function, the reference the later one passes
  it, then reuse it for the earlier exercise) finds them swapped back; the student's own
  cells stay where they are.
- A student's copy of a grader (new id) stays as an ordinary, unscored cell; a duplicate of a
  grader id is dropped. A cell without any id (a tool that saved nbformat < 4.5) is matched
  by the checksum the release put in its metadata.
- A read-only cell (a wrapper a grader calls) is restored exactly like a grader: a student
  who rewrites it to pass the grader changes nothing. It is not scored; its note goes to
  the next grader of the lab (the one that runs it) in the gradebook.
- The guard is added here, to the text that runs, never to the released text: the student
  sees the grader as written.
- Every status is reported (`RestoreNote`): "as released", "edited", "deleted", and
  "older release" when the submission's checksum differs from the current source's, so an
  instructor can see who edited graders and who worked from an outdated release.
- "Edited" is said only when it is known: the submission's text is compared with the
  current source's visible text, which a student of an older release never had. After the
  instructor rewords a grader (and regrades with ``--force``), a cell whose checksum names
  another release is reported as "older release" alone, never as edited by the student
  (the checksum covers hidden tests, so the older visible text cannot be rebuilt from it).
  Either way the source grader is what runs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .markers import GraderCell, ReadonlyCell, clear_outputs
from .submissions import SourceLab

__all__ = ["RestoreNote", "restore_graders"]


@dataclass(frozen=True)
class RestoreNote:
    """What the submission had in place of one grader (or read-only) cell."""

    cell_id: str
    status: str  # "as released", "edited", "deleted"
    older_release: bool  # the submission's checksum is not the current source's
    readonly: bool = False  # a read-only cell, not a grader

    @property
    def message(self) -> str:
        """Empty for an untouched cell, else a sentence for the gradebook."""
        what = f"read-only cell {self.cell_id}" if self.readonly else "grader cell"
        source = "source cell" if self.readonly else "source grader"
        parts = []
        if self.status == "edited":
            parts.append(f"{what} was edited in the submission; the {source} was run")
        elif self.status == "deleted":
            parts.append(
                f"{what} was missing from the submission; the {source} was re-inserted and run"
            )
        if self.older_release:
            parts.append(
                f"the submission was made from an older release of this "
                f"{'cell' if self.readonly else 'grader'}"
            )
        return "; ".join(parts)


def _status(cell: Any | None, restored: GraderCell | ReadonlyCell) -> RestoreNote:
    readonly = isinstance(restored, ReadonlyCell)
    if cell is None:
        return RestoreNote(restored.cell_id, "deleted", older_release=False, readonly=readonly)
    checksum = cell.get("metadata", {}).get("checksum")
    older = checksum is not None and checksum != restored.checksum
    edited = not older and cell.get("source", "").rstrip() != restored.visible.rstrip()
    return RestoreNote(restored.cell_id, "edited" if edited else "as released", older, readonly)


def _source_cell(lab: SourceLab, restored: GraderCell | ReadonlyCell, visible: bool) -> Any:
    """The source cell that replaces `restored` in the submission: a grader's text as grading
    runs it (guarded, scoped), or with `visible` as the release gave it."""
    cell = copy.deepcopy(lab.notebook.cells[restored.index])
    if visible:  # as `release` writes it
        cell.source = restored.visible
        cell.metadata["checksum"] = restored.checksum
        if isinstance(restored, ReadonlyCell):
            cell.metadata.update(editable=False, deletable=False)
    elif isinstance(restored, GraderCell):
        cell.source = restored.run_source
    return cell


def restore_graders(
    submission_nb: Any, lab: SourceLab, visible: bool = False
) -> tuple[Any, dict[str, RestoreNote]]:
    """Return (notebook ready to execute, notes per restored cell id); the input is unchanged.
    With `visible`, the graders hold their visible text (see the module docstring)."""
    nb = copy.deepcopy(submission_nb)
    source_cells = lab.notebook.cells
    by_id = {c.cell_id: c for c in lab.restored}
    notes: dict[str, RestoreNote] = {}
    cells = []
    by_checksum = {c.checksum: c.cell_id for c in lab.restored}
    for cell in nb.cells:
        cell_id = cell.get("id")
        if not cell_id:  # a tool that wrote nbformat < 4.5 dropped the ids: use the checksum
            cell_id = by_checksum.get(cell.get("metadata", {}).get("checksum"))
        if cell_id in by_id:
            if cell_id in notes:
                continue  # a duplicate of a restored id: drop it
            notes[cell_id] = _status(cell, by_id[cell_id])
            cell = _source_cell(lab, by_id[cell_id], visible)
        cells.append(cell)
    for restored in lab.restored:  # source order, so a re-inserted cell can anchor the next
        if restored.cell_id in notes:
            continue
        notes[restored.cell_id] = _status(None, restored)
        position = 0
        present = {c.get("id"): i for i, c in enumerate(cells)}
        for previous in reversed(source_cells[: restored.index]):
            if previous.get("id") in present:
                position = present[previous.get("id")] + 1
                break
        cells.insert(position, _source_cell(lab, restored, visible))
    _source_order(cells, [c.cell_id for c in lab.restored])
    clear_outputs(cells)
    nb.cells = cells
    return nb, notes


def _source_order(cells: list[Any], order: list[str]) -> None:
    """Put the restored cells of `cells` back in the source's relative order, in place, each
    in one of the places the restored cells hold (the student's cells do not move)."""
    rank = {cell_id: k for k, cell_id in enumerate(order)}
    places = [i for i, c in enumerate(cells) if c.get("id") in rank]
    ordered = sorted((cells[i] for i in places), key=lambda c: rank[c.get("id")])
    for i, cell in zip(places, ordered, strict=True):
        cells[i] = cell
