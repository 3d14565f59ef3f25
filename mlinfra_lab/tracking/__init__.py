"""Chapter 4: an experiment-tracking backend.

Run metadata lives in a queryable SQL database, large artifacts in object storage by
reference with a content hash; a lineage graph connects runs to the data, code and
artifacts they consumed and produced; access control is enforced on every path; a hot
cache and tiered retention keep storage fast and bounded. Read the modules in this order:

- ``schema``     the tables and indexes (Alembic migrations in ``migrations/``)
- ``db``         engines: SQLite in WAL mode with a busy timeout, or PostgreSQL
- ``artifacts``  content-addressed, atomic, de-duplicated blobs on any fsspec URL
- ``writing``    params, tags and upserts of run metadata (hot params promoted)
- ``run``        a run: batched metric writes, artifacts logged by reference
- ``uploads``    artifact rows: logging that gc cannot race (pending records), listing, pins
- ``query``      the search language, parsed into bound SQLAlchemy expressions
- ``reading``    search statements, their plans, runs read back as records
- ``access``     VIEW < READ_ARTIFACTS < WRITE < ADMIN, users, teams, store ADMINs
- ``audit``      the audit log: every decision, denials with their real scope
- ``lineage``    walking the graph forward and backward
- ``cache``      the LRU disk cache of hot artifacts, verified by hash
- ``spy``        counting what the store asks of storage: calls and bytes through fsspec
- ``tiers``      the two tiers measured: bytes per reference row, a cold read against a hit
- ``loopback_s3``  moto's S3 server on loopback, for the S3 tests and the chapter
- ``retention``  declarative policy -> explicit plan
- ``maintenance``  carrying out a plan; garbage collection of unreferenced blobs
- ``records``    the frozen records the store returns (RunInfo, ArtifactInfo, ...)
- ``store``      `TrackingStore`, the facade every read and write goes through
- ``api``        `TrackingAPI`, the contract `TrackingStore` and `TrackingClient` both implement
- ``experiments``  the chapter's measurements; ``testing``: throw-away stores for tests
- ``search_cost``  where a search's time goes: planning counts, the SELECT, the page
- ``bench``      side-by-side benchmark against MLflow (``mlinfra-lab bench tracking``)
- ``server``     the trust boundary: an HTTP server that acts as the user of a bearer token
                 (``mlinfra-lab track serve``), and `TrackingClient`, the store's API over it
"""

from importlib import import_module
from typing import TYPE_CHECKING

# The public names and the module that defines each. They are imported on first use
# (PEP 562), so `mlinfra-lab --help` does not pay for SQLAlchemy and fsspec.
_EXPORTS = {
    "Level": "access",
    "RunAPI": "api",
    "TrackingAPI": "api",
    "ArtifactCache": "cache",
    "CacheStats": "cache",
    "ArtifactNameError": "errors",
    "AuthenticationError": "errors",
    "IdentityError": "errors",
    "IntegrityError": "errors",
    "InvalidInput": "errors",
    "NotFound": "errors",
    "NotFoundOrDenied": "errors",
    "PermissionDenied": "errors",
    "QueryError": "errors",
    "TrackingError": "errors",
    "RequestTimeout": "errors",
    "RequestTooLarge": "errors",
    "ServerUnavailable": "errors",
    "LineageGraph": "lineage",
    "S3Unavailable": "loopback_s3",
    "loopback_s3": "loopback_s3",
    "compile_filter": "query",
    "ArtifactInfo": "records",
    "DatasetRef": "records",
    "GcReport": "records",
    "RunInfo": "records",
    "PlannedAction": "retention",
    "RetentionPlan": "retention",
    "RetentionPolicy": "retention",
    "RetentionRule": "retention",
    "plan_retention": "retention",
    "Run": "run",
    "search_phases": "search_cost",
    "StorageSpy": "spy",
    "spy_storage": "spy",
    "cold_and_cached_reads": "tiers",
    "reference_row_bytes": "tiers",
    "TrackingStore": "store",
    "TrackingClient": "server.client",
    "connect": "server.client",
}

__all__ = [
    "ArtifactCache",
    "ArtifactInfo",
    "ArtifactNameError",
    "AuthenticationError",
    "CacheStats",
    "DatasetRef",
    "GcReport",
    "IdentityError",
    "IntegrityError",
    "InvalidInput",
    "Level",
    "LineageGraph",
    "NotFound",
    "NotFoundOrDenied",
    "PermissionDenied",
    "PlannedAction",
    "QueryError",
    "RetentionPlan",
    "RetentionPolicy",
    "RetentionRule",
    "Run",
    "RunAPI",
    "RunInfo",
    "RequestTimeout",
    "RequestTooLarge",
    "S3Unavailable",
    "ServerUnavailable",
    "StorageSpy",
    "TrackingAPI",
    "TrackingError",
    "TrackingClient",
    "TrackingStore",
    "cold_and_cached_reads",
    "compile_filter",
    "connect",
    "loopback_s3",
    "plan_retention",
    "reference_row_bytes",
    "search_phases",
    "spy_storage",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(f"mlinfra_lab.tracking.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mlinfra_lab.tracking' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the eager imports
    from mlinfra_lab.tracking.access import Level
    from mlinfra_lab.tracking.api import RunAPI, TrackingAPI
    from mlinfra_lab.tracking.cache import ArtifactCache, CacheStats
    from mlinfra_lab.tracking.errors import (
        ArtifactNameError,
        AuthenticationError,
        IdentityError,
        IntegrityError,
        InvalidInput,
        NotFound,
        NotFoundOrDenied,
        PermissionDenied,
        QueryError,
        RequestTimeout,
        RequestTooLarge,
        ServerUnavailable,
        TrackingError,
    )
    from mlinfra_lab.tracking.lineage import LineageGraph
    from mlinfra_lab.tracking.loopback_s3 import S3Unavailable, loopback_s3
    from mlinfra_lab.tracking.query import compile_filter
    from mlinfra_lab.tracking.records import ArtifactInfo, DatasetRef, GcReport, RunInfo
    from mlinfra_lab.tracking.retention import (
        PlannedAction,
        RetentionPlan,
        RetentionPolicy,
        RetentionRule,
        plan_retention,
    )
    from mlinfra_lab.tracking.run import Run
    from mlinfra_lab.tracking.search_cost import search_phases
    from mlinfra_lab.tracking.server.client import TrackingClient, connect
    from mlinfra_lab.tracking.spy import StorageSpy, spy_storage
    from mlinfra_lab.tracking.store import TrackingStore
    from mlinfra_lab.tracking.tiers import cold_and_cached_reads, reference_row_bytes
