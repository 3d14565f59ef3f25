"""Shared by the tracking suites (local files and S3): open an artifact and read it through,
measuring how much memory opening it took."""

from __future__ import annotations

import hashlib
import io
import tracemalloc
from typing import Any


def open_and_hash(store: Any, artifact_id: int) -> tuple[str, int]:
    """The SHA-256 of the artifact read in 1 MiB chunks, and the peak bytes that
    `store.open_artifact` allocated (it must hand back an open file, never bytes in memory)."""
    tracemalloc.start()
    try:
        f = store.open_artifact(artifact_id)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    with f:
        assert not isinstance(f, io.BytesIO) and f.fileno() >= 0, (
            "an open file, not bytes in memory"
        )
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest(), peak
