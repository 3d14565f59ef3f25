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
- The facade checks access and opens transactions; the SQL of each concept lives in its own
  module: schema, db, query and reading (search), writing (params, tags, upserts), access,
  audit, lineage, retention and maintenance, cache, artifacts, run, records.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO

from sqlalchemy import Connection, Select, func, select, update

from mlinfra_lab.tracking import access, audit, lineage, maintenance, reading, writing
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.access import Level
from mlinfra_lab.tracking.artifacts import BlobStore, open_uri, to_url, verified_copy
from mlinfra_lab.tracking.cache import ArtifactCache, CacheStats
from mlinfra_lab.tracking.db import database_errors, make_engine, migrate, write_tx
from mlinfra_lab.tracking.errors import TrackingError
from mlinfra_lab.tracking.records import ArtifactInfo, DatasetRef, GcReport, RunInfo
from mlinfra_lab.tracking.retention import (
    RetentionPlan,
    RetentionPolicy,
    plan_retention,
)
from mlinfra_lab.tracking.run import Run

__all__ = ["ArtifactInfo", "DatasetRef", "GcReport", "RunInfo", "TrackingStore"]


class TrackingStore:
    """Metadata in SQL (SQLite by default, PostgreSQL by URL), artifacts in fsspec storage."""

    def __init__(self, db_url: str = "sqlite:///mlinfra-tracking.db",
                 artifact_root: str = "mlinfra-artifacts", cache_dir: str | os.PathLike | None = None,
                 cache_bytes: int = 1 << 30, default_user: str | None = None,
                 batch_size: int = 1000, migrate_schema: bool = True,
                 search_timeout_s: float = 10.0):  # fmt: skip
        self.db_url, self.artifact_root = db_url, to_url(artifact_root)
        self.engine = make_engine(db_url)
        if migrate_schema:
            migrate(self.engine)
        self.blobs = BlobStore(self.artifact_root)
        self.cache = ArtifactCache(cache_dir, cache_bytes) if cache_dir is not None else None
        self.default_user = default_user or os.environ.get("MLINFRA_USER") or getpass.getuser()
        self.batch_size = batch_size
        self.search_timeout_s = search_timeout_s  # a search running longer is stopped (QueryError)
        self.uncached_reads = 0
        self._known_projects: set[str] = set()

    def __repr__(self) -> str:
        return f"TrackingStore(db_url={self.db_url!r}, artifact_root={self.artifact_root!r})"

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> TrackingStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------------
    def _user(self, user: str | None) -> str:
        return user or self.default_user

    def _audit(self, user: str, action: str, project: str | None, target: str | None,
               allowed: bool, conn: Connection | None = None) -> None:  # fmt: skip
        if conn is not None:
            audit.record(conn, user, action, project, target, allowed)
        else:
            with write_tx(self.engine) as c:
                audit.record(c, user, action, project, target, allowed)

    def _write(self, what: str = "writing") -> contextlib.AbstractContextManager[Connection]:
        """A write transaction; a denial inside it is audited after the rollback."""
        return audit.audited_write(self.engine, what)

    @contextlib.contextmanager
    def _read(self, what: str = "reading") -> Iterator[Connection]:
        """A connection for reading; a denial inside it is audited, a driver error wrapped."""
        with audit.denials_audited(self.engine), database_errors(what), self.engine.connect() as conn:
            yield conn

    def _require(self, conn: Connection, project: str, user: str, level: Level, action: str) -> int:
        return access.require(conn, project, user, level, action)

    # -- projects, teams, grants ---------------------------------------------------
    def create_project(self, name: str, user: str | None = None) -> int:
        """Create project `name` (its creator becomes ADMIN); return its id. Idempotent for its ADMIN."""
        user = self._user(user)
        with self._write() as conn:
            pid = conn.execute(select(S.projects.c.id).where(S.projects.c.name == name)).scalar()
            if pid is not None:
                access.require(conn, name, user, Level.VIEW, "see")
                return pid
            ins = writing.insert_ignoring_conflicts(conn.dialect.name, S.projects)
            pid = conn.execute(ins.values(name=name, created_at=time.time()).returning(S.projects.c.id)).scalar()
            if pid is None:  # created by a concurrent transaction since the check above
                return access.require(conn, name, user, Level.VIEW, "see")
            uid = access.ensure_principal(conn, user)
            conn.execute(S.grants.insert().values(project_id=pid, principal_id=uid, level=int(Level.ADMIN)))
            self._audit(user, "create_project", name, None, True, conn)
        return pid

    def add_to_team(self, team: str, member: str, user: str | None = None) -> None:
        """Add user `member` to `team` (created if new); needs store ADMIN (see `access`)."""
        user = self._user(user)
        with self._write() as conn:
            access.add_member(conn, team, member, user)
            self._audit(user, "add_to_team", None, f"team:{team}+{member}", True, conn)

    def grant(self, project: str, principal: str, level: Level | str, user: str | None = None,
              kind: str | None = None) -> None:  # fmt: skip
        """Give `principal` `level` on `project` (NONE revokes); needs ADMIN.

        `principal` is an existing user or team, or a new name, which becomes a user (never a
        team); ``kind="user"`` or ``"team"`` refuses a name of the other kind, and
        ``kind="team"`` an unknown one. See `access` on name squatting.
        """
        user, level = self._user(user), Level.parse(level)
        with self._write() as conn:
            pid = self._require(conn, project, user, Level.ADMIN, "grant access")
            access.set_grant(conn, pid, principal, level, kind)
            self._audit(user, f"grant {level.name}", project, principal, True, conn)

    def set_store_admin(self, principal: str, admin: bool = True, user: str | None = None) -> None:
        """Make user `principal` a store ADMIN (gc, counts, teams) or not; needs store ADMIN."""
        user = self._user(user)
        with self._write() as conn:
            access.set_store_admin(conn, principal, admin, user)
            self._audit(user, f"store admin {admin}", None, principal, True, conn)

    def level(self, project: str, user: str | None = None, principal: str | None = None) -> Level:
        """The effective level of the caller (or of `principal`) on `project`; NONE if none or no project.

        Your own level needs no grant (it is NONE where you have none, whether the project
        exists or not); asking about another principal needs ADMIN on the project.
        """
        user = self._user(user)
        with self._read() as conn:
            if principal is not None and principal != user:
                self._require(conn, project, user, Level.ADMIN, f"see the level of {principal}")
            pid = conn.execute(select(S.projects.c.id).where(S.projects.c.name == project)).scalar()
            return Level.NONE if pid is None else access.effective_level(conn, pid, principal or user)

    # -- datasets and runs ---------------------------------------------------------
    def register_dataset(self, project: str, name: str, version: str, uri: str,
                         sha256: str | None = None, user: str | None = None) -> DatasetRef:  # fmt: skip
        """Record a dataset version (by reference) so runs can name it as an input; needs WRITE."""
        user = self._user(user)
        d = S.datasets
        with self._write() as conn:
            pid = self._require(conn, project, user, Level.WRITE, "register datasets")
            row = conn.execute(select(d).where(d.c.project_id == pid, d.c.name == name, d.c.version == version)).first()
            if row is None:
                did = conn.execute(d.insert().values(project_id=pid, name=name, version=version, uri=uri,
                                                     sha256=sha256, created_at=time.time())).inserted_primary_key[0]  # fmt: skip
            elif row.uri != uri or (sha256 and row.sha256 != sha256):
                raise TrackingError(f"dataset {name}@{version} already exists with another URI or hash; "
                                    "datasets are immutable: register a new version")  # fmt: skip
            else:
                did = row.id
        return DatasetRef(did, project, name, version, uri, sha256)

    def start_run(self, project: str, name: str | None = None, params: dict | None = None,
                  tags: dict | None = None, code_commit: str | None = None,
                  inputs: Iterable[DatasetRef | ArtifactInfo | str] = (), user: str | None = None,
                  start_time: float | None = None) -> Run:  # fmt: skip
        """Start a run in `project` (created, with you as ADMIN, if new; else needs WRITE)."""
        user = self._user(user)
        if project not in self._known_projects:
            with self.engine.connect() as conn:
                exists = conn.execute(select(S.projects.c.id).where(S.projects.c.name == project)).scalar()
            if exists is None:
                self.create_project(project, user)
            self._known_projects.add(project)  # projects are never deleted through the API
        nodes = [i if isinstance(i, str) else i.node for i in inputs]
        params = params or {}
        name = name or f"run-{uuid.uuid4().hex[:8]}"
        with self._write() as conn:
            pid = self._require(conn, project, user, Level.WRITE, "start runs")
            for n in nodes:  # each input must exist and be visible: one answer for both
                lineage.require_visible(conn, n, user, "use it as an input", allow_deleted=False)
            created = time.time() if start_time is None else float(start_time)
            hot = {col: writing.number(params[k]) for k, col in S.HOT_PARAMS.items() if k in params}
            run_id = conn.execute(S.runs.insert().values(
                project_id=pid, name=name, status="RUNNING", user=user, code_commit=code_commit,
                created_at=created, **hot)).inserted_primary_key[0]  # fmt: skip
            writing.write_params(conn, run_id, params, hot_done=True)
            writing.write_tags(conn, run_id, tags or {})
            edges = [{"src": n, "dst": f"run:{run_id}", "relation": "consumed"} for n in nodes]
            if code_commit:
                edges.append({"src": f"code:{code_commit}", "dst": f"run:{run_id}", "relation": "ran_code"})
            if edges:
                conn.execute(S.lineage_edges.insert(), edges)
        return Run(self, run_id, project, name, user, self.batch_size)

    # -- reading metadata (the SQL is in `reading`) -------------------------------
    def get_run(self, run_id: int, user: str | None = None) -> RunInfo:
        """A run's metadata with its params, latest metrics and tags; needs VIEW."""
        user = self._user(user)
        with self._read() as conn:
            found = access.require_run(conn, run_id, user, Level.VIEW, "view runs")
            rows = conn.execute(select(S.runs).where(S.runs.c.id == run_id)).all()
            return reading.run_infos(conn, rows, {found.project_id: found.project})[0]

    def metric_history(self, run_id: int, key: str, user: str | None = None) -> list[tuple[int, float]]:
        """Every (step, value) point of one metric of one run, by step; needs VIEW."""
        user, m = self._user(user), S.metrics
        with self._read() as conn:
            access.require_run(conn, run_id, user, Level.VIEW, "view metrics")
            q = select(m.c.step, m.c.value).where(m.c.run_id == run_id, m.c.key == key).order_by(m.c.step)
            return [(r[0], r[1]) for r in conn.execute(q)]

    def search_runs(self, project: str | Sequence[str] | None, filter: str | None = None,
                    order_by: str | None = None, limit: int = 100,
                    user: str | None = None) -> list[RunInfo]:  # fmt: skip
        """Runs matching `filter` (see `query`), newest first unless `order_by`; needs VIEW.

        `project` may be a name, a list of names, or None for every project you can view.
        Answered from the indexed tables only; the artifact store is never touched.
        """
        user = self._user(user)
        with self._read() as conn:
            stmt, names = self._search(conn, project, filter, order_by, limit, user)
            with reading.time_bound(conn, self.search_timeout_s, filter):
                rows = conn.execute(stmt).all()
            return reading.run_infos(conn, rows, names)

    def _search(self, conn: Connection, project: str | Sequence[str] | None, filter: str | None,
                order_by: str | None, limit: int, user: str) -> tuple[Select, dict[int, str]]:  # fmt: skip
        """The search statement over the projects `user` may VIEW, and their names by id."""
        if project is None:
            pids = access.visible_project_ids(conn, user)
        else:
            projects = [project] if isinstance(project, str) else list(project)
            pids = [self._require(conn, p, user, Level.VIEW, "search runs") for p in projects]
        names = dict(conn.execute(select(S.projects.c.id, S.projects.c.name).where(S.projects.c.id.in_(pids))).all())
        with reading.time_bound(conn, self.search_timeout_s, filter):  # the planner's counts run here
            return reading.search_statement(conn, pids, filter, order_by, limit), names

    def explain_search(self, project: str, filter: str | None = None, order_by: str | None = None,
                       user: str | None = None) -> list[str]:  # fmt: skip
        """The database's query plan for a search (EXPLAIN QUERY PLAN / EXPLAIN), one line per step."""
        user = self._user(user)
        with self._read() as conn:
            stmt, _ = self._search(conn, project, filter, order_by, 100, user)
            return reading.explain(conn, stmt)

    # -- artifacts -----------------------------------------------------------------
    def list_artifacts(self, run_id: int, user: str | None = None) -> list[ArtifactInfo]:
        """A run's artifacts; needs VIEW, and the URIs are shown only with READ_ARTIFACTS."""
        user, a = self._user(user), S.artifacts
        with self._read() as conn:
            found = access.require_run(conn, run_id, user, Level.VIEW, "list artifacts")
            can_read = access.effective_level(conn, found.project_id, user) >= Level.READ_ARTIFACTS
            rows = conn.execute(select(a).where(a.c.run_id == run_id).order_by(a.c.id)).all()
        return [ArtifactInfo(r.id, r.run_id, r.name, r.kind, r.step, r.sha256, r.size, r.tier, r.pinned,
                             r.uri if can_read else None) for r in rows]  # fmt: skip

    def open_artifact(self, artifact_id: int, user: str | None = None) -> BinaryIO:
        """An open binary file of the artifact's verified bytes; needs READ_ARTIFACTS.

        Reads through the LRU disk cache when the store has one, else into an unnamed
        temporary file; either way in chunks, never the whole blob in memory. Raises `IntegrityError`
        when the bytes do not hash to the sha256 recorded at upload.
        """
        user = self._user(user)
        with self._read() as conn:
            row = access.require_artifact(conn, artifact_id, user, Level.READ_ARTIFACTS, "download artifacts")
        self._audit(user, "download", row.project, f"artifact:{artifact_id}", True)
        if self.cache is None:  # a verified copy in an unnamed temporary file: never the whole blob in memory
            self.uncached_reads += 1
            return verified_copy(row.uri, row.sha256, artifact_id)
        return self.cache.open(row.sha256, lambda: open_uri(row.uri), artifact_id)

    def read_artifact(self, artifact_id: int, user: str | None = None) -> bytes:
        with self.open_artifact(artifact_id, user) as f:
            return f.read()

    def pin_artifact(self, artifact_id: int, pinned: bool = True, user: str | None = None) -> None:
        """Pin (promote) an artifact so retention never touches it; needs WRITE."""
        user, a = self._user(user), S.artifacts
        with self._write() as conn:
            access.require_artifact(conn, artifact_id, user, Level.WRITE, "pin artifacts")
            conn.execute(update(a).where(a.c.id == artifact_id).values(pinned=pinned))

    def cache_stats(self) -> CacheStats | None:
        return None if self.cache is None else self.cache.stats()

    # -- lineage -------------------------------------------------------------------
    def lineage(self, node: str | RunInfo | Run | ArtifactInfo | DatasetRef, direction: str = "forward",
                depth: int | None = None, user: str | None = None) -> lineage.LineageGraph:  # fmt: skip
        """Nodes reachable from `node` forward (what used it) or backward (what made it).

        Needs VIEW on the start node's project; nodes in projects you cannot view are
        left out, and the walk does not pass through them.
        """
        user = self._user(user)
        start = node if isinstance(node, str) else node.node
        with self._read() as conn:
            lineage.require_visible(conn, start, user, "view lineage")
            levels: dict[int, bool] = {}

            def visible(p: int) -> bool:
                if p not in levels:
                    levels[p] = access.effective_level(conn, p, user) >= Level.VIEW
                return levels[p]

            return lineage.walk(conn, start, direction, depth, visible)

    # -- retention and garbage collection -------------------------------------------
    def apply_retention(self, policy: RetentionPolicy, now: float | None = None, dry_run: bool = True,
                        user: str | None = None) -> RetentionPlan:  # fmt: skip
        """Plan retention over the projects you ADMIN; unless `dry_run`, carry out that plan.

        Deleting removes artifact rows (and their lineage edges); the bytes are freed by
        `gc`, because a blob may be shared by several rows. See `maintenance`.
        """
        user = self._user(user)
        now = time.time() if now is None else now
        with self._read() as conn:
            pids = access.visible_project_ids(conn, user, Level.ADMIN)
            plan = plan_retention(policy, maintenance.artifact_records(conn, pids), now)
        return plan if dry_run else maintenance.execute_plan(self.engine, plan, user, audit.record)

    def gc(self, grace_seconds: float = 3600.0, dry_run: bool = False, extra_roots: Sequence[str] = (),
           user: str | None = None, stale_upload_seconds: float = 3600.0) -> GcReport:  # fmt: skip
        """Delete blobs that no artifact row references and that are older than the grace period.

        Needs store ADMIN (blobs are shared across projects by de-duplication). Uploads in
        flight are safe at any grace period (`uploads`); pending-upload records and partial
        uploads in ``tmp/`` older than `stale_upload_seconds` (dead writers) are removed.
        """
        return maintenance.collect_garbage(self.engine, self.blobs, grace_seconds, dry_run,
                                           extra_roots, self._user(user), stale_upload_seconds,
                                           audit.record)  # fmt: skip

    def audit_log(self, project: str | None, limit: int = 100, user: str | None = None) -> list[dict]:
        """The latest audit records of `project` (needs ADMIN), or with None the store-wide ones
        (gc, counts, teams; needs store ADMIN)."""
        user, t = self._user(user), S.audit_log
        with self._read() as conn:
            if project is None:
                access.require_store_admin(conn, user, "read the store's audit log")
            else:
                self._require(conn, project, user, Level.ADMIN, "read the audit log")
            where = t.c.project.is_(None) if project is None else t.c.project == project
            rows = conn.execute(select(t).where(where).order_by(t.c.id.desc()).limit(limit))
            return [dict(r._mapping) for r in rows]

    def count(self, table: str, user: str | None = None) -> int:
        """Row count of one schema table, over every project: needs store ADMIN (as `gc`)."""
        if table not in S.metadata.tables:
            raise TrackingError(f"no table {table!r}; use one of {', '.join(sorted(S.metadata.tables))}")
        with self._read() as conn:
            access.require_store_admin(conn, self._user(user), f"count rows of {table}")
            return conn.execute(select(func.count()).select_from(S.metadata.tables[table])).scalar()
