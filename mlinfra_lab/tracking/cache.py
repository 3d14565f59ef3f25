"""A size-bounded LRU cache of hot artifacts on local disk, keyed by content hash.

Contract: `ArtifactCache(dir, max_bytes).open(sha256, fetch)` returns an open binary file
holding exactly the bytes whose hash is `sha256` (the caller closes it), calling `fetch()` (a
binary stream from the artifact store) only on a miss, and keeps the total size under
`max_bytes` by evicting the least recently used files; `stats()` reports hits, misses and
evictions.

Design decisions:
- Keyed by sha256, so the cache needs no invalidation: a key's bytes never change. Two runs
  that share a blob share a cache entry.
- Every returned file is verified: bytes fetched on a miss are hashed while they stream to
  disk, and a hit is re-hashed before it is returned, so a corrupted cache file or a
  tampered blob raises `IntegrityError` instead of poisoning a training job. (Re-hashing
  a hit reads it once more; a deployment that trusts its local disk could skip it.)
- Fills are atomic (temporary name, then rename), so a crash never leaves a partial entry.
- The recency order lives in memory and is rebuilt from file access times when a cache
  directory is reopened. One process owns one cache directory.
- An item larger than the whole cache is served from a temporary file and not kept: the
  file is unlinked once it is open, so it has no name on disk and disappears when closed.
  The caller learns nothing about it and needs to: an open file is the whole answer (no
  path whose name says whether it is a cache entry).
- An evicted entry stays readable through a file opened before the eviction (POSIX
  unlink semantics), so a reader never races the eviction of what it reads.
- Thread-safe: the server's worker threads share one cache. A lock guards the recency
  order, the byte count, the counters and every step that names a cache file (look up and
  open a hit; evict, rename into place and open a fill), so a file is always opened before
  another thread can evict it. Fetching and hashing run outside the lock: a slow download
  holds no other reader up. Two threads missing the same blob both fetch it (the second
  rename replaces identical bytes).

Reference: the course text, ch. 4 ("hot artifact cache").
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

from mlinfra_lab.tracking.artifacts import CHUNK, sha256_file
from mlinfra_lab.tracking.errors import IntegrityError

__all__ = ["ArtifactCache", "CacheStats"]


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    evictions: int
    bytes_cached: int
    max_bytes: int

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def as_dict(self) -> dict:
        return asdict(self) | {"hit_rate": self.hit_rate}


class ArtifactCache:
    """LRU disk cache of blobs; `max_bytes` bounds the sum of file sizes kept."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.hits = self.misses = self.evictions = 0
        self._lru: OrderedDict[str, int] = OrderedDict()  # sha -> size, oldest first
        self._total = 0  # sum of self._lru's sizes
        self._lock = threading.Lock()  # guards the above, the counters and the cache's files
        entries = [p for p in self.dir.iterdir() if p.is_file() and len(p.name) == 64]
        for p in sorted(entries, key=lambda p: p.stat().st_atime):
            self._lru[p.name] = p.stat().st_size
            self._total += self._lru[p.name]
        self._evict(0)

    @property
    def bytes_cached(self) -> int:
        return self._total

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self.hits, self.misses, self.evictions, self.bytes_cached, self.max_bytes
            )

    def reset_stats(self) -> None:
        with self._lock:
            self.hits = self.misses = self.evictions = 0

    def __contains__(self, sha256: str) -> bool:
        with self._lock:
            return sha256 in self._lru

    def open(
        self, sha256: str, fetch: Callable[[], BinaryIO], artifact_id: int | None = None
    ) -> BinaryIO:
        """An open binary file of the verified blob `sha256`; `fetch` opens it in the store
        on a miss. Raises `IntegrityError` when the cached or fetched bytes do not match."""
        path = self.dir / sha256
        f = self._open_hit(sha256, path)
        if f is not None:  # opened under the lock: an eviction from now on cannot take it
            actual = sha256_file(f)
            if actual != sha256:
                f.close()
                with self._lock:
                    self._drop(sha256)
                raise IntegrityError(artifact_id, sha256, actual, f"in the cache ({path})")
            f.seek(0)
            return f
        tmp = self.dir / f".tmp-{uuid.uuid4().hex}"
        h, size = hashlib.sha256(), 0
        try:
            with fetch() as src, open(tmp, "wb") as out:
                for chunk in iter(lambda: src.read(CHUNK), b""):
                    h.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            if h.hexdigest() != sha256:
                raise IntegrityError(artifact_id, sha256, h.hexdigest(), "in the artifact store")
            if size > self.max_bytes:  # too big to keep: served from the unnamed temporary file
                return open(tmp, "rb")  # unlinked below; the caller closes it
            with self._lock:
                self._total -= self._lru.pop(sha256, 0)  # another thread may have filled it
                self._evict(size)
                os.replace(tmp, path)
                self._lru[sha256] = size
                self._total += size
                return open(path, "rb")  # the caller closes it
        finally:
            tmp.unlink(missing_ok=True)

    def _open_hit(self, sha256: str, path: Path) -> BinaryIO | None:
        """The cached file of `sha256`, opened and counted as a hit; None (a miss) if absent."""
        with self._lock:
            if sha256 in self._lru:
                try:
                    f = open(path, "rb")  # noqa: SIM115 (handed to the caller, who closes it)
                except FileNotFoundError:  # removed behind the cache's back
                    self._total -= self._lru.pop(sha256)
                else:
                    self.hits += 1
                    self._lru.move_to_end(sha256)
                    return f
            self.misses += 1
            return None

    def _drop(self, sha256: str) -> None:
        self._total -= self._lru.pop(sha256, 0)
        (self.dir / sha256).unlink(missing_ok=True)

    def _evict(self, incoming: int) -> None:
        while self._lru and self.bytes_cached + incoming > self.max_bytes:
            oldest = next(iter(self._lru))
            self._drop(oldest)
            self.evictions += 1
