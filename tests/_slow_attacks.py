"""Shared by the slow-client suites (the server alone, and behind nginx): raw-socket attackers.

Each attacker is a plain TCP socket that speaks just enough HTTP/1.1 to hold a server's
resources: a request head sent in part, a body that stalls, a body trickled after the reply.
Sources other than 127.0.0.1 are other loopback addresses (Linux routes all of 127.0.0.0/8
to ``lo``), so one test plays several clients. Every wait has a deadline of `LIVENESS_S`:
the tests check that something happens, never how fast.
"""

from __future__ import annotations

import select
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

LIVENESS_S = 30.0  # generous: a check that the server answers, not a speed assertion


def connect(url: str, source: str = "127.0.0.1") -> socket.socket:
    """A TCP connection to `url`'s host and port from loopback address `source`."""
    parts = urlsplit(url)
    try:
        sock = socket.create_connection(
            (parts.hostname, parts.port), timeout=LIVENESS_S, source_address=(source, 0)
        )
    except OSError as err:  # pragma: no cover (a system without 127.0.0.0/8 on lo)
        pytest.skip(f"cannot connect from {source} ({err}): needs Linux's loopback /8")
    return sock


def head(method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
    fields = [f"{k}: {v}" for k, v in (headers or {}).items()]
    lines = [f"{method} {path} HTTP/1.1", "Host: tracking", *fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def partial_heads(url: str, n: int, source: str) -> list[socket.socket]:
    """`n` connections from `source`, each with a request head that never ends (slowloris)."""
    socks = [connect(url, source) for _ in range(n)]
    for sock in socks:
        try:
            sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: tracking\r\nX-Slow: 1")
        except OSError:
            pass  # refused at once: what a capped server does
    return socks


def _readable(socks: list[socket.socket], wait_s: float) -> bool:
    """Whether any of `socks` has data or an EOF within `wait_s` (poll: no 1,024-fd ceiling)."""
    poller = select.poll()
    for sock in socks:
        poller.register(sock, select.POLLIN)
    return bool(poller.poll(wait_s * 1000))


def is_closed(sock: socket.socket, wait_s: float = 0.0) -> bool:
    """Whether the server has closed `sock` (EOF or reset), reading away any reply it sent."""
    while True:
        if not _readable([sock], wait_s):
            return False
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True


def closed_within(socks: list[socket.socket], want: int, seconds: float = LIVENESS_S) -> int:
    """How many of `socks` the server closed, waiting until `want` of them are or `seconds` pass."""
    deadline, closed = time.monotonic() + seconds, set()
    while len(closed) < want and time.monotonic() < deadline:
        for sock in socks:
            if sock not in closed and is_closed(sock):
                closed.add(sock)
        if len(closed) < want:
            _readable([s for s in socks if s not in closed], 0.1)
    return len(closed)


def reply(sock: socket.socket, seconds: float = LIVENESS_S) -> bytes:
    """What the server sends on `sock` until it closes it, or `seconds` pass ("" if nothing)."""
    deadline, out = time.monotonic() + seconds, b""
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            break
        if not data:
            break
        out += data
    return out


def start_upload(
    url: str,
    token: str,
    run_id: int,
    size: int,
    sent: bytes,
    source: str = "127.0.0.1",
    wait_read: bool = True,
) -> socket.socket:
    """An artifact upload of `size` bytes that sends `sent` and stalls.

    With `wait_read`, once the handler reads it: ``Expect: 100-continue`` makes the server say
    when the handler first asks for the body, so the attack is in place (the handler is
    waiting on this client) when this returns.
    """
    sock = connect(url, source)
    path = urlsplit(url).path.rstrip("/") + f"/api/runs/{run_id}/artifacts?name=slow.bin"
    sock.sendall(
        head(
            "POST",
            path,
            {
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/octet-stream",
                "Content-Length": str(size),
                "Expect": "100-continue",
                "Connection": "close",  # so that `reply` ends with the reply
            },
        )
    )
    if wait_read:
        sock.settimeout(LIVENESS_S)
        got = sock.recv(4096)
        assert got.startswith(b"HTTP/1.1 100"), f"the upload was not read: {got[:200]!r}"
    sock.sendall(sent)
    return sock


def answered(url: str, path: str = "/api/health", token: str | None = None) -> int:
    """The status of a GET from an honest client on a fresh connection (fails after LIVENESS_S)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(timeout=LIVENESS_S) as client:
        return client.get(url.rstrip("/") + path, headers=headers).status_code
