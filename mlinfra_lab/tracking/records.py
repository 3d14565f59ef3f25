"""The records the store hands out: frozen snapshots of rows, never live database objects.

Contract: every public read of `TrackingStore` returns these dataclasses (or lists of
them); they carry a `node` id for lineage (``run:12``) and nothing that touches the
database, so they are safe to keep, pickle and compare.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ArtifactInfo", "DatasetRef", "GcReport", "RunInfo"]


@dataclass(frozen=True)
class RunInfo:
    id: int
    project: str
    name: str
    status: str
    user: str
    code_commit: str | None
    created_at: float
    ended_at: float | None
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # latest value per key
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def node(self) -> str:
        return f"run:{self.id}"


@dataclass(frozen=True)
class ArtifactInfo:
    id: int
    run_id: int
    name: str
    kind: str
    step: int | None
    sha256: str
    size: int
    tier: str
    pinned: bool
    uri: str | None  # None unless the caller may download (READ_ARTIFACTS)

    @property
    def node(self) -> str:
        return f"artifact:{self.id}"


@dataclass(frozen=True)
class DatasetRef:
    id: int
    project: str
    name: str
    version: str
    uri: str
    sha256: str | None

    @property
    def node(self) -> str:
        return f"dataset:{self.id}"


@dataclass(frozen=True)
class GcReport:
    deleted: tuple[str, ...]  # blob URIs removed (or that would be, in a dry run)
    bytes_freed: int
    referenced: int  # blobs kept because a row references them
    dry_run: bool
