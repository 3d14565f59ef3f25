"""What happened to one code cell of a graded (or validated) notebook.

Contract: `CellOutcome` is the record every runner returns per code cell: its id, its index
among the notebook's code cells, ``"passed"`` / ``"failed"`` (or ``"note"`` for a budget
remark kept beside the cell's own outcome) and a one-line message. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CellOutcome"]


@dataclass(frozen=True)
class CellOutcome:
    """What happened to one code cell."""

    cell_id: str | None
    cell_num: int  # index among the notebook's code cells
    outcome: str  # "passed", "failed"; "note": a budget remark on this cell
    message: str  # last exception line when failed, else ""

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"
