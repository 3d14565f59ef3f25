"""The wire format of the tracking server: records and errors as JSON, both ways.

Contract: `dumps(obj)` turns what the store returns (its frozen records, lineage graphs,
retention plans, lists and dicts of them) into JSON bytes; `run_info`, `artifact_info`,
`dataset_ref`, `lineage_graph`, `retention_plan`, `gc_report` and `policy` turn that JSON
back into the same classes; `error_payload(err)` is the HTTP status and JSON body of a
store error and `error_from_payload(status, body)` rebuilds it on the client as the same
class, with the same message and public attributes. Neither side imports the other: this
module needs neither FastAPI nor httpx.

Design decisions:
- The status follows the error's class: 401 `AuthenticationError`, 404 `NotFoundOrDenied`
  and `NotFound`, 403 `PermissionDenied`, 413 `RequestTooLarge`, 408 `RequestTimeout`,
  422 `InvalidInput` (a value no backend can store), 400 `QueryError`, `ArtifactNameError`,
  `IdentityError` and any other `TrackingError`, 500 `IntegrityError`, 503
  `DatabaseError`. An id the caller may not see is a 404 with the same body whether it
  exists or not (the store's one answer, unchanged on the wire).
- Replies are strict JSON: the store refuses non-finite metrics when they are logged, and a
  non-finite number that a database holds from before (or that a float param became) is
  sent as null, never as the ``Infinity`` or ``NaN`` that JSON parsers reject.
- Only public attributes cross the wire: `NotFoundOrDenied` keeps the project of an
  existing id in a private attribute for the audit log, and it stays on the server.
- Params and tags keep ``str(value)`` in the store, whatever the value's type. JSON carries
  only some types as themselves (a tuple would arrive as a list and be kept as
  ``"[1, 2]"``; bytes, a set, a date, ``inf`` would not be sent at all), so the client
  sends every other value as that text already (`key_values`): the server keeps exactly
  what the store would. (Only the numeric copy of a number type whose text does not parse
  as one, a ``Fraction``, is lost; the text is the same.)
- A rebuilt error is made without calling its ``__init__`` (the message is the server's,
  attributes are set from the body), so every class round-trips through one function;
  an unknown class name becomes a plain `TrackingError` with the server's message.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from mlinfra_lab.tracking import errors
from mlinfra_lab.tracking.errors import TrackingError
from mlinfra_lab.tracking.lineage import LineageGraph
from mlinfra_lab.tracking.records import ArtifactInfo, DatasetRef, GcReport, RunInfo
from mlinfra_lab.tracking.retention import (
    PlannedAction,
    RetentionPlan,
    RetentionPolicy,
    RetentionRule,
)

__all__ = [
    "artifact_info",
    "dataset_ref",
    "dumps",
    "error_from_payload",
    "error_payload",
    "gc_report",
    "key_values",
    "lineage_graph",
    "policy",
    "retention_plan",
    "run_info",
    "status_of",
]

_STATUS: tuple[tuple[type[TrackingError], int], ...] = (  # first match wins: subclasses first
    (errors.AuthenticationError, 401),
    (errors.RequestTooLarge, 413),
    (errors.RequestTimeout, 408),
    (errors.InvalidInput, 422),
    (errors.NotFoundOrDenied, 404),
    (errors.PermissionDenied, 403),
    (errors.NotFound, 404),
    (errors.IntegrityError, 500),
    (errors.DatabaseError, 503),
    (TrackingError, 400),
)


def _plain(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def key_values(values: dict[Any, Any] | None) -> dict[str, Any] | None:
    """Params or tags as the client sends them: keys as text, and each value that JSON does
    not carry as itself (anything but text, a bool, an int, a finite float or None) as the
    ``str`` the store keeps for it (see the module doc)."""
    if values is None:
        return None
    return {
        str(k): v
        if v is None
        or isinstance(v, str | bool | int)
        or (isinstance(v, float) and math.isfinite(v))
        else str(v)
        for k, v in values.items()
    }


def dumps(obj: Any) -> bytes:
    """JSON bytes of records, graphs, plans and containers of them."""
    return json.dumps(_plain(obj), separators=(",", ":"), allow_nan=False).encode()


# -- records back from JSON ---------------------------------------------------------------
def run_info(d: dict) -> RunInfo:
    return RunInfo(**d)


def artifact_info(d: dict) -> ArtifactInfo:
    return ArtifactInfo(**d)


def dataset_ref(d: dict) -> DatasetRef:
    return DatasetRef(**d)


def gc_report(d: dict) -> GcReport:
    return GcReport(**{**d, "deleted": tuple(d["deleted"])})


def lineage_graph(d: dict) -> LineageGraph:
    return LineageGraph(
        d["root"],
        d["direction"],
        dict(d["nodes"]),
        [tuple(e) for e in d["edges"]],
        dict(d["deleted"]),
    )


def policy(d: dict) -> RetentionPolicy:
    return RetentionPolicy(tuple(RetentionRule(**r) for r in d["rules"]), d.get("cold_root"))


def retention_plan(d: dict) -> RetentionPlan:
    return RetentionPlan(
        tuple(PlannedAction(**a) for a in d["actions"]),
        d["kept"],
        d["now"],
        policy(d["policy"]),
        d["applied"],
        tuple(d["notes"]),
    )


# -- errors -------------------------------------------------------------------------------
def status_of(err: TrackingError) -> int:
    return next(code for cls, code in _STATUS if isinstance(err, cls))


def error_payload(err: TrackingError) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of a store error: its class name, message and public attributes."""
    attrs = {
        k: v
        for k, v in vars(err).items()
        if not k.startswith("_") and isinstance(v, str | int | float | bool | type(None))
    }
    return status_of(err), {"error": type(err).__name__, "message": str(err), "attrs": attrs}


def error_from_payload(status: int, body: Any) -> TrackingError:
    """The error a server's reply describes, as the class the store would have raised."""
    if not isinstance(body, dict) or "message" not in body:
        return TrackingError(
            f"the tracking server answered HTTP {status} without an error body: {str(body)[:200]!r}; "
            "check the URL (is it an mlinfra-lab tracking server?) and the server's log"
        )
    cls = getattr(errors, str(body.get("error")), None)
    if not (
        isinstance(cls, type) and issubclass(cls, TrackingError) and cls.__name__ in errors.__all__
    ):
        cls = TrackingError
    err = cls.__new__(cls)
    Exception.__init__(err, body["message"])
    for k, v in (body.get("attrs") or {}).items():
        if not str(k).startswith("_"):
            setattr(err, k, v)
    return err
