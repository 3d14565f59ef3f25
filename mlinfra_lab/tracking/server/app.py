"""The tracking server's ASGI app: every request acts as the user of its bearer token, and only as them.

Contract: `create_app(store)` (a `TrackingStore`, or a database URL and an artifact root)
returns a FastAPI app that serves the store's API under ``/api``: runs, metrics (batched),
params, tags, artifacts (streamed both ways), search, lineage, grants, teams, retention,
gc and the audit log. Each request must carry ``Authorization: Bearer <token>``; the
server looks the token up (`deps.caller`: `tokens.authenticate`) and calls the store with
``user=<the token's user>``. Store errors go back as JSON (`wire.error_payload`) that
`TrackingClient` turns into the same exception classes.

Design decisions:
- The trust boundary is the token. Nothing a caller sends names who they are: request
  bodies are pydantic models that forbid unknown fields, so ``{"user": "alice"}`` is a 400
  `IdentityError`, and so is a ``?user=`` query parameter; headers other than
  ``Authorization`` are never read. Absent, malformed, unknown and revoked tokens get the
  same 401 (`AuthenticationError`), and every request looks its token up again, so a
  revocation takes effect on the next request.
- The store's own checks do the rest, unchanged: the server adds no permission logic of
  its own, so the in-process and the served paths cannot disagree. A run's writes build a
  fresh `Run` handle per request as the token's user; `Run` re-reads the run's project and
  re-checks WRITE in each write's transaction, which is what makes a revoked grant stop an
  open run and refuses writes into another project's run.
- Handlers are plain functions (FastAPI runs them in its thread pool, the store is
  synchronous and thread-safe: one engine, a connection per call); the artifact upload is
  the one async handler, so that waiting on a slow client's bytes never holds a thread
  (`routes_artifacts`). Replies are JSON bytes made by `wire.dumps`, not FastAPI's
  generic encoder, which costs more than the query for a page of 100 runs.
- A request body is capped before it is read (`limits.BodyLimit`: a stated length of at most
  `MAX_BODY_BYTES`; artifact uploads, streamed to disk, are exempt).
- What a caller could use to reach outside the store is closed (`routes_maintenance`): a policy's
  `cold_root` and `gc`'s extra roots must be the server's own cold root (`cold_root`),
  since the server's file-system rights are not the caller's.

Direct database access (`TrackingStore`, the ``mlinfra-lab track`` commands without
``--server``) trusts its caller's ``user=``: it is for notebooks and admins, who can read
the database file anyway. Every user-facing path goes through this server.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from mlinfra_lab.tracking.errors import IdentityError, TrackingError
from mlinfra_lab.tracking.server import (
    routes_access,
    routes_artifacts,
    routes_maintenance,
    routes_runs,
    wire,
)
from mlinfra_lab.tracking.server.deps import NO_USER, caller, json_response
from mlinfra_lab.tracking.server.limits import MAX_BODY_BYTES, BodyLimit
from mlinfra_lab.tracking.store import TrackingStore

__all__ = ["create_app"]


def _error(_request: Request, err: Exception) -> Response:
    assert isinstance(err, TrackingError), "registered for TrackingError only (create_app)"
    status, body = wire.error_payload(err)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return Response(
        wire.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


def _invalid(request: Request, err: Exception) -> Response:
    """A body that does not fit its model: a named user is an `IdentityError`, the rest a `TrackingError`."""
    assert isinstance(err, RequestValidationError), "registered for RequestValidationError only"
    for e in err.errors():
        if e.get("type") == "extra_forbidden" and e.get("loc", ())[-1:] == ("user",):
            return _error(request, IdentityError(str(e.get("input")), None))
    where = "; ".join(
        f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in err.errors()[:5]
    )
    return _error(
        request,
        TrackingError(
            f"the request does not fit the API ({where}); "
            "use TrackingClient, or see /docs for the fields"
        ),
    )


def create_app(
    store: TrackingStore | str,
    artifact_root: str | None = None,
    cold_root: str | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    **store_kwargs: Any,
) -> FastAPI:
    """The server's app over `store` (or over a store opened on database URL `store` and
    `artifact_root`, with `store_kwargs` such as ``cache_dir``). `cold_root` is the only
    cold tier a retention policy or `gc` sent through the server may name; a request body
    (artifact uploads aside) may hold at most `max_body_bytes` (`limits.BodyLimit`)."""
    if isinstance(store, str):
        if artifact_root is None:
            raise TrackingError("create_app(db_url, ...) needs artifact_root as well")
        store = TrackingStore(store, artifact_root, default_user=NO_USER, **store_kwargs)
    app = FastAPI(
        title="mlinfra-lab tracking server",
        version="1",
        description="The tracking store's API; every request acts as its bearer token's user.",
    )
    app.state.store, app.state.cold_root = store, cold_root
    app.add_exception_handler(TrackingError, _error)
    app.add_exception_handler(RequestValidationError, _invalid)

    @app.get("/api/health")
    def health() -> Response:  # no token: for load balancers and the test harness
        return json_response({"ok": True})

    @app.get("/api/whoami")
    def whoami(user: str = Depends(caller)) -> Response:
        return json_response({"user": user})

    for module in (routes_runs, routes_artifacts, routes_access, routes_maintenance):
        app.include_router(module.router, prefix="/api", dependencies=[Depends(caller)])
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return app
