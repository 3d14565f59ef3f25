"""Routes of access control: projects, grants, teams, store ADMINs, levels and the audit log.

Contract: each route calls the `TrackingStore` method of the same name as the token's
user; the store decides (ADMIN of the project to grant, store ADMIN for teams and store
ADMINs), so ``grant secret mallory ADMIN`` sent with mallory's token is refused exactly as
it is in process for ``user="mallory"``, whatever user the request claims to be.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from mlinfra_lab.tracking.server.deps import caller, json_response, store_of

__all__ = ["router"]

router = APIRouter()


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Project(_Body):
    name: str


class Grant(_Body):
    project: str
    principal: str
    level: str
    kind: Literal["user", "team"] | None = None


class Member(_Body):
    team: str
    member: str


class StoreAdmin(_Body):
    principal: str
    admin: bool = True


@router.post("/projects")
def create_project(body: Project, request: Request, user: str = Depends(caller)) -> Response:
    return json_response({"id": store_of(request).create_project(body.name, user=user)})


@router.post("/grants")
def grant(body: Grant, request: Request, user: str = Depends(caller)) -> Response:
    store_of(request).grant(body.project, body.principal, body.level, user=user, kind=body.kind)
    return json_response({"ok": True})


@router.post("/teams")
def add_to_team(body: Member, request: Request, user: str = Depends(caller)) -> Response:
    store_of(request).add_to_team(body.team, body.member, user=user)
    return json_response({"ok": True})


@router.post("/store-admins")
def set_store_admin(body: StoreAdmin, request: Request, user: str = Depends(caller)) -> Response:
    store_of(request).set_store_admin(body.principal, body.admin, user=user)
    return json_response({"ok": True})


@router.get("/level")
def level(
    project: str, request: Request, principal: str | None = None, user: str = Depends(caller)
) -> Response:
    return json_response(
        {"level": store_of(request).level(project, user=user, principal=principal).name}
    )


@router.get("/audit")
def audit_log(
    request: Request, project: str | None = None, limit: int = 100, user: str = Depends(caller)
) -> Response:
    return json_response(store_of(request).audit_log(project, limit, user=user))
