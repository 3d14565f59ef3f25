"""Routes of maintenance: retention (plan or apply), garbage collection and row counts.

Contract: each route calls the `TrackingStore` method of the same name as the token's
user; retention plans over the projects that user ADMINs, gc and counts need store ADMIN.

Design decision: storage locations are the server's, not the caller's. A policy's
`cold_root` and gc's extra roots name places the *server* writes to and deletes from,
with the server's rights; through the server they may only be the cold root it was
started with (`create_app(cold_root=...)`, ``--cold-root``), else the request is refused.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from mlinfra_lab.tracking.errors import TrackingError
from mlinfra_lab.tracking.server import wire
from mlinfra_lab.tracking.server.deps import caller, json_response, store_of

__all__ = ["router"]

router = APIRouter()


class Retention(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: dict[str, Any]
    now: float | None = None
    dry_run: bool = True


class Gc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grace_seconds: float = 3600.0
    dry_run: bool = False
    extra_roots: list[str] = []
    stale_upload_seconds: float = 3600.0


def _own_root(request: Request, root: str | None, what: str) -> None:
    allowed = request.app.state.cold_root
    if root is not None and root != allowed:
        raise TrackingError(
            f"{what} {root!r} is not this server's cold root ({allowed!r}); through the "
            "server, storage locations are the server's: start it with --cold-root"
        )


@router.post("/retention")
def apply_retention(body: Retention, request: Request, user: str = Depends(caller)) -> Response:
    try:
        policy = wire.policy(body.policy)
    except (KeyError, TypeError, ValueError) as err:
        raise TrackingError(
            f"not a valid retention policy ({err}); send RetentionPolicy's fields"
        ) from None
    _own_root(request, policy.cold_root, "the policy's cold_root")
    plan = store_of(request).apply_retention(policy, body.now, body.dry_run, user=user)
    return json_response(plan)


@router.post("/gc")
def gc(body: Gc, request: Request, user: str = Depends(caller)) -> Response:
    for root in body.extra_roots:
        _own_root(request, root, "the extra root")
    report = store_of(request).gc(
        body.grace_seconds,
        body.dry_run,
        body.extra_roots,
        user=user,
        stale_upload_seconds=body.stale_upload_seconds,
    )
    return json_response(report)


@router.get("/count/{table}")
def count(table: str, request: Request, user: str = Depends(caller)) -> Response:
    return json_response({"count": store_of(request).count(table, user=user)})
