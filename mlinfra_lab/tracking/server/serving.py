"""Running the tracking server: in the foreground (`serve`) or in a background thread (`running_server`).

Contract: `serve(app, host, port, limits)` binds ``host:port`` (port 0: a free one), prints
one line ``serving on http://HOST:PORT`` once it accepts connections, and serves until
interrupted; `running_server(app_or_store, ...)` is a context manager that serves the
same way from a daemon thread and yields the base URL, for tests, notebooks and the
benchmark, and stops the server on exit. Both defend the server against slow and hostile
clients with `limits` (`slow_clients.ClientLimits`: header and body timeouts, connection
caps, the worker-thread pool).

Design decisions:
- Uvicorn, the reference ASGI server, with its defaults but quiet (no access log: one
  line per request would cost more than a metric batch). The socket is bound here, before
  uvicorn starts, so port 0 works and the URL is known before the first request; a
  caller that starts ``mlinfra-lab track serve --port 0`` reads the URL from that line.
- The defences of `slow_clients` are always on, with defaults meant for a server that
  faces its clients directly; behind a proxy they are a second line
  (``book/appendix_tracking_deploy.md``).
- Loopback by default. The server speaks plain HTTP: bearer tokens cross the network in
  the clear, so anything beyond loopback belongs behind a TLS-terminating proxy (or use
  uvicorn's ``--ssl-*`` options directly with `create_app`); the chapter says so.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from anyio import to_thread

from mlinfra_lab.tracking.errors import TrackingError
from mlinfra_lab.tracking.server.slow_clients import BodyTimeout, ClientLimits, protocol_class

__all__ = ["bind", "running_server", "serve"]


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port), ready to hand to uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP,
    # and without it each reply on a kept-alive connection waits ~40 ms for a delayed ACK
    # (Nagle's algorithm: uvicorn writes the head and the body of a reply separately).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise TrackingError(
            f"cannot listen on {host}:{port} ({err.strerror}); pick another --port, or 0 for a free one"
        ) from None
    sock.listen(2048)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn's server, with the app's worker-thread pool sized as it starts, then `on_start()`."""

    def __init__(self, app: Any, limits: ClientLimits, on_start: Any = None) -> None:
        super().__init__(
            uvicorn.Config(
                BodyTimeout(app, limits.body_timeout_s),
                http=protocol_class(limits),
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_keep_alive=30,
            )
        )
        self.limits, self.on_start = limits, on_start

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # anyio's pool is per event loop: FastAPI runs plain handlers in it (run_in_threadpool)
        to_thread.current_default_thread_limiter().total_tokens = self.limits.worker_threads
        await super().startup(sockets)
        if self.on_start is not None:
            self.on_start()


def serve(
    app: Any, host: str = "127.0.0.1", port: int = 0, limits: ClientLimits | None = None
) -> None:
    """Serve `app` on ``host:port`` until interrupted (Ctrl-C, SIGTERM), within `limits`."""
    sock = bind(host, port)
    server = _Server(
        app,
        limits or ClientLimits(),
        on_start=lambda: print(f"serving on {_url(sock)}", flush=True),
    )
    server.run(sockets=[sock])


@contextlib.contextmanager
def running_server(
    app_or_store: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout_s: float = 30.0,
    limits: ClientLimits | None = None,
    **app_kwargs: Any,
) -> Iterator[str]:
    """Serve `app_or_store` (an ASGI app, or a `TrackingStore` given to `create_app` with
    `app_kwargs`) within `limits` from a daemon thread; yield its base URL; stop it on exit."""
    from mlinfra_lab.tracking.store import TrackingStore

    app = app_or_store
    if isinstance(app_or_store, TrackingStore):
        from mlinfra_lab.tracking.server.app import create_app

        app = create_app(app_or_store, **app_kwargs)
    sock = bind(host, port)
    server = _Server(app, limits or ClientLimits())
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="tracking-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise TrackingError(
                f"the tracking server did not start within {timeout_s:g} s; see the log above"
            )
        time.sleep(0.01)
    try:
        yield _url(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)
        sock.close()
