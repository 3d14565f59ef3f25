"""The server's own defences against slow and hostile clients, for when no proxy stands in front.

Contract: `ClientLimits` holds the settings (``mlinfra-lab track serve --header-timeout ...``);
`protocol_class(limits)` is the HTTP protocol uvicorn runs each connection with (``http=`` of
`uvicorn.Config`), and `BodyTimeout(app, seconds)` is ASGI middleware around the app. With both
(`serving` wires them):

- a connection over `max_connections` in total, or over `max_connections_per_client` from one
  client address, is answered 503 and closed at once, before it holds a file descriptor;
- a connection that has not sent a complete request head within `header_timeout_s` (from
  accept, or from the first byte of a kept-alive connection's next request) is closed;
- a request whose body stalls for more than `body_timeout_s` between two chunks while the app
  waits for it is answered 408 (`RequestTimeout`) and its connection closed; a body still
  arriving after the reply was sent (a refused upload) gets `body_timeout_s` to finish, then
  the connection is closed;
- the app's worker threads number `worker_threads` (anyio's pool, where FastAPI runs plain
  handlers): the artifact upload awaits the client on the event loop and uses a thread only for
  disk work (`routes_artifacts`), so slow uploads cannot hold them all.

Design decisions:
- A subclass of uvicorn's `H11Protocol`, not a fork: h11 arms no timer until a first reply (its
  keep-alive timer), so the head timer and the caps hook the protocol's own callbacks
  (``connection_made``, ``data_received``, ``on_response_complete``). The pure-Python h11
  protocol is used whatever is installed (uvicorn's "auto" picks httptools when present), so the
  server behaves the same everywhere. The head timer is one deadline for the whole head, not
  per byte: a slowloris client sends a byte every few seconds.
- The body timeout is on the app's side of the protocol (`BodyTimeout` times each wait of the
  app's ``receive`` until the body's last chunk), so a body the server has stopped reading
  (flow control, a busy handler) never counts against the client, and neither does a long
  reply (Starlette's streamed responses wait in ``receive`` for the client to leave). FastAPI turns any error while reading a body into a 400, so
  once the body has timed out the middleware owns the reply: it drops what the app sends and
  answers 408 with ``Connection: close`` itself.
- Refusing over the caps happens in ``connection_made``, before h11 reads a byte: an attacker's
  connection costs a file descriptor for microseconds. The 503 written first is a courtesy; a
  client that is still sending may see a reset instead. Counting per address scans the open
  connections (at most `max_connections`), which costs less than keeping a second tally true.
- Behind a reverse proxy every connection comes from the proxy's address: set
  `max_connections_per_client` to 0 (off) there and let the proxy cap per client
  (``limit_conn``, ``book/appendix_tracking_deploy.md``). One server alone cannot out-last a
  distributed attack from many addresses: the total cap keeps it from running out of file
  descriptors, the timeouts free the slots, and the proxy (or a firewall) must do the rest.
- The defaults: a legitimate client sends its head in one packet and its body as fast as the
  network allows, so 10 s and 30 s are long for it and short for an attacker; 900 connections
  fit under the common 1,024 file-descriptor limit with room for database connections and
  artifact files; 64 per address leaves room for a user's parallel writers.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import anyio
import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr

from mlinfra_lab.tracking.errors import RequestTimeout, TrackingError
from mlinfra_lab.tracking.server import wire

__all__ = ["BodyTimeout", "ClientLimits", "GuardedH11Protocol", "protocol_class"]

log = logging.getLogger(__name__)

_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nconnection: close\r\n"
    b"content-length: 44\r\n\r\ntoo many connections; retry in a few seconds"
)


@dataclass(frozen=True)
class ClientLimits:
    """The server's limits on its clients; every field is a ``track serve`` option."""

    # A complete request head must arrive within this (--header-timeout); nginx: 60 s.
    header_timeout_s: float = 10.0
    # The longest pause between two chunks of a request body (--body-timeout); nginx: 60 s.
    body_timeout_s: float = 30.0
    # Open connections in all (--max-connections): below the process's file-descriptor limit.
    max_connections: int = 900
    # Open connections from one client address (--max-connections-per-client); 0: no cap.
    max_connections_per_client: int = 64
    # Worker threads of the app's plain handlers (--worker-threads): anyio's default.
    worker_threads: int = 40

    def __post_init__(self) -> None:
        if not (self.header_timeout_s > 0 and self.body_timeout_s > 0):
            raise TrackingError(
                "--header-timeout and --body-timeout must be positive (seconds); "
                f"got {self.header_timeout_s} and {self.body_timeout_s}"
            )
        if self.max_connections < 1 or self.worker_threads < 1:
            raise TrackingError(
                "--max-connections and --worker-threads must be at least 1; "
                f"got {self.max_connections} and {self.worker_threads}"
            )
        if self.max_connections_per_client < 0:
            raise TrackingError("--max-connections-per-client must be 0 (no cap) or more")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with connection caps, a request-head deadline and a linger bound."""

    limits: ClientLimits = ClientLimits()  # `protocol_class` makes subclasses with others

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None

    def _over_cap(self, transport: asyncio.Transport) -> str | None:
        limits, open_ = self.limits, self.server_state.connections
        if len(open_) >= limits.max_connections:
            return f"{len(open_)} connections open, the cap is {limits.max_connections}"
        per_client = limits.max_connections_per_client
        addr = get_remote_addr(transport)
        if per_client and addr is not None:
            host = addr[0]
            clients = (getattr(c, "client", None) for c in open_)  # (host, port) or None
            mine = sum(1 for client in clients if client is not None and client[0] == host)
            if mine >= per_client:
                return f"{mine} connections open from {host}, the cap is {per_client}"
        return None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        why = self._over_cap(transport)
        if why is not None:
            self._refused = True
            log.info("connection refused: %s", why)
            transport.write(_REFUSED)
            transport.close()
            return
        super().connection_made(transport)
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        for timer in (self._head_timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()
        if self._linger_timer is not None and self.conn.their_state is not h11.SEND_BODY:
            self._linger_timer.cancel()  # the unread body ended: the connection may go on
            self._linger_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            # replied before the body was read (a refusal): the rest may come, within a bound
            self._linger_timer = self.loop.call_later(self.limits.body_timeout_s, self._close)

    def _watch_head(self) -> None:
        """Arm the head deadline while a request head is due, disarm it once one has arrived."""
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_late)
        elif not waiting and self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE:  # still no complete head: nothing is in flight
            log.info("closed a connection that sent no complete request head in time")
            self._close()

    def _close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()


def protocol_class(limits: ClientLimits) -> type[GuardedH11Protocol]:
    """The protocol class for uvicorn's ``http=``, with `limits` (uvicorn builds it by keyword)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


class BodyTimeout:
    """ASGI middleware: a body that stalls over `seconds` between chunks gets 408, then close."""

    def __init__(self, app: Any, seconds: float) -> None:
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        timed_out = started = body_read = False

        async def timed_receive() -> dict:
            nonlocal timed_out, body_read
            if body_read:  # what is left to wait for is the client leaving (a streamed reply)
                return await receive()
            if timed_out:
                return {"type": "http.disconnect"}
            with anyio.move_on_after(self.seconds):
                message = await receive()
                body_read = message["type"] != "http.request" or not message.get("more_body")
                return message
            timed_out = True
            raise _stalled(self.seconds)

        async def guarded_send(message: dict) -> None:
            nonlocal started
            if timed_out:
                return  # after a timeout the reply is ours, whatever the app makes of the error
            started = True
            await send(message)

        try:
            await self.app(scope, timed_receive, guarded_send)
        except Exception:
            if not timed_out:
                raise
        if timed_out and not started:
            await _timeout_reply(send, self.seconds)


def _stalled(seconds: float) -> RequestTimeout:
    return RequestTimeout(
        f"the request body stalled for over {seconds:g} s, and the server closed the "
        "connection; send the body without pauses, or raise the server's --body-timeout"
    )


async def _timeout_reply(send: Any, seconds: float) -> None:
    status, body = wire.error_payload(_stalled(seconds))
    data = wire.dumps(body)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
