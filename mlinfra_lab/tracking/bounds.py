"""Bounds on the values the store writes and looks up: one rule for SQLite and PostgreSQL.

Contract: `text(field, value, max_chars)`, `ident(kind, value)`, `step(value)` and
`finite(field, value)` return the value when every backend can store it, and otherwise
raise `InvalidInput`, whose message names the field, the bound and what to send instead;
`column_chars(table, column)` is a column's length as `schema` declares it; `data_error`
turns the errors a driver raises for such a value (when one slips past the checks) into
`InvalidInput` too, and gives None for any other error.

Design decisions:
- The store checks before SQL runs, so both backends give the same answer: SQLite stores
  a 300-character name in a ``VARCHAR(200)`` that PostgreSQL refuses, and accepts a 64-bit
  id that PostgreSQL's ``INTEGER`` does not hold. The smaller bound is the rule.
- Text must be valid Unicode. A JSON body may spell a lone surrogate (``"\\ud800"``), which
  Python decodes into a `str` that no UTF-8 encoder accepts; NUL is refused as well, since
  PostgreSQL's text cannot hold it.
- Ids and steps are 32-bit signed integers, as PostgreSQL's ``INTEGER`` columns (and their
  sequences) are: an id above `MAX_ID` cannot exist, so looking one up is a client error,
  never a database failure that invites a retry.
- Metric values must be finite: JSON has no Infinity or NaN, and a stored one would make
  every later reply that carries it invalid JSON (`wire.dumps` also sends any non-finite
  number already in a database as null).
- `data_error` is the net under the checks: a driver's UnicodeEncodeError, SQLite's
  OverflowError on a too large integer and PostgreSQL's data exceptions (SQLSTATE class
  22) are all properties of the values sent, so they are client errors, not retries.
"""

from __future__ import annotations

import math
import operator
from typing import Any, overload

import sqlalchemy as sa

from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.errors import InvalidInput

__all__ = [
    "MAX_ID",
    "MAX_STEP",
    "MIN_STEP",
    "column_chars",
    "data_error",
    "finite",
    "metric_value",
    "ident",
    "step",
    "text",
]

MAX_ID = 2**31 - 1  # PostgreSQL INTEGER (SERIAL) ids; SQLite's are 64-bit
MIN_STEP, MAX_STEP = -(2**31), 2**31 - 1  # the INTEGER step columns

_SQLSTATE_22 = {  # PostgreSQL data exceptions a value can cause
    "22001": "a text value is longer than its column allows",
    "22003": "a number is out of the range its column holds (ids and steps: 32-bit integers)",
    "22021": "a text value holds a byte sequence that is not valid UTF-8",
    "22P05": "a text value holds a character the database cannot store",
}


def column_chars(table: str, column: str) -> int:
    """The length `schema` declares for ``table.column`` (a String column)."""
    kind = S.metadata.tables[table].c[column].type
    if not isinstance(kind, sa.String) or kind.length is None:
        raise TypeError(f"{table}.{column} is not a String column with a declared length")
    return int(kind.length)


def _shown(value: str) -> str:
    return repr(value[:40] + ("..." if len(value) > 40 else ""))


def text(field: str, value: Any, max_chars: int | None = None, allow_empty: bool = False) -> str:
    """`value` if it is a `str` every backend can store in at most `max_chars` characters."""
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text, got {type(value).__name__}")
    if not value and not allow_empty:
        raise InvalidInput(f"{field} must not be empty")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInput(
            f"{field} is {len(value)} characters long, more than the {max_chars} allowed: "
            f"shorten {_shown(value)}"
        )
    if "\x00" in value:
        raise InvalidInput(f"{field} holds a NUL character, which the database cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidInput(
            f"{field} is not valid Unicode: it holds a lone surrogate "
            f"(U+{ord(value[err.start]):04X} at character {err.start}); send UTF-8 text"
        ) from None
    return value


def ident(kind: str, value: Any) -> int:
    """`value` if it is an integer id that can exist: 1 to `MAX_ID`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"a {kind} id must be an integer, got {type(value).__name__}")
    if not 1 <= value <= MAX_ID:
        raise InvalidInput(
            f"{kind} id {value} is out of range: ids are integers from 1 to {MAX_ID}"
        )
    return value


def step(value: Any) -> int:
    """`value` as an int if it is an integer step (a NumPy integer, an integral float) in the
    32-bit range both backends store."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        v = operator.index(value)
    except TypeError:
        raise InvalidInput(f"a step must be an integer, got {value!r}") from None
    if isinstance(value, bool) or not MIN_STEP <= v <= MAX_STEP:
        raise InvalidInput(
            f"step {value!r} is out of range: steps are integers from {MIN_STEP} to {MAX_STEP}"
        )
    return v


def finite(field: str, value: Any) -> float:
    """`value` as a float if it is a finite number (JSON has no Infinity or NaN)."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"{field} must be a number, got {type(value).__name__}") from None
    if not math.isfinite(v):
        raise InvalidInput(
            f"{field} is {'NaN' if math.isnan(v) else v}, not a finite number; log a number, and record divergence "
            "as a tag (e.g. diverged=step)"
        )
    return v


def metric_value(key: str, value: Any, step: int) -> float:
    """`finite` for metric `key` at `step`, whose message is only built for a refusal (the
    ingest path calls this once per point)."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        v = None
    if v is None or not math.isfinite(v):
        return finite(f"metric {key!r} at step {step}", value)  # raises, with the message
    return v


@overload
def data_error(err: UnicodeEncodeError | OverflowError, sqlstate: None = None) -> InvalidInput: ...
@overload
def data_error(err: BaseException | None, sqlstate: str | None = None) -> InvalidInput | None: ...
def data_error(err: BaseException | None, sqlstate: str | None = None) -> InvalidInput | None:
    """The `InvalidInput` a driver error caused by a value stands for; None for other errors.

    `err` may be None: SQLAlchemy's `DBAPIError.orig` is typed optional, and then only
    `sqlstate` can tell."""
    if isinstance(err, UnicodeEncodeError):
        return InvalidInput(
            "a text value is not valid Unicode (it holds a lone surrogate); send UTF-8 text"
        )
    if isinstance(err, OverflowError):
        return InvalidInput(
            f"a number is too large to store: ids and steps are integers up to {MAX_ID}"
        )
    if sqlstate is not None and sqlstate.startswith("22"):
        why = _SQLSTATE_22.get(sqlstate, "a value cannot be stored in its column")
        return InvalidInput(f"{why} (SQLSTATE {sqlstate}); change the value, a retry fails again")
    return None
