"""The slow-client attacks through a real nginx in front of the server, as `deploy/nginx/tracking.conf` has it.

The recipe is run as committed, on loopback: plain HTTP on a free port instead of TLS on 443,
the server (`python -m mlinfra_lab.tracking.server`, the recipe's flags) on a free port, the
HTTP redirect left out, and the timeouts and the per-client cap set small so that each attack
takes a second or two. nginx runs as this test's child (``daemon off``, one process, its
files in the test's temporary folder), so no root is needed. Skipped without nginx
(``apt-get install nginx``; ``$MLINFRA_NGINX`` names another binary).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _slow_attacks import (
    LIVENESS_S,
    answered,
    closed_within,
    connect,
    head,
    partial_heads,
    reply,
)

from mlinfra_lab.tracking.server import TrackingClient, create_token
from mlinfra_lab.tracking.store import TrackingStore

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "deploy" / "nginx" / "tracking.conf"
NGINX = (
    os.environ.get("MLINFRA_NGINX")
    or shutil.which("nginx")
    or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
)
pytestmark = [
    pytest.mark.tracking,
    pytest.mark.skipif(
        NGINX is None,
        reason="nginx is not installed (apt-get install nginx): the attacks behind a proxy "
        "are skipped; the server alone is tested in test_tracking_slow_clients.py",
    ),
]

PER_CLIENT = 8  # limit_conn tracking_per_client, for the test
BODY_TIMEOUT = "2s"  # client_body_timeout: above the trickle's pause, below LIVENESS_S
TRICKLE_S = 0.2
SERVER_THREADS = 4  # fewer than PER_CLIENT slow uploads
UPLOAD = 300_000  # bytes: more than the server's SPOOL_WRITE and nginx's buffers


def loopback_config(recipe: str, port: int, upstream_port: int) -> str:
    """The recipe on 127.0.0.1:`port` in plain HTTP, its server on `upstream_port`, small limits."""
    conf = recipe.split("# Plain HTTP only redirects")[0]  # no port-80 server
    edits = {
        r"listen 443 ssl;": f"listen 127.0.0.1:{port};",
        r"ssl_certificate(_key)? .*;": "",
        r"server 127\.0\.0\.1:5000;": f"server 127.0.0.1:{upstream_port};",
        r"client_header_timeout \w+;": "client_header_timeout 1s;",
        r"client_body_timeout \w+;": f"client_body_timeout {BODY_TIMEOUT};",
        r"limit_conn tracking_per_client \d+;": f"limit_conn tracking_per_client {PER_CLIENT};",
    }
    for pattern, value in edits.items():
        conf, n = re.subn(pattern, value, conf)
        assert n, f"the recipe has no {pattern!r} any more: update this test's edits"
    return conf


def _main_config(tmp: Path, recipe: Path) -> str:
    temp = "\n".join(
        f"    {kind}_temp_path {tmp / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""daemon off;
master_process off;  # one process, this test's child; no user switch
pid {tmp / "nginx.pid"};
error_log {tmp / "error.log"} info;
events {{ worker_connections 512; }}
http {{
    access_log off;
{temp}
    include {recipe};
}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_nginx(tmp: Path, upstream_port: int) -> tuple[subprocess.Popen, str]:
    """nginx on a free loopback port (tried again if another process took the port first)."""
    for _ in range(5):
        port = _free_port()
        (tmp / "tracking.conf").write_text(loopback_config(RECIPE.read_text(), port, upstream_port))
        (tmp / "nginx.conf").write_text(_main_config(tmp, tmp / "tracking.conf"))
        cmd = [NGINX, "-p", str(tmp), "-c", str(tmp / "nginx.conf"), "-e", str(tmp / "error.log")]
        check = subprocess.run([*cmd, "-t"], capture_output=True, text=True)
        assert check.returncode == 0, f"nginx -t refused the recipe:\n{check.stderr}"
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + LIVENESS_S
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return proc, f"http://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.05)
        proc.kill()
        proc.wait()
    raise AssertionError(f"nginx did not start:\n{(tmp / 'error.log').read_text()[-2000:]}")


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """(nginx's URL, alice's token, bob's token, alice's run id): the server behind nginx."""
    tmp = tmp_path_factory.mktemp("nginx")
    db, art = f"sqlite:///{tmp / 'tracking.db'}", str(tmp / "artifacts")
    with TrackingStore(db, art, default_user="alice") as store:
        alice = create_token(store.engine, "alice", by="alice").secret
        bob = create_token(store.engine, "bob", by="alice").secret
        run_id = store.start_run("alice-project", name="r").id
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlinfra_lab.tracking.server",
            *("--db", db, "--artifacts", art, "--port", "0"),
            *("--max-connections-per-client", "0", "--worker-threads", str(SERVER_THREADS)),
        ],
        stdout=subprocess.PIPE,
        stderr=(tmp / "server.log").open("w"),
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("serving on "), (tmp / "server.log").read_text()[-2000:]
        upstream_port = int(line.rsplit(":", 1)[1])
        nginx, url = _start_nginx(tmp, upstream_port)
        try:
            yield url, alice, bob, run_id
        finally:
            nginx.terminate()
            nginx.wait(timeout=LIVENESS_S)
    finally:
        server.terminate()
        server.wait(timeout=LIVENESS_S)


def test_the_recipe_proxies_the_api(proxied):
    url, alice, bob, run_id = proxied
    assert answered(url) == 200
    assert answered(url, "/api/whoami", bob) == 200
    assert answered(url, "/api/whoami") == 401, "the server still checks tokens"
    sock = _upload_head(url, alice, run_id, "127.0.0.1", name="whole.bin", close=True)
    assert sock.recv(4096).startswith(b"HTTP/1.1 100"), "nginx answers Expect itself"
    sock.sendall(b"y" * UPLOAD)
    got = reply(sock)
    assert got.startswith(b"HTTP/1.1 200"), got[:300]
    with TrackingClient(url, alice) as client:
        sizes = {a.name: a.size for a in client.list_artifacts(run_id)}
    assert sizes["whole.bin"] == UPLOAD, "an upload streamed through nginx is stored whole"


def _upload_head(
    url: str, token: str, run_id: int, source: str, name: str = "slow.bin", close: bool = False
) -> socket.socket:
    """An upload of `UPLOAD` bytes, its head sent with ``Expect: 100-continue``, no body yet."""
    sock = connect(url, source)
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Length": str(UPLOAD),
        "Expect": "100-continue",
    }
    if close:
        headers["Connection"] = "close"
    sock.sendall(head("POST", f"/api/runs/{run_id}/artifacts?name={name}", headers))
    return sock


def test_slow_uploads_behind_nginx_leave_the_server_answering(proxied):
    url, alice, bob, run_id = proxied
    socks = [_upload_head(url, alice, run_id, "127.0.0.5") for _ in range(PER_CLIENT + 4)]
    first_lines = [s.recv(4096).split(b"\r\n", 1)[0] for s in socks]
    moving = [s for s, line in zip(socks, first_lines, strict=True) if b" 100 " in line]
    refused = [line for line in first_lines if b" 503 " in line]
    assert (len(moving), len(refused)) == (PER_CLIENT, 4), first_lines
    stop = threading.Event()

    def trickle() -> None:  # a byte from each upload every TRICKLE_S: slow, never stalled
        while not stop.wait(TRICKLE_S):
            for s in moving:
                try:
                    s.sendall(b"x")
                except OSError:
                    pass

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        assert answered(url) == 200, "/api/health"
        assert answered(url, "/api/whoami", bob) == 200, "another user's request"
    finally:
        stop.set()
        thread.join()
        for s in socks:
            s.close()


def test_request_heads_that_never_end_are_closed_by_nginx(proxied):
    url, *_ = proxied
    socks = partial_heads(url, 20, "127.0.0.6")
    assert closed_within(socks, want=len(socks)) == len(socks)
    assert answered(url) == 200


@pytest.mark.parametrize("route", ["upload", "metrics"])
def test_a_stalled_body_is_cut_off_by_nginx(proxied, route):
    url, alice, _, run_id = proxied
    path = (
        f"/api/runs/{run_id}/artifacts?name=stalled.bin"
        if route == "upload"
        else f"/api/runs/{run_id}/metrics"
    )
    sock = connect(url, "127.0.0.7")
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
    got = reply(sock)  # until the connection is closed
    assert closed_within([sock], want=1) == 1, "a stalled body kept its connection"
    assert got == b"" or got.startswith(b"HTTP/1.1 408"), got[:300]
    assert answered(url) == 200
