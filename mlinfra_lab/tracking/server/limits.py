"""Caps on what one request may send: the server reads no body it has not agreed to hold.

Contract: `BodyLimit(app, max_bytes)` is ASGI middleware in front of the tracking server. A
POST, PUT or PATCH to any route but an artifact upload must state its length
(``Content-Length``) and stay within `max_bytes` (`MAX_BODY_BYTES` by default); otherwise it
is answered 413 with a `RequestTooLarge` body (the wire format `TrackingClient` turns back into
that exception) before the app reads a byte of it.

Design decisions:
- The check is on the stated length, before the body is read: JSON bodies are parsed whole
  (pydantic), so a cap applied while parsing would already have paid for the bytes. The ASGI
  server (uvicorn) delivers exactly ``Content-Length`` bytes, so a smaller stated length
  cannot smuggle a larger body through; a chunked body (no stated length) is refused.
- Artifact uploads are exempt: they are streamed to a temporary file in `CHUNK` pieces and
  never held in memory, which is the design that lets them be large.
- The default fits the client's largest request with a wide margin (a metric batch of 1000
  steps of a few keys is tens of kilobytes) and bounds a hostile one to megabytes.
"""

from __future__ import annotations

import re
from typing import Any

from mlinfra_lab.tracking.errors import RequestTooLarge
from mlinfra_lab.tracking.server import wire

__all__ = ["MAX_BODY_BYTES", "BodyLimit"]

MAX_BODY_BYTES = 8 * 2**20
_STREAMED = re.compile(r"^/api/runs/\d+/artifacts$")  # the upload route: streamed to disk


class BodyLimit:
    """ASGI middleware: refuse request bodies over `max_bytes` or of unstated length."""

    def __init__(self, app: Any, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in ("POST", "PUT", "PATCH")
            or _STREAMED.match(scope["path"])
        ):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is None and headers.get(b"transfer-encoding"):
            return await _refuse(
                send,
                "the request body has no stated length (chunked); send "
                "it with a Content-Length, as TrackingClient does",
            )
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await _refuse(
                send,
                f"the request body ({length.decode(errors='replace')[:20]}"
                f" bytes) is over the server's {self.max_bytes} bytes; "
                "send metrics in smaller batches (RemoteRun.batch_size) "
                "or large data as an artifact, which is streamed",
            )
        return await self.app(scope, receive, send)


async def _refuse(send: Any, message: str) -> None:
    status, body = wire.error_payload(RequestTooLarge(message))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": wire.dumps(body)})
