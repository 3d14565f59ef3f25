"""A small content-addressed store whose every operation a test can interleave with an upload.

Contract: `CasStore(page_size)` holds blobs under their sha256 digest and named references
to them, on a logical clock that ticks once per operation. A garbage collector sees four
operations: `clock()`, `list_blobs(after)` (one page of `BlobEntry`, in digest order),
`list_refs()` (every reference's name and target, as its client spelled it) and
`delete_blob(digest, if_generation)`. A writer has `put(data)` (write the blob, or rewrite
it: a new generation, written now) and `commit(name, target)`. `schedule(index, action)`
runs `action` just before the collector's operation number `index` (from 0), and
`run_pending()` runs what the collector never reached: this is how a test places each step
of an upload between any two of the collector's operations. `has`, `digests`, `entry` and
`references` read the store without being operations. `spell(digest, form)` writes a target
the way each kind of client does (`TARGET_FORMS`).

Design decisions:
- Time is a counter, not the wall clock: every operation of either side ticks it once, so
  "written 30 ticks before the collector began" means the same on a loaded 2-core CI runner
  and on a laptop, and a race is a schedule, replayed exactly, never a sleep.
- The primitives are an object store's: a listing is paged and is no snapshot (a blob
  written while the collector pages may or may not appear), and a delete can be made
  conditional on the generation the collector listed (Google Cloud Storage's
  ``ifGenerationMatch``; S3 has conditional writes of the same kind). A rewrite of existing
  bytes, the de-duplicated upload, is a new generation with a fresh write time.
- The store keeps references as text and never resolves them: deciding which blob a
  target names is the collector's job (Lab 4, exercise 4), and the module holds no
  collector. The package's own collector, for `TrackingStore`, is `maintenance`'s
  `collect_garbage`, on a database and a lock instead.
- Only the collector's four operations are counted for `schedule`; the writer's are not,
  so a schedule means the same whatever the upload does.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["TARGET_FORMS", "BlobEntry", "CasStore", "spell"]

TARGET_FORMS = ("sha256", "SHA256", "path")  # sha256:<hex>, sha256:<HEX>, blobs/<hex[:2]>/<hex>
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class BlobEntry(NamedTuple):
    """One blob as a listing shows it."""

    digest: str  # sha256 of the bytes, 64 lower-case hex digits
    generation: int  # bumped by every write of these bytes (a rewrite too)
    written_at: int  # the clock when it was last written


def spell(digest: str, form: str) -> str:
    """The reference target a client of kind `form` (one of `TARGET_FORMS`) writes for `digest`."""
    if not _DIGEST.match(digest):
        raise ValueError(f"not a sha256 digest (64 lower-case hex digits): {digest!r}")
    if form == "sha256":
        return f"sha256:{digest}"
    if form == "SHA256":
        return f"sha256:{digest.upper()}"
    if form == "path":
        return f"blobs/{digest[:2]}/{digest}"
    raise ValueError(f"unknown target form {form!r}; use one of {TARGET_FORMS}")


class CasStore:
    """Blobs by digest and named references, on a logical clock (see the module docstring)."""

    def __init__(self, page_size: int = 4, now: int = 1000) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self.page_size = page_size
        self.now = now  # the clock: the time of the last operation
        self.operations = 0  # collector operations so far (what `schedule` counts)
        self.log: list[str] = []  # every operation of both sides, in order: for messages
        self._blobs: dict[
            str, tuple[bytes, int, int]
        ] = {}  # digest -> (data, generation, written_at)
        self._refs: dict[str, str] = {}  # name -> target, as written
        self._plan: dict[int, list[Callable[[], object]]] = {}

    # -- the collector's side ----------------------------------------------------------
    def clock(self) -> int:
        """The time now (it ticks: two calls never return the same time)."""
        self._collector_step("clock()")
        return self.now

    def list_blobs(self, after: str = "") -> list[BlobEntry]:
        """Up to `page_size` blobs whose digest sorts after `after`, in digest order; ``[]`` at the end."""
        self._collector_step(f"list_blobs({after[:8]!r})")
        page = sorted(d for d in self._blobs if d > after)[: self.page_size]
        return [BlobEntry(d, self._blobs[d][1], self._blobs[d][2]) for d in page]

    def list_refs(self) -> dict[str, str]:
        """Every reference, name -> target as its client wrote it (see `TARGET_FORMS`)."""
        self._collector_step("list_refs()")
        return dict(self._refs)

    def delete_blob(self, digest: str, if_generation: int | None = None) -> bool:
        """Delete blob `digest`; with `if_generation`, only if it is still that generation.
        Returns whether it deleted (False: no such blob, or rewritten since)."""
        self._collector_step(f"delete_blob({digest[:8]}, if_generation={if_generation})")
        entry = self._blobs.get(digest)
        if entry is None or (if_generation is not None and entry[1] != if_generation):
            return False
        del self._blobs[digest]
        return True

    # -- the writer's side ---------------------------------------------------------------
    def put(self, data: bytes, at: int | None = None) -> str:
        """Write `data` (or rewrite it: a new generation) and return its digest. `at` backdates
        the write without ticking the clock: a blob written before the test began."""
        digest = hashlib.sha256(data).hexdigest()
        if at is None:
            self.now += 1
        when = self.now if at is None else at
        generation = self._blobs[digest][1] + 1 if digest in self._blobs else 1
        self._blobs[digest] = (bytes(data), generation, when)
        self.log.append(f"put({digest[:8]}) -> generation {generation} at {when}")
        return digest

    def commit(self, name: str, target: str) -> None:
        """Name a blob: reference `name` now points at `target`."""
        self.now += 1
        self._refs[name] = target
        self.log.append(f"commit({name!r} -> {target[:16]}...) at {self.now}")

    def drop(self, name: str) -> None:
        """Remove reference `name` (its blob becomes garbage unless another names it)."""
        self.now += 1
        self._refs.pop(name, None)
        self.log.append(f"drop({name!r}) at {self.now}")

    # -- what a test reads ---------------------------------------------------------------
    def has(self, digest: str) -> bool:
        """Whether blob `digest` exists."""
        return digest in self._blobs

    def references(self) -> dict[str, str]:
        """Every reference, name -> target (what `list_refs` returns, without being an operation)."""
        return dict(self._refs)

    def digests(self) -> set[str]:
        """Every blob's digest."""
        return set(self._blobs)

    def entry(self, digest: str) -> BlobEntry:
        """Blob `digest` as a listing would show it (KeyError if there is none)."""
        _, generation, written_at = self._blobs[digest]
        return BlobEntry(digest, generation, written_at)

    # -- races ---------------------------------------------------------------------------
    def schedule(self, index: int, action: Callable[[], object]) -> None:
        """Run `action` just before the collector's operation number `index` (0 = its first)."""
        if index < self.operations:
            raise ValueError(f"operation {index} has already run ({self.operations} so far)")
        self._plan.setdefault(index, []).append(action)

    def run_pending(self) -> None:
        """Run, in order, every scheduled action the collector's operations did not reach."""
        for index in sorted(self._plan):
            for action in self._plan.pop(index):
                action()

    def _collector_step(self, what: str) -> None:
        for action in self._plan.pop(self.operations, []):
            action()
        self.operations += 1
        self.now += 1
        self.log.append(f"collector: {what} at {self.now}")
