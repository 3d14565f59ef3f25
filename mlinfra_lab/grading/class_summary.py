"""A class summary for the instructor: per lab and exercise, how the points fell.

Contract: `summary_rows(report)` gives, per (lab, exercise), the number of graded
submissions, the mean, median, minimum and maximum points, and how many scored full marks;
`summary_text(report)` is that table as plain text (with a total row per lab), then the
submissions identified but not graded, each with its reason;
`write_summary(report, out_dir)` writes ``summary.txt`` and ``summary.png`` (a histogram of
the points of each exercise, one panel each, via matplotlib's Agg backend) into `out_dir`
and returns their paths (``grade --summary``).

Design decisions:
- Written answers still pending count as 0 in the histogram but are counted apart
  (``pending``), so a half-graded class does not read as a failing one. On a lab's total
  row, ``pending`` is the number of submissions whose total is not final yet (one written
  answer pending or more).
- The late penalty is not an exercise: it is left out of the per-exercise panels and is
  included in the lab totals, as in the export.
- The picture is for reading, not for a report: no GUI backend, no fonts to install, one
  file that opens anywhere.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from .grade import GradeReport
from .late import LATE_EXERCISE
from .manifest import atomic_write
from .manual import PENDING

__all__ = ["SummaryRow", "summary_rows", "summary_text", "write_summary"]


@dataclass(frozen=True)
class SummaryRow:
    """How the points of one exercise (or a lab's total) fell across the class."""

    lab: str
    exercise: str  # "(total)" for the lab
    count: int
    max_points: float
    mean: float
    median: float
    low: float
    high: float
    full: int  # submissions with full marks
    pending: int  # written answers not graded yet
    points: tuple[float, ...]  # every submission's, for the histogram


def _row(lab: str, exercise: str, points: list[float], max_points: float, pending: int) -> SummaryRow:  # fmt: skip
    return SummaryRow(
        lab, exercise, len(points), max_points, statistics.fmean(points),
        statistics.median(points), min(points), max(points),
        sum(p >= max_points for p in points), pending, tuple(points),
    )  # fmt: skip


def summary_rows(report: GradeReport) -> list[SummaryRow]:
    """Per lab (sorted), its exercises in lab order, then its total."""
    per: dict[str, dict[str, list]] = {}
    totals: dict[str, list[float]] = {}
    maxima: dict[str, float] = {}
    unfinished: dict[str, int] = {}  # lab -> submissions with a written answer pending
    for r in report.results:
        totals.setdefault(r.lab, []).append(r.points)
        maxima[r.lab] = max(maxima.get(r.lab, 0.0), r.max_points)
        pending = {c.exercise for c in r.cells if c.manual and c.message.startswith(PENDING)}
        unfinished[r.lab] = unfinished.get(r.lab, 0) + bool(pending)
        for exercise, (points, max_points, _) in r.exercises().items():
            if exercise == LATE_EXERCISE:
                continue
            entry = per.setdefault(r.lab, {}).setdefault(exercise, [[], 0.0, 0])
            entry[0].append(points)
            entry[1] = max(entry[1], max_points)
            entry[2] += exercise in pending
    rows = []
    for lab in sorted(per):
        for exercise, (points, max_points, pending) in per[lab].items():
            rows.append(_row(lab, exercise, points, max_points, pending))
        rows.append(_row(lab, "(total)", totals[lab], maxima[lab], unfinished[lab]))
    return rows


def summary_text(report: GradeReport) -> str:
    """The table of `summary_rows`, aligned, one line per row."""
    head = ("lab", "exercise", "n", "max", "mean", "median", "min", "high", "full", "pending")
    lines = [head]
    for r in summary_rows(report):
        lines.append(
            (r.lab, r.exercise, str(r.count), f"{r.max_points:g}", f"{r.mean:.2f}",
             f"{r.median:g}", f"{r.low:g}", f"{r.high:g}", str(r.full), str(r.pending))
        )  # fmt: skip
    widths = [max(len(line[k]) for line in lines) for k in range(len(head))]
    text = (
        "\n".join(
            "  ".join(
                cell.ljust(w) if k < 2 else cell.rjust(w)
                for k, (cell, w) in enumerate(zip(line, widths, strict=True))
            )  # fmt: skip
            for line in lines
        )
        + "\n"
    )
    graded = {(r.student, r.lab) for r in report.results}
    refused = sorted(
        {(p.student, p.lab): p.message for p in report.problems
         if p.student and p.lab and (p.student, p.lab) not in graded}.items()
    )  # fmt: skip
    if refused:
        text += f"\nnot graded ({len(refused)}; the gradebook rows say why):\n"
        text += "".join(f"  {student}  {lab}: {why}\n" for (student, lab), why in refused)
    return text


def write_summary(report: GradeReport, out_dir: Path | str) -> list[Path]:
    """Write ``summary.txt`` and ``summary.png`` into `out_dir`; their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    text_path = out / "summary.txt"
    atomic_write(text_path, summary_text(report).encode("utf-8"))
    rows = [r for r in summary_rows(report) if r.exercise != "(total)"]
    if not rows:
        return [text_path]
    cols = min(4, len(rows))
    nrows = -(-len(rows) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.4 * nrows), squeeze=False)
    for ax, r in zip(axes.flat, rows, strict=False):
        top = max(r.max_points, max(r.points, default=0.0))
        bins = max(1, min(20, int(top * 2) or 1))
        ax.hist(r.points, bins=bins, range=(0, top or 1), color="#4a7ab0", edgecolor="white")
        ax.set_title(f"{r.lab}: {r.exercise}", fontsize=8)
        ax.set_xlabel(f"points (max {r.max_points:g})", fontsize=7)
        ax.set_ylabel("submissions", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(rows) :]:
        ax.axis("off")
    fig.suptitle(f"{len(report.results)} graded submissions", fontsize=9)
    fig.tight_layout()
    png = out / "summary.png"
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write(png, buffer.getvalue())
    return [text_path, png]
