"""`TrackingAPI`: the one written contract that the store and the client both implement.

Contract: code typed against `TrackingAPI` runs unchanged on a `TrackingStore` (in process,
on a database URL) and on a `TrackingClient` (over HTTP, as a token's user); both satisfy
it, and mypy checks that they do (the assignments of `api_conformance`). A run handle
from `start_run` is a `RunAPI`, the abstract `handle.RunHandle` (`Run` in process,
`RemoteRun` through the server).
The methods, what each returns, and what it raises (every error is a `TrackingError`):

- projects, teams, grants: `create_project` (the project's id; idempotent), `add_to_team`,
  `grant` (level NONE revokes), `set_store_admin`, `level` (a `Level`, NONE when none);
- datasets and runs: `register_dataset` (a `DatasetRef`), `start_run` (a `RunAPI`),
  `get_run` (a `RunInfo`), `metric_history` (``[(step, value)]`` by step), `search_runs`
  (``[RunInfo]``, newest first unless ``order_by``), `explain_search` (plan lines, whose
  text depends on the database and is not part of the contract);
- artifacts and lineage: `list_artifacts` (``[ArtifactInfo]``, ``uri`` None without
  READ_ARTIFACTS), `open_artifact` (an open binary file of verified bytes; the caller
  closes it), `read_artifact` (bytes), `pin_artifact`, `lineage` (a `LineageGraph`);
- maintenance: `apply_retention` (a `RetentionPlan`), `gc` (a `GcReport`), `audit_log`
  (``[dict]``, newest first), `count` (rows of one table), `cache_stats`;
- `default_user` (who the calls act as), `close`, and use as a context manager.

The exception classes that are part of the contract, raised alike by both (the client
rebuilds the server's error as the same class with the same message, `server.wire`):
`NotFoundOrDenied` for an id the caller may not see, existing or not; `PermissionDenied`
for a missing grant, naming it; `NotFound` for a name that does not exist; `QueryError`
for a filter or order that does not parse, with its position; `InvalidInput` for a value
no backend can store (a non-finite metric, text too long or not Unicode, an id out of
range); `ArtifactNameError` for an artifact name that could escape the root;
`IntegrityError` for bytes that do not match their sha256; and `TrackingError` itself for
other refused arguments (an unknown end status, a limit out of range, a run that has
ended). `DatabaseError` (retry) can come from either.

Deliberate differences, each stated where it lives:
- ``user=`` is any name on the store, which trusts its caller; on the client it may only
  be the token's own user, and any other raises `IdentityError` before a request is sent.
- The client adds `ServerUnavailable` (the server cannot be reached; retry), a
  `ConnectionError`, and `AuthenticationError` when its token is refused.
- `cache_stats` is the store's own disk cache; the client's is None (the server's cache
  is the server's business).
- A `RemoteRun` drops and reports a metric point the server refuses as `InvalidInput`
  (`server.remote_run`); points it can check itself are refused at `log_metrics`, as a
  `Run` refuses them.

Design decisions:
- A `typing.Protocol`, not a base class: the two implementations share no code (one runs
  SQL, the other sends HTTP), and structural typing lets a third (a fake in a test, a
  caching proxy) satisfy the contract without inheriting anything. MLflow draws the same
  seam as an abstract base class, ``AbstractStore`` in ``mlflow/store/tracking/
  abstract_store.py``, which its SQL, file and REST stores subclass; here the seam is
  checked statically instead, and `tests/test_tracking_api_parity.py` checks behaviour:
  one scenario run on both gives the same records and the same errors.
- ``runtime_checkable``, so ``isinstance(x, TrackingAPI)`` works, but it checks only that
  the names exist; the signatures are mypy's to check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import BinaryIO, Protocol, runtime_checkable

from mlinfra_lab.tracking.access import Level
from mlinfra_lab.tracking.cache import CacheStats
from mlinfra_lab.tracking.handle import RunHandle
from mlinfra_lab.tracking.lineage import LineageGraph
from mlinfra_lab.tracking.records import ArtifactInfo, DatasetRef, GcReport, RunInfo
from mlinfra_lab.tracking.retention import RetentionPlan, RetentionPolicy

__all__ = ["HasNode", "RunAPI", "TrackingAPI"]


@runtime_checkable
class HasNode(Protocol):
    """Anything with a lineage node name (``run:12``): records and run handles."""

    @property
    def node(self) -> str: ...


# A run handle's contract is `handle.RunHandle`, the abstract base both handles subclass
# (metrics buffered and written in batches, params, tags, artifacts, end; a context manager
# that ends the run, FAILED if the block raised); `RunAPI` is its name in this contract.
RunAPI = RunHandle


@runtime_checkable
class TrackingAPI(Protocol):
    """The tracking store's API; see the module doc for what each method returns and raises."""

    @property
    def default_user(self) -> str: ...

    def close(self) -> None: ...

    def __enter__(self) -> TrackingAPI: ...

    def __exit__(self, *exc: object) -> None: ...

    # -- projects, teams, grants -------------------------------------------------------
    def create_project(self, name: str, user: str | None = None) -> int: ...

    def add_to_team(self, team: str, member: str, user: str | None = None) -> None: ...

    def grant(
        self,
        project: str,
        principal: str,
        level: Level | str,
        user: str | None = None,
        kind: str | None = None,
    ) -> None: ...

    def set_store_admin(
        self, principal: str, admin: bool = True, user: str | None = None
    ) -> None: ...

    def level(
        self, project: str, user: str | None = None, principal: str | None = None
    ) -> Level: ...

    # -- datasets and runs -------------------------------------------------------------
    def register_dataset(
        self,
        project: str,
        name: str,
        version: str,
        uri: str,
        sha256: str | None = None,
        user: str | None = None,
    ) -> DatasetRef: ...

    def start_run(
        self,
        project: str,
        name: str | None = None,
        params: dict | None = None,
        tags: dict | None = None,
        code_commit: str | None = None,
        inputs: Iterable[DatasetRef | ArtifactInfo | str] = (),
        user: str | None = None,
        start_time: float | None = None,
    ) -> RunAPI: ...

    def get_run(self, run_id: int, user: str | None = None) -> RunInfo: ...

    def metric_history(
        self, run_id: int, key: str, user: str | None = None
    ) -> list[tuple[int, float]]: ...

    def search_runs(
        self,
        project: str | Sequence[str] | None,
        filter: str | None = None,
        order_by: str | None = None,
        limit: int = 100,
        user: str | None = None,
    ) -> list[RunInfo]: ...

    def explain_search(
        self,
        project: str | Sequence[str] | None,
        filter: str | None = None,
        order_by: str | None = None,
        user: str | None = None,
    ) -> list[str]: ...

    # -- artifacts and lineage ---------------------------------------------------------
    def list_artifacts(self, run_id: int, user: str | None = None) -> list[ArtifactInfo]: ...

    def open_artifact(self, artifact_id: int, user: str | None = None) -> BinaryIO: ...

    def read_artifact(self, artifact_id: int, user: str | None = None) -> bytes: ...

    def pin_artifact(
        self, artifact_id: int, pinned: bool = True, user: str | None = None
    ) -> None: ...

    def lineage(
        self,
        node: str | HasNode,
        direction: str = "forward",
        depth: int | None = None,
        user: str | None = None,
    ) -> LineageGraph: ...

    # -- retention, garbage collection, audit, counts ----------------------------------
    def apply_retention(
        self,
        policy: RetentionPolicy,
        now: float | None = None,
        dry_run: bool = True,
        user: str | None = None,
    ) -> RetentionPlan: ...

    def gc(
        self,
        grace_seconds: float = 3600.0,
        dry_run: bool = False,
        extra_roots: Sequence[str] = (),
        user: str | None = None,
        stale_upload_seconds: float = 3600.0,
    ) -> GcReport: ...

    def audit_log(
        self, project: str | None, limit: int = 100, user: str | None = None
    ) -> list[dict]: ...

    def count(self, table: str, user: str | None = None) -> int: ...

    def cache_stats(self) -> CacheStats | None: ...
