"""What every route of the tracking server depends on: the caller's identity, the store, JSON replies.

Contract: `caller(request)` is the user of the request's bearer token (a FastAPI
dependency; `AuthenticationError` without a valid token, `IdentityError` for a request
that names a user in its query string); `store_of(request)` is the app's `TrackingStore`;
`json_response(obj)` is a reply made by `wire.dumps`. `NO_USER` is the server's store's
default user, a name no token can have.

A refused authentication is logged at WARNING (this module's logger, under the server
package's): the client's address, the method and path, and why (no Authorization header,
not a bearer token, an unknown or revoked token), never the token itself, so that the log
of a server under a guessing attack shows the attack without becoming a list of secrets.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from mlinfra_lab.tracking.errors import AuthenticationError, IdentityError
from mlinfra_lab.tracking.server import tokens, wire
from mlinfra_lab.tracking.store import TrackingStore

__all__ = ["NO_USER", "caller", "json_response", "store_of"]

# The server's store has this default user, which no token can name (it is not printable):
# a call that forgot ``user=`` acts as nobody instead of as someone.
NO_USER = "\x00no-user"
log = logging.getLogger(__name__)  # under the server package's logger


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(wire.dumps(obj), status_code=status, media_type="application/json")


def store_of(request: Request) -> TrackingStore:
    return request.app.state.store


def caller(request: Request) -> str:
    """The user of the request's bearer token; `AuthenticationError` (401) without a valid one.

    A request that names a user in its query string is refused (`IdentityError`, 400).
    """
    scheme, _, secret = request.headers.get("authorization", "").partition(" ")
    store = store_of(request)
    with store.engine.connect() as conn:
        user = tokens.authenticate(conn, secret.strip()) if scheme.lower() == "bearer" else None
    if user is None:
        why = (
            "no Authorization header"
            if not scheme
            else "not a bearer token"
            if scheme.lower() != "bearer"
            else "an unknown or revoked token"
        )
        client = request.client.host if request.client else "?"
        log.warning(
            "authentication refused: %s from %s for %s %r",
            why,
            client,
            request.method,
            request.url.path[:200],
        )
        raise AuthenticationError()
    if "user" in request.query_params:
        raise IdentityError(request.query_params["user"], user)
    return user
