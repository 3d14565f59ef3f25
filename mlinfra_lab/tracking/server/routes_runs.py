"""Routes of runs: start, batched metrics, params, tags, end, read, search, datasets and lineage.

Contract: each route calls one `TrackingStore` method (or one `Run` write) as the token's
user and returns its result through `wire.dumps`; nothing here decides who may do what.

Design decisions:
- Metrics arrive in batches, as the client buffers them: ``points`` is a list of
  ``[step, {key: value}]``, the arguments of successive `Run.log_metrics` calls, written in
  one transaction (`Run.flush`); ``end`` carries the last batch, written with the status
  in one transaction, as `Run.end` does in process. A refused batch writes nothing and
  the client keeps it buffered.
- Each write builds a `Run` handle for the id in the path, as the token's user: the handle's
  project and name are placeholders that `Run` never trusts (it re-reads the run's project
  in each write's transaction), so a caller cannot name a project to write under.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from mlinfra_lab.tracking.run import Run
from mlinfra_lab.tracking.server.deps import caller, json_response, store_of

__all__ = ["router"]

router = APIRouter()


class _Body(BaseModel):
    # a field the API does not know (such as user) is refused
    model_config = ConfigDict(extra="forbid")


class StartRun(_Body):
    project: str
    name: str | None = None
    params: dict[str, Any] | None = None
    tags: dict[str, Any] | None = None
    code_commit: str | None = None
    inputs: list[str] = []
    start_time: float | None = None


class Points(_Body):
    points: list[tuple[int, dict[str, float]]]


class End(_Body):
    status: str = "FINISHED"
    points: list[tuple[int, dict[str, float]]] = []


class Params(_Body):
    params: dict[str, Any]


class Tags(_Body):
    tags: dict[str, Any]


class Search(_Body):
    project: str | list[str] | None
    filter: str | None = None
    order_by: str | None = None
    limit: int = 100


class Dataset(_Body):
    project: str
    name: str
    version: str
    uri: str
    sha256: str | None = None


def _run(request: Request, run_id: int, user: str, points=()) -> Run:  # noqa: ANN001
    """A handle on run `run_id` as `user`, with `points` buffered; every write re-checks WRITE."""
    run = Run(store_of(request), run_id, "?", "?", user, batch_size=1 << 62)
    for step, values in points:
        run.log_metrics(values, step)
    return run


@router.post("/runs")
def start_run(body: StartRun, request: Request, user: str = Depends(caller)) -> Response:
    run = store_of(request).start_run(
        body.project,
        body.name,
        body.params,
        body.tags,
        body.code_commit,
        body.inputs,
        user=user,
        start_time=body.start_time,
    )
    return json_response({"id": run.id, "project": run.project, "name": run.name, "user": run.user})


@router.get("/runs/{run_id}")
def get_run(run_id: int, request: Request, user: str = Depends(caller)) -> Response:
    return json_response(store_of(request).get_run(run_id, user=user))


@router.get("/runs/{run_id}/metric-history")
def metric_history(
    run_id: int, key: str, request: Request, user: str = Depends(caller)
) -> Response:
    return json_response(store_of(request).metric_history(run_id, key, user=user))


@router.post("/runs/{run_id}/metrics")
def log_metrics(
    run_id: int, body: Points, request: Request, user: str = Depends(caller)
) -> Response:
    return json_response({"written": _run(request, run_id, user, body.points).flush()})


@router.post("/runs/{run_id}/params")
def log_params(
    run_id: int, body: Params, request: Request, user: str = Depends(caller)
) -> Response:
    _run(request, run_id, user).log_params(body.params)
    return json_response({"ok": True})


@router.post("/runs/{run_id}/tags")
def set_tags(run_id: int, body: Tags, request: Request, user: str = Depends(caller)) -> Response:
    _run(request, run_id, user).set_tags(body.tags)
    return json_response({"ok": True})


@router.post("/runs/{run_id}/end")
def end(run_id: int, body: End, request: Request, user: str = Depends(caller)) -> Response:
    _run(request, run_id, user, body.points).end(body.status)
    return json_response({"written": len(body.points)})


@router.post("/runs/search")
def search_runs(body: Search, request: Request, user: str = Depends(caller)) -> Response:
    runs = store_of(request).search_runs(
        body.project, body.filter, body.order_by, body.limit, user=user
    )
    return json_response(runs)


@router.post("/runs/explain")
def explain_search(body: Search, request: Request, user: str = Depends(caller)) -> Response:
    return json_response(
        store_of(request).explain_search(body.project, body.filter, body.order_by, user=user)
    )


@router.post("/datasets")
def register_dataset(body: Dataset, request: Request, user: str = Depends(caller)) -> Response:
    ref = store_of(request).register_dataset(
        body.project, body.name, body.version, body.uri, body.sha256, user=user
    )
    return json_response(ref)


@router.get("/lineage")
def lineage(
    node: str,
    request: Request,
    direction: Literal["forward", "backward"] = "forward",
    depth: int | None = None,
    user: str = Depends(caller),
) -> Response:
    return json_response(store_of(request).lineage(node, direction, depth, user=user))
