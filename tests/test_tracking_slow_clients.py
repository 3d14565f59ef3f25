"""Slow and hostile clients cannot take the tracking server down when it faces them alone.

The attacks (issue 43's red team, at small scale: each defence is set small and short through
`ClientLimits`, the others long, so each test shows one defence at work): slow uploads that
held every worker thread until ``/api/health`` stopped answering; request heads that never
end, which pinned file descriptors forever; a body that stalls, and one trickled after the
reply, never timed out; connections from one address without a cap. Every one of these
tests failed against the server before `slow_clients` (CHANGELOG.md says how it was run).
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path

import pytest
from _slow_attacks import (
    LIVENESS_S,
    answered,
    closed_within,
    connect,
    head,
    is_closed,
    partial_heads,
    reply,
    start_upload,
)

from mlinfra_lab.cli import main
from mlinfra_lab.tracking.server import ClientLimits, TrackingClient, create_token, running_server
from mlinfra_lab.tracking.testing import fresh_store

pytestmark = pytest.mark.tracking

LONG = 600.0  # a timeout no test reaches: the defence under test is the only one at work


def _limits(**short: float) -> ClientLimits:
    base = {
        "header_timeout_s": LONG,
        "body_timeout_s": LONG,
        "max_connections": 900,
        "max_connections_per_client": 0,
        "worker_threads": 40,
    }
    return ClientLimits(**(base | short))


@pytest.fixture
def served(tmp_path):
    """Start a server with given limits; alice's run and bob's token in a store."""

    def start(limits: ClientLimits):
        store = stack.enter_context(fresh_store("sqlite", tmp_path, default_user="alice"))
        alice = create_token(store.engine, "alice", by="alice").secret
        bob = create_token(store.engine, "bob", by="alice").secret
        run = store.start_run("alice-project", name="r")
        url = stack.enter_context(running_server(store, limits=limits))
        return url, alice, bob, run.id

    with contextlib.ExitStack() as stack:
        yield start


def test_slow_uploads_leave_the_server_answering(served):
    threads = 4
    url, alice, bob, run_id = served(_limits(worker_threads=threads))
    size = 100_000
    # as many uploads as threads, each stalled once its handler waits on it, then 4 more
    uploads = [start_upload(url, alice, run_id, size, b"x" * 1000) for _ in range(threads)]
    uploads += [
        start_upload(url, alice, run_id, size, b"x" * 1000, wait_read=False) for _ in range(4)
    ]
    assert answered(url) == 200, "/api/health"
    assert answered(url, "/api/whoami", bob) == 200, "another user's request"
    # the stalled uploads still work when their clients go on
    first = uploads.pop(0)  # its 100 Continue was read
    first.sendall(b"x" * (size - 1000))
    status_line = reply(first).split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 200 OK", status_line
    with TrackingClient(url, alice) as client:
        [info] = client.list_artifacts(run_id)
        assert info.size == size
    for sock in uploads:
        sock.close()


@pytest.mark.parametrize("route", ["upload", "metrics"])
def test_a_stalled_body_gets_408_and_the_connection_closed(served, route):
    url, alice, _, run_id = served(_limits(body_timeout_s=0.5))
    path = (
        f"/api/runs/{run_id}/artifacts?name=stalled.bin"
        if route == "upload"
        else f"/api/runs/{run_id}/metrics"
    )
    sock = connect(url)
    sock.sendall(
        head(
            "POST",
            path,
            {
                "Authorization": f"Bearer {alice}",
                "Content-Type": "application/json",
                "Content-Length": "1000",
            },
        )
        + b'{"metrics": ['
    )
    got = reply(sock)  # until the server closes the connection
    status, _, body = got.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 408"), got[:300]
    assert b"connection: close" in status.lower()
    assert json.loads(body)["error"] == "RequestTimeout"
    assert answered(url) == 200


def _send_buffer_max() -> int:
    """The most a TCP send buffer holds here (Linux's tcp_wmem maximum; 4 MiB by default)."""
    try:
        return max(int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2]), 4 << 20)
    except (OSError, IndexError, ValueError):
        return 4 << 20


def test_a_download_outlasting_the_body_timeout_is_not_cut(served):
    """The body timeout is for a request body still due, never for a long reply."""
    url, alice, _, run_id = served(_limits(body_timeout_s=0.3))
    size = 2 * _send_buffer_max()  # more than the server's socket can hold: the reply waits
    with TrackingClient(url, alice) as client:
        artifact = client.start_run("alice-project", name="big").log_artifact(
            b"z" * size, "big.bin"
        )
    sock = connect(url)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    sock.sendall(
        head(
            "GET",
            f"/api/artifacts/{artifact.id}/content",
            {"Authorization": f"Bearer {alice}", "Connection": "close"},
        )
    )
    time.sleep(1.0)  # a reader that pauses longer than the body timeout
    got = reply(sock)
    assert got.startswith(b"HTTP/1.1 200") and len(got.partition(b"\r\n\r\n")[2]) == size, (
        f"the download was cut after {len(got)} bytes"
    )


def test_a_body_trickled_after_a_refusal_is_cut_off(served):
    url, alice, bob, run_id = served(_limits(body_timeout_s=0.5))
    sock = connect(url)
    sock.sendall(  # bob may not write alice's run: refused before a byte of the body is read
        head(
            "POST",
            f"/api/runs/{run_id}/artifacts?name=x.bin",
            {"Authorization": f"Bearer {bob}", "Content-Length": str(10**9)},
        )
    )
    closed = False
    for _ in range(int(LIVENESS_S / 0.05)):  # one byte every 50 ms, as long as it is allowed
        try:
            sock.sendall(b"x")
        except OSError:
            closed = True
            break
        if is_closed(sock, wait_s=0.05):
            closed = True
            break
    assert closed, (
        f"a body trickled for {LIVENESS_S:g} s after the reply still holds its connection"
    )


def test_request_heads_that_never_end_are_closed(served):
    url, *_ = served(_limits(header_timeout_s=1.0))
    kept_alive = connect(url, "127.0.0.2")  # one full request, then a head that never ends
    kept_alive.sendall(head("GET", "/api/health"))
    assert kept_alive.recv(4096).startswith(b"HTTP/1.1 200")
    socks = partial_heads(url, 20, "127.0.0.2")
    socks.append(connect(url, "127.0.0.2"))  # sends nothing at all
    kept_alive.sendall(b"GET /api/health HTTP/1.1\r\nHost: tracking\r\n")
    socks.append(kept_alive)
    assert closed_within(socks, want=len(socks)) == len(socks), "a request head never timed out"
    assert answered(url) == 200


def test_connections_over_the_caps_are_refused_at_once(served):
    per_client, total = 8, 12
    url, _, bob, _ = served(_limits(max_connections=total, max_connections_per_client=per_client))
    attacker = partial_heads(url, 20, "127.0.0.2")
    assert closed_within(attacker, want=20 - per_client) == 20 - per_client, (
        "connections over the per-address cap were kept"
    )
    assert sum(not is_closed(s) for s in attacker) == per_client
    assert answered(url) == 200 and answered(url, "/api/whoami", bob) == 200, (
        "another address is still served"
    )
    more = partial_heads(url, 8, "127.0.0.3")  # another address, under its own cap: the total
    assert closed_within(more, want=8 - (total - per_client)) >= 8 - (total - per_client)
    assert sum(not is_closed(s) for s in attacker + more) <= total


def test_serve_options_set_the_limits(monkeypatch):
    from mlinfra_lab.tracking.server import app, serving

    seen = {}
    monkeypatch.setattr(app, "create_app", lambda *a, **kw: object())  # no database is opened
    monkeypatch.setattr(serving, "serve", lambda app, host, port, limits: seen.update(l=limits))
    args = ["track", "serve", "--db", "sqlite:///t.db", "--artifacts", "a", "--port", "0"]
    assert main(args) == 0
    assert seen["l"] == ClientLimits(), "no option: the defaults"
    assert (
        main(
            [
                *args,
                "--header-timeout",
                "2",
                "--body-timeout",
                "3",
                "--max-connections",
                "50",
                "--max-connections-per-client",
                "0",
                "--worker-threads",
                "8",
            ]
        )
        == 0
    )
    assert seen["l"] == ClientLimits(2.0, 3.0, 50, 0, 8)
    assert main([*args, "--body-timeout", "0"]) != 0, "a zero timeout is refused"
