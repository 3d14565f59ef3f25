"""`TrackingStore`: run metadata in a SQL database, artifacts by reference in object storage.

Contract: one object that owns a database (SQLite or PostgreSQL, by URL) and an artifact
root (any fsspec URL), and through which every read and write goes, each checked against
the caller's grants: runs (`start_run`), search (`search_runs`), artifacts
(`open_artifact`), lineage (`lineage`), access (`grant`), and maintenance
(`apply_retention`, `gc`). Rows never leave the store; callers get frozen dataclasses.

Design decisions:
- The database holds metadata and artifact *references* (URI + sha256 + size); bytes live
  in the blob store (`artifacts.BlobStore`), content-addressed and de-duplicated.
- The schema is created and upgraded by Alembic migrations when the store opens
  (``migrate_schema=True``), so an old database file keeps working after an upgrade;
  several processes may open a new database at once (`db.migrate` serialises them).
- Every public method takes ``user=``; None means the store's `default_user` (the OS
  user unless given). There is no bypass: the default user is checked like anyone else.
- Downloads go through a size-bounded LRU cache on local disk (`cache.ArtifactCache`)
  when `cache_dir` is given, and every read is verified against its sha256.
- A facade: each method opens an audited transaction (`audit.audited_write`/`audited_read`:
  denials recorded, driver errors wrapped), checks there who may do what (`access.require*`;
  `Run` re-checks its own writes), then calls the module that owns the SQL: projects, teams,
  grants in `access`; datasets, runs, params, tags in `writing`; reads, search, counts in
  `reading`; artifact rows in `uploads`; `audit`, `lineage`, `maintenance`. No SQL here.
  The methods on projects, teams and grants are `access.StoreAccess`'s (a mixin), so that
  this file keeps to runs, artifacts, lineage and maintenance.
- No module calls back into the store (no import cycle): `Run` and `maintenance` are given
  the engine and the blob store (and an audit function) instead.
"""

from __future__ import annotations

import getpass
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import BinaryIO

from mlinfra_lab.tracking import access, audit, lineage, maintenance, reading, uploads, writing
from mlinfra_lab.tracking.access import Level, StoreAccess
from mlinfra_lab.tracking.api import HasNode
from mlinfra_lab.tracking.artifacts import BlobStore, open_uri, to_url, verified_copy
from mlinfra_lab.tracking.cache import ArtifactCache, CacheStats
from mlinfra_lab.tracking.db import make_engine, migrate
from mlinfra_lab.tracking.records import ArtifactInfo, DatasetRef, GcReport, RunInfo
from mlinfra_lab.tracking.retention import RetentionPlan, RetentionPolicy, plan_retention
from mlinfra_lab.tracking.run import Run

__all__ = ["ArtifactInfo", "DatasetRef", "GcReport", "RunInfo", "TrackingStore"]


class TrackingStore(StoreAccess):
    """Metadata in SQL (SQLite by default, PostgreSQL by URL), artifacts in fsspec storage."""

    def __init__(
        self,
        db_url: str = "sqlite:///mlinfra-tracking.db",
        artifact_root: str = "mlinfra-artifacts",
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int = 1 << 30,
        default_user: str | None = None,
        batch_size: int = 1000,
        migrate_schema: bool = True,
        search_timeout_s: float = 10.0,
    ) -> None:
        self.db_url, self.artifact_root = db_url, to_url(artifact_root)
        self.engine = make_engine(db_url)
        if migrate_schema:
            migrate(self.engine)
        self.blobs = BlobStore(self.artifact_root)
        self.cache = ArtifactCache(cache_dir, cache_bytes) if cache_dir is not None else None
        self.default_user = default_user or os.environ.get("MLINFRA_USER") or getpass.getuser()
        self.batch_size = batch_size
        self.search_timeout_s = search_timeout_s  # a longer search is stopped (QueryError)
        self.uncached_reads = 0
        self._known_projects: set[str] = set()

    def __repr__(self) -> str:
        return f"TrackingStore(db_url={self.db_url!r}, artifact_root={self.artifact_root!r})"

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> TrackingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- datasets and runs: writing and reading --------------------------------------
    def register_dataset(
        self,
        project: str,
        name: str,
        version: str,
        uri: str,
        sha256: str | None = None,
        user: str | None = None,
    ) -> DatasetRef:
        """Record an immutable dataset version (by reference) for runs' inputs; needs WRITE."""
        with audit.audited_write(self.engine) as conn:
            pid = access.require(conn, project, self._user(user), Level.WRITE, "register datasets")
            did = writing.register_dataset(conn, pid, name, version, uri, sha256)
        return DatasetRef(did, project, name, version, uri, sha256)

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
    ) -> Run:
        """Start a run in `project` (created, with you as ADMIN, if new; else needs WRITE)."""
        user = self._user(user)
        if project not in self._known_projects:
            with self.engine.connect() as conn:
                exists = access.find_project(conn, project) is not None
            if not exists:
                self.create_project(project, user)
            self._known_projects.add(project)  # projects are never deleted through the API
        nodes = [i if isinstance(i, str) else i.node for i in inputs]
        name = name or f"run-{uuid.uuid4().hex[:8]}"
        with audit.audited_write(self.engine) as conn:
            pid = access.require(conn, project, user, Level.WRITE, "start runs")
            for n in nodes:  # each input must exist and be visible: one answer for both
                lineage.require_visible(conn, n, user, "use it as an input", allow_deleted=False)
            created = time.time() if start_time is None else float(start_time)
            run_id = writing.insert_run(
                conn, pid, name, user, code_commit, created, params or {}, tags or {}, nodes
            )
        return Run(self, run_id, project, name, user, self.batch_size)

    def get_run(self, run_id: int, user: str | None = None) -> RunInfo:
        """A run's metadata with its params, latest metrics and tags; needs VIEW."""
        with audit.audited_read(self.engine) as conn:
            found = access.require_run(conn, run_id, self._user(user), Level.VIEW, "view runs")
            return reading.run_info(conn, run_id, found.project_id, found.project)

    def metric_history(
        self, run_id: int, key: str, user: str | None = None
    ) -> list[tuple[int, float]]:
        """Every (step, value) point of one metric of one run, by step; needs VIEW."""
        with audit.audited_read(self.engine) as conn:
            access.require_run(conn, run_id, self._user(user), Level.VIEW, "view metrics")
            return reading.metric_history(conn, run_id, key)

    def search_runs(
        self,
        project: str | Sequence[str] | None,
        filter: str | None = None,
        order_by: str | None = None,
        limit: int = 100,
        user: str | None = None,
    ) -> list[RunInfo]:
        """Runs matching `filter` (see `query`), newest first unless `order_by`; needs VIEW on
        `project` (a name or a list of names; None: every project you can view). Answered
        from the indexed tables only; the artifact store is never touched."""
        with audit.audited_read(self.engine) as conn:
            pids = access.searched_project_ids(conn, project, self._user(user))
            return reading.search(conn, pids, filter, order_by, limit, self.search_timeout_s)

    def explain_search(
        self,
        project: str | Sequence[str] | None,
        filter: str | None = None,
        order_by: str | None = None,
        user: str | None = None,
    ) -> list[str]:
        """The database's plan for a search (EXPLAIN QUERY PLAN / EXPLAIN), one line a step."""
        with audit.audited_read(self.engine) as conn:
            pids = access.searched_project_ids(conn, project, self._user(user))
            return reading.explain_search(conn, pids, filter, order_by, self.search_timeout_s)

    # -- artifacts and lineage ------------------------------------------------------
    def list_artifacts(self, run_id: int, user: str | None = None) -> list[ArtifactInfo]:
        """A run's artifacts; needs VIEW, and the URIs are shown only with READ_ARTIFACTS."""
        user = self._user(user)
        with audit.audited_read(self.engine) as conn:
            found = access.require_run(conn, run_id, user, Level.VIEW, "list artifacts")
            level = access.effective_level(conn, found.project_id, user)
            return uploads.list_artifacts(conn, run_id, show_uris=level >= Level.READ_ARTIFACTS)

    def open_artifact(self, artifact_id: int, user: str | None = None) -> BinaryIO:
        """An open binary file of the artifact's verified bytes; needs READ_ARTIFACTS. Read in
        chunks through the LRU disk cache, or (without one) into an unnamed temporary file;
        `IntegrityError` when the bytes do not hash to the sha256 recorded at upload."""
        user = self._user(user)
        with audit.audited_read(self.engine) as conn:
            row = access.require_artifact(
                conn, artifact_id, user, Level.READ_ARTIFACTS, "download artifacts"
            )
        audit.log(self.engine, user, "download", row.project, f"artifact:{artifact_id}", True)
        if self.cache is None:
            self.uncached_reads += 1
            return verified_copy(row.uri, row.sha256, artifact_id)
        return self.cache.open(row.sha256, lambda: open_uri(row.uri), artifact_id)

    def read_artifact(self, artifact_id: int, user: str | None = None) -> bytes:
        with self.open_artifact(artifact_id, user) as f:
            return f.read()

    def pin_artifact(self, artifact_id: int, pinned: bool = True, user: str | None = None) -> None:
        """Pin (promote) an artifact so retention never touches it; needs WRITE."""
        with audit.audited_write(self.engine) as conn:
            access.require_artifact(
                conn, artifact_id, self._user(user), Level.WRITE, "pin artifacts"
            )
            uploads.set_pinned(conn, artifact_id, pinned)

    def cache_stats(self) -> CacheStats | None:
        return None if self.cache is None else self.cache.stats()

    def lineage(
        self,
        node: str | HasNode,
        direction: str = "forward",
        depth: int | None = None,
        user: str | None = None,
    ) -> lineage.LineageGraph:
        """Nodes reachable from `node` forward (what used it) or backward (what made it); needs
        VIEW on its project. The walk leaves out, and never passes, projects you cannot view."""
        user = self._user(user)
        start = node if isinstance(node, str) else node.node
        with audit.audited_read(self.engine) as conn:
            lineage.require_visible(conn, start, user, "view lineage")
            return lineage.walk(conn, start, direction, depth, access.viewer(conn, user))

    # -- retention, garbage collection, audit, counts --------------------------------
    def apply_retention(
        self,
        policy: RetentionPolicy,
        now: float | None = None,
        dry_run: bool = True,
        user: str | None = None,
    ) -> RetentionPlan:
        """Plan retention over the projects you ADMIN; unless `dry_run`, carry out that plan.
        Deleting removes artifact rows (their lineage edges stay, see `maintenance`); the
        bytes are freed by `gc`, because a blob may be shared by several rows."""
        user = self._user(user)
        now = time.time() if now is None else now
        if policy.cold_root:
            maintenance.check_cold_root(policy.cold_root, self.artifact_root)
        with audit.audited_read(self.engine) as conn:
            pids = access.visible_project_ids(conn, user, Level.ADMIN)
            plan = plan_retention(policy, maintenance.artifact_records(conn, pids), now)
        return plan if dry_run else maintenance.execute_plan(self.engine, plan, user)

    def gc(
        self,
        grace_seconds: float = 3600.0,
        dry_run: bool = False,
        extra_roots: Sequence[str] = (),
        user: str | None = None,
        stale_upload_seconds: float = 3600.0,
    ) -> GcReport:
        """Delete blobs no artifact row references, older than the grace period; needs store
        ADMIN (blobs are shared across projects). Uploads in flight are safe at any grace
        (`uploads`); pending records and ``tmp/`` files older than `stale_upload_seconds`
        (dead writers) are removed."""
        user = self._user(user)
        with audit.audited_read(self.engine, "collecting garbage") as conn:
            access.require_store_admin(conn, user, "garbage-collect blobs")
        return maintenance.collect_garbage(
            self.engine,
            self.blobs,
            grace_seconds,
            dry_run,
            extra_roots,
            user,
            stale_upload_seconds,
        )

    def audit_log(
        self, project: str | None, limit: int = 100, user: str | None = None
    ) -> list[dict]:
        """The latest audit records of `project` (needs ADMIN), or with None the store-wide ones
        (gc, counts, teams; needs store ADMIN)."""
        user = self._user(user)
        with audit.audited_read(self.engine) as conn:
            if project is None:
                access.require_store_admin(conn, user, "read the store's audit log")
            else:
                access.require(conn, project, user, Level.ADMIN, "read the audit log")
            return audit.latest(conn, project, limit)

    def count(self, table: str, user: str | None = None) -> int:
        """Row count of one schema table, over every project: needs store ADMIN (as `gc`)."""
        t = reading.schema_table(table)
        with audit.audited_read(self.engine) as conn:
            access.require_store_admin(conn, self._user(user), f"count rows of {table}")
            return reading.count_rows(conn, t)
