"""Late submissions: when each was handed in, and the penalty a lab's deadline gives it.

Contract: `submission_time(path, given)` is the time a submission counts as handed in (the
instructor's ``--submitted-at`` when given, else the file's modification time), ISO 8601 in
UTC; `parse_due(text)` reads ``--due [LAB=]WHEN``; `late_penalty(points, submitted_at,
policy)` is the `LatePenalty` the policy takes off a lab's points (None when on time).

The policy, as ``grade --help`` and the book state it:
- A submission is late by the time between the deadline (``--due``, plus ``--grace``
  seconds) and its submission time; every day or part of a day late costs
  ``--late-penalty`` percent (default 10) of the points it earned in that lab, written
  answers included, up to ``--late-cap`` percent (default 100: a submission late enough
  scores 0, never less).
- The penalty is computed when the gradebook is written, from the stored submission time
  and the lab's stored policy: changing the deadline or the rate (``grade --due ... --out``
  with no submissions) re-prices every submission without regrading any.
- Deadlines without a time zone are UTC. The submission time is the file's mtime unless
  given: copy submissions with their times kept (``cp -p``, ``rsync -t``, an LMS download
  that keeps them), or pass the time the LMS recorded with ``--submitted-at``.

Design decisions:
- A penalty is a row of its own in the gradebook (exercise ``late penalty``, negative
  points, max 0) and a line in the student's feedback, so totals add up and the student
  sees why; it is never folded silently into an exercise.
- The message says how late the submission really was ("31 minutes") and, apart, how
  many days it was counted as: a day or part of one is the unit of the penalty, not of
  the lateness.
- Percent of the points earned, not of the maximum: a late submission never scores below
  0, and a late empty one loses nothing it had.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .errors import GradingError
from .gradebook_db import Policy

__all__ = [
    "DEFAULT_CAP_PCT",
    "DEFAULT_PCT_PER_DAY",
    "LATE_CELL_ID",
    "LATE_EXERCISE",
    "LatePenalty",
    "LatePolicyError",
    "late_penalty",
    "lateness",
    "parse_due",
    "parse_time",
    "submission_time",
]

DEFAULT_PCT_PER_DAY = 10.0
DEFAULT_CAP_PCT = 100.0
LATE_CELL_ID = "late-penalty"
LATE_EXERCISE = "late penalty"
DAY_S = 86400.0


class LatePolicyError(GradingError):
    """A deadline or submission time that cannot be read (the message gives the format)."""


@dataclass(frozen=True)
class LatePenalty:
    """What a late submission loses."""

    days: int  # days or parts of days late
    pct: float  # percent of the lab's earned points taken off
    points: float  # points taken off (>= 0)
    late_s: float = 0.0  # how late, in seconds, after the deadline and its grace

    def message(self, policy: Policy) -> str:
        return (
            f"submitted {lateness(self.late_s)} late (due {policy.due}); counted "
            f"{_plural(self.days, 'day')} late: -{policy.pct_per_day:g}% per day or part of "
            f"one, capped at {policy.cap_pct:g}%, so -{self.pct:g}% of the points earned"
        )


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'s' if n != 1 else ''}"


def lateness(seconds: float) -> str:
    """`seconds` late as a reader says it: "31 minutes", "5 hours 2 minutes", "2 days 3
    hours" (the two largest units; under a minute, "less than a minute")."""
    minutes = int(seconds // 60)
    if minutes < 1:
        return "less than a minute"
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [(days, "day"), (hours, "hour"), (minutes, "minute")]
    first = next(k for k, (n, _) in enumerate(parts) if n)
    shown = [p for p in parts[first : first + 2] if p[0]]
    return " ".join(_plural(n, unit) for n, unit in shown)


def parse_time(text: str, what: str = "a time") -> datetime:
    """`text` (ISO 8601, e.g. ``2026-12-05T23:59`` or ``...+01:00``) as an aware datetime;
    a time without a zone is UTC."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise LatePolicyError(
            f"{what} {text!r} is not an ISO 8601 time; write e.g. 2026-12-05T23:59 (UTC) or "
            "2026-12-05T23:59+01:00"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def parse_due(text: str) -> tuple[str | None, str]:
    """``LAB=WHEN`` -> (LAB, WHEN in UTC ISO); ``WHEN`` -> (None, ...): every lab graded."""
    lab, _, when = text.rpartition("=")
    return (lab or None), parse_time(when, "--due").astimezone(timezone.utc).isoformat()


def submission_time(path: Path | str, given: str | None = None) -> str | None:
    """When the submission at `path` counts as handed in (see the module docstring), or None
    when neither is known (the file is gone and no time was given)."""
    if given:
        return parse_time(given, "--submitted-at").astimezone(timezone.utc).isoformat()
    try:
        mtime = os.lstat(path).st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(mtime, timezone.utc).isoformat(timespec="seconds")


def late_penalty(points: float, submitted_at: str | None, policy: Policy) -> LatePenalty | None:
    """What `policy` takes off a lab that earned `points`, handed in at `submitted_at`."""
    if submitted_at is None:
        return None
    late_s = (parse_time(submitted_at) - parse_time(policy.due)).total_seconds()
    late_s -= policy.grace_s
    if late_s <= 0:
        return None
    days = math.ceil(late_s / DAY_S)
    pct = min(policy.cap_pct, policy.pct_per_day * days)
    return LatePenalty(days, pct, round(max(points, 0.0) * pct / 100.0, 4), late_s)
