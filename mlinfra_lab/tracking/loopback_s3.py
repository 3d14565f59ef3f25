"""An S3 server on loopback for tests and the chapter: moto's server, reached through fsspec.

Contract: ``with loopback_s3() as endpoint:`` starts moto's S3 server as its own process on
a free port of 127.0.0.1, points fsspec's ``s3`` configuration at it (so ``s3://bucket/...``
roots reach it as a deployment reaches AWS or MinIO), yields its URL, and on exit stops
the server and restores fsspec's configuration. `s3_available()` says whether the two
packages it needs are installed; without them `loopback_s3` raises `S3Unavailable`, whose
message says what to install.

Design decisions:
- A separate process, not moto's in-process mock: the server's memory is not ours, and
  every request crosses a real socket and HTTP, as it would to a bucket.
- It emulates the S3 API, not a cloud: there is no network distance, no egress bill and no
  throttling, so a latency measured against it is a lower bound on real object storage.
- Credentials are moto's dummies; nothing here can reach a real bucket.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from mlinfra_lab.tracking.errors import TrackingError

__all__ = ["S3Unavailable", "loopback_s3", "s3_available"]

INSTALL = "pip install s3fs 'moto[server]' (both are in requirements.txt)"


class S3Unavailable(TrackingError):
    """The loopback S3 server cannot run here: a package is missing or the server did not start."""


def s3_available() -> bool:
    """True when s3fs and moto's server are importable."""
    return all(importlib.util.find_spec(m) is not None for m in ("s3fs", "moto"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def loopback_s3(start_timeout_s: float = 60.0, region: str = "eu-west-1") -> Iterator[str]:
    """moto's S3 server on a free loopback port, with fsspec's s3 configuration pointing at it."""
    if not s3_available():
        raise S3Unavailable(f"the loopback S3 server needs s3fs and moto: {INSTALL}")
    import fsspec.config
    import s3fs

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    saved, configured = fsspec.config.conf.get("s3"), False
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise S3Unavailable(
                        f"moto's S3 server did not start on port {port} within "
                        f"{start_timeout_s:g} s; run `{sys.executable} -m moto.server` to see why"
                    ) from None
                time.sleep(0.1)
        fsspec.config.conf["s3"] = {
            "key": "testing",
            "secret": "testing",
            "use_listings_cache": False,
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": region},
        }
        configured = True
        s3fs.S3FileSystem.clear_instance_cache()
        yield f"http://127.0.0.1:{port}"
    finally:
        if configured:
            if saved is None:
                fsspec.config.conf.pop("s3", None)
            else:
                fsspec.config.conf["s3"] = saved
            s3fs.S3FileSystem.clear_instance_cache()
        server.terminate()
        server.wait(timeout=30)
