"""Access control: four ordered levels per project, granted to users or to teams.

Contract: `effective_level(conn, project_id, user)` is the highest level granted to the
user directly or through any team they belong to (0 when none); `require(...)`,
`require_run(...)` and `require_artifact(...)` raise `PermissionDenied` (or, for an id the
caller may not see, `NotFoundOrDenied`) and are called inside the transaction that then
reads or writes, so a check and its write see the same grants; `create_project` (which
makes its creator ADMIN), `set_grant` and `add_member` are the only writers of projects,
grants and teams; `searched_project_ids(...)` checks which projects a search covers. The
SQL of projects, principals, teams and grants is all here; the decision of who may call
these writers is the store's: `StoreAccess`, mixed into `TrackingStore`, holds the store's
methods over them (`create_project`, `add_to_team`, `grant`, `set_store_admin`, `level`),
each of which checks first, in an audited transaction (`audit`).

Design decisions:
- Levels are ordered, each implying the ones below it:
  ``VIEW`` (see runs, params, metrics, tags, lineage) < ``READ_ARTIFACTS`` (also download
  artifact bytes) < ``WRITE`` (create runs, log) < ``ADMIN`` (grant, apply retention).
  Separating VIEW from READ_ARTIFACTS is the point of the chapter: metadata is cheap to
  share, checkpoints and datasets may be licensed, private or just expensive to egress.
- Teams are principals too; a user's level is the max over their own grants and their
  teams'. One SQL query computes it.
- Whoever creates a project becomes its ADMIN. Store-wide operations (garbage collection,
  row counts, the store's audit log, creating teams and adding members) need a *store
  ADMIN*: the store's first user (the bootstrap, as the first account of a fresh Grafana
  or Gitea), and whoever a store ADMIN names with `set_store_admin`.
- A write re-reads the run's project from the database inside its own transaction
  (`require_run`): the `Run` handle's project name and user are never trusted, so a
  handle built by hand for another project's run id is refused, and so is a run whose
  WRITE grant was revoked while it was open.
- Ids the caller may not see (runs, artifacts, lineage nodes) get one answer,
  `NotFoundOrDenied`, whether they exist or not; a project *name* the caller gives gets
  `PermissionDenied` whether it exists or not. Neither tells an outsider what exists.

No name squatting. A team passes every grant it holds on to its members, so whoever could
create a team under a name that a grant will later use would capture that grant; and a
user whose name is taken by a team cannot act at all (a user must be of kind "user").
Hence: (1) only a store ADMIN creates teams and adds members (an ordinary user can no
longer create team "bob" before bob arrives, nor add themselves to a team);
(2) a team is never created under a name already used by a user (`ensure_principal`
refuses the wrong kind); (3) `set_grant` never creates a team: granting to an unknown name
registers it as a *user*, which captures nothing, because a user principal gives its
rights only to whoever acts under that very name; with ``kind="team"`` an unknown name is
refused, and a name of the other kind than the one asked for is refused; revoking (NONE)
from an unknown name is a no-op. Names belong to identities: with the tracking server
identities come from tokens; through this in-process API the caller's
``user=`` is trusted, which is why direct database access is for admins and notebooks.

Caveat: enforcement lives in the store's API. In production the artifact bucket must also
refuse direct reads (bucket policy / IAM), with the store handing out short-lived
pre-signed URLs; here the artifact layer is reachable only through `open_artifact`, and a
user without READ_ARTIFACTS is not even shown the blob URI.
"""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    CompoundSelect,
    Connection,
    Engine,
    Row,
    bindparam,
    delete,
    func,
    select,
    union_all,
    update,
)

from mlinfra_lab.tracking import audit, bounds
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.errors import NotFound, NotFoundOrDenied, PermissionDenied, TrackingError
from mlinfra_lab.tracking.writing import insert_ignoring_conflicts

__all__ = [
    "Level",
    "StoreAccess",
    "add_member",
    "create_project",
    "effective_level",
    "ensure_principal",
    "find_project",
    "is_store_admin",
    "project_id",
    "require",
    "require_artifact",
    "require_run",
    "require_store_admin",
    "searched_project_ids",
    "set_grant",
    "set_store_admin",
    "viewer",
    "visible_project_ids",
]


class Level(enum.IntEnum):
    """Grant levels, ordered: each implies the ones below."""

    NONE = 0
    VIEW = 1
    READ_ARTIFACTS = 2
    WRITE = 3
    ADMIN = 4

    @classmethod
    def parse(cls, value: Level | str | int) -> Level:
        if isinstance(value, Level):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[str(value).strip().upper().replace("-", "_")]
        except KeyError:
            names = ", ".join(lv.name for lv in cls if lv)
            raise TrackingError(f"unknown access level {value!r}; use one of {names}") from None


def ensure_principal(conn: Connection, name: str, kind: str = "user") -> int:
    """Id of principal `name`, created as a `kind` ("user" or "team") when missing."""
    bounds.text("a principal name", name, bounds.column_chars("principals", "name"))
    p = S.principals
    find = select(p.c.id, p.c.kind).where(p.c.name == name)
    row = conn.execute(find).first()
    if row is None:  # another process may be adding the same name right now: one insert wins
        conn.execute(insert_ignoring_conflicts(conn.dialect.name, p).values(name=name, kind=kind))
        row = conn.execute(find).first()
        assert row is not None, f"principal {name!r} missing after its insert"
    if row.kind != kind:
        raise TrackingError(f"{name!r} is a {row.kind}, not a {kind}")
    return row.id


def _principal_ids(user: str | BindParameter[str]) -> CompoundSelect:
    """Subquery: the user's own principal id and the ids of the teams they belong to."""
    p, tm = S.principals, S.team_members
    own = select(p.c.id).where(p.c.name == user)
    teams = select(tm.c.team_id).join(p, p.c.id == tm.c.user_id).where(p.c.name == user)
    return union_all(own, teams)


@functools.cache
def _statements() -> dict[str, Any]:
    """The access queries, built once with bound parameters (they run on every call)."""
    ids = _principal_ids(bindparam("user")).subquery()
    level = select(func.max(S.grants.c.level)).where(
        S.grants.c.project_id == bindparam("pid"), S.grants.c.principal_id.in_(select(ids.c[0]))
    )
    project = select(S.projects.c.id).where(S.projects.c.name == bindparam("name"))
    return {"level": level, "project": project}


def effective_level(conn: Connection, project_id: int, user: str) -> Level:
    """Highest level `user` holds on the project, directly or through a team (NONE if none)."""
    return Level(
        conn.execute(_statements()["level"], {"pid": project_id, "user": user}).scalar() or 0
    )


def visible_project_ids(conn: Connection, user: str, at_least: Level = Level.VIEW) -> list[int]:
    """Ids of every project where `user` holds `at_least` the given level."""
    ids = _principal_ids(user).subquery()
    q = (
        select(S.grants.c.project_id)
        .where(S.grants.c.principal_id.in_(select(ids.c[0])))
        .group_by(S.grants.c.project_id)
        .having(func.max(S.grants.c.level) >= int(at_least))
    )
    return [r[0] for r in conn.execute(q)]


def searched_project_ids(
    conn: Connection, project: str | Sequence[str] | None, user: str
) -> list[int]:
    """Ids of the projects a search covers: those named (each needs VIEW), or with None all
    that `user` may VIEW."""
    if project is None:
        return visible_project_ids(conn, user)
    projects = [project] if isinstance(project, str) else list(project)
    return [require(conn, p, user, Level.VIEW, "search runs") for p in projects]


def viewer(conn: Connection, user: str) -> Callable[[int], bool]:
    """``visible(project_id)``: whether `user` may VIEW that project, each project read once."""
    levels: dict[int, bool] = {}

    def visible(pid: int) -> bool:
        if pid not in levels:
            levels[pid] = effective_level(conn, pid, user) >= Level.VIEW
        return levels[pid]

    return visible


def _project_name(name: str) -> str:
    """`name` if a project could be called that (`bounds.text`: `InvalidInput` otherwise)."""
    return bounds.text("a project name", name, bounds.column_chars("projects", "name"))


def find_project(conn: Connection, name: str) -> int | None:
    """Id of project `name`, or None when there is none (no access check: the caller's)."""
    _project_name(name)
    return conn.execute(select(S.projects.c.id).where(S.projects.c.name == name)).scalar()


def create_project(conn: Connection, name: str, creator: str) -> int | None:
    """Insert project `name` with `creator` as its ADMIN; its id, or None when it exists
    (a concurrent transaction may have created it since the caller looked)."""
    ins = insert_ignoring_conflicts(conn.dialect.name, S.projects)
    pid = conn.execute(
        ins.values(name=name, created_at=time.time()).returning(S.projects.c.id)
    ).scalar()
    if pid is not None:
        uid = ensure_principal(conn, creator)
        conn.execute(
            S.grants.insert().values(project_id=pid, principal_id=uid, level=int(Level.ADMIN))
        )
    return pid


def project_id(conn: Connection, project: str) -> int:
    """Id of project `project`; `NotFound` when there is none."""
    pid = find_project(conn, project)
    if pid is None:
        raise NotFound(f"no project named {project!r}; create it with start_run or create_project")
    return pid


def require(conn: Connection, project: str, user: str, needed: Level, action: str) -> int:
    """Project id if `user` holds `needed` on `project`, else raise `PermissionDenied`.

    A project that does not exist is reported as missing a grant too, so that probing
    names tells an outsider nothing.
    """
    pid = conn.execute(_statements()["project"], {"name": _project_name(project)}).scalar()
    if pid is None or effective_level(conn, pid, user) < needed:
        raise PermissionDenied(user, project, needed.name, action)
    return pid


def _require_in(
    conn: Connection, found: Row | None, target: str, user: str, needed: Level, action: str
) -> Row:
    """`found` (a row with project_id and project) if `user` holds `needed` there; else raise."""
    level = Level.NONE if found is None else effective_level(conn, found.project_id, user)
    if found is None or level < Level.VIEW:  # missing, or invisible: the same answer
        raise NotFoundOrDenied(
            user, target, action, audit_project=None if found is None else found.project
        )
    if level < needed:
        raise PermissionDenied(user, found.project, needed.name, action)
    return found


def require_run(conn: Connection, run_id: int, user: str, needed: Level, action: str) -> Row:
    """Row (project_id, project) of run `run_id`, read in `conn`'s transaction, if `user` holds `needed`.

    Raises `NotFoundOrDenied` when the run does not exist or its project is invisible to
    `user`, `PermissionDenied` when `user` sees it but lacks `needed`.
    """
    r, p = S.runs, S.projects
    bounds.ident("run", run_id)
    found = conn.execute(
        select(r.c.project_id, p.c.name.label("project"))
        .join(p, p.c.id == r.c.project_id)
        .where(r.c.id == run_id)
    ).first()
    return _require_in(conn, found, f"run:{run_id}", user, needed, action)


def require_artifact(
    conn: Connection, artifact_id: int, user: str, needed: Level, action: str
) -> Row:
    """Row (uri, sha256, run_id, project_id, project) of an artifact if `user` holds `needed`."""
    a, r, p = S.artifacts, S.runs, S.projects
    bounds.ident("artifact", artifact_id)
    found = conn.execute(
        select(a.c.uri, a.c.sha256, a.c.run_id, r.c.project_id, p.c.name.label("project"))
        .join(r, r.c.id == a.c.run_id)
        .join(p, p.c.id == r.c.project_id)
        .where(a.c.id == artifact_id)
    ).first()
    return _require_in(conn, found, f"artifact:{artifact_id}", user, needed, action)


def is_store_admin(conn: Connection, user: str) -> bool:
    """True for a store ADMIN: the store's first user, or a user flagged by `set_store_admin`.

    In a store with no user yet, anyone (the first user is about to be registered).
    """
    p = S.principals
    first = select(func.min(p.c.id)).where(p.c.kind == "user").scalar_subquery()
    row = conn.execute(
        select(p.c.id, p.c.store_admin, first.label("first")).where(
            p.c.name == user, p.c.kind == "user"
        )
    ).first()
    if row is None:
        return conn.execute(select(first)).scalar() is None
    return bool(row.store_admin) or row.id == row.first


def require_store_admin(conn: Connection, user: str, action: str, scope: str = "store") -> None:
    """Raise `PermissionDenied` (scope `scope`) unless `user` is a store ADMIN."""
    if not is_store_admin(conn, user):
        raise PermissionDenied(user, "*", "store ADMIN", action, scope=scope)


def set_store_admin(conn: Connection, principal: str, admin: bool) -> None:
    """Make user `principal` a store ADMIN (or not); the caller has checked that a store ADMIN
    asks (`require_store_admin`)."""
    pid = conn.execute(
        select(S.principals.c.id).where(
            S.principals.c.name == principal, S.principals.c.kind == "user"
        )
    ).scalar()
    if pid is None:
        raise NotFound(
            f"no user named {principal!r}; a user is registered by a grant or by their first project"
        )
    conn.execute(update(S.principals).where(S.principals.c.id == pid).values(store_admin=admin))


def add_member(conn: Connection, team: str, member: str) -> None:
    """Add user `member` to `team` (created if new); the caller has checked that a store ADMIN
    asks (`require_store_admin`, scope ``team:TEAM``)."""
    tid = ensure_principal(conn, team, "team")  # refuses a name that is a user's
    mid = ensure_principal(conn, member, "user")  # refuses a team as a member
    conn.execute(
        insert_ignoring_conflicts(conn.dialect.name, S.team_members).values(
            team_id=tid, user_id=mid
        )
    )


def set_grant(
    conn: Connection, project_id: int, principal: str, level: Level, kind: str | None = None
) -> bool:
    """Give `principal` `level` on the project (NONE revokes); False when there was nothing to do.

    An unknown name is registered as a user (never as a team), unless ``kind="team"``,
    which refuses it; a name of another kind than `kind` is refused.
    """
    if kind not in (None, "user", "team"):
        raise TrackingError(f"kind must be 'user', 'team' or None, got {kind!r}")
    p = S.principals
    bounds.text("a principal name", principal, bounds.column_chars("principals", "name"))
    row = conn.execute(select(p.c.id, p.c.kind).where(p.c.name == principal)).first()
    if row is None:
        if level == Level.NONE:
            return False  # nothing to revoke
        if kind == "team":
            raise NotFound(
                f"no team named {principal!r}; a store ADMIN creates it with add_to_team"
            )
        prid = ensure_principal(conn, principal, "user")
    elif kind is not None and row.kind != kind:
        raise TrackingError(f"{principal!r} is a {row.kind}, not a {kind}; check the name")
    else:
        prid = row.id
    g = S.grants
    conn.execute(delete(g).where(g.c.project_id == project_id, g.c.principal_id == prid))
    if level > Level.NONE:
        conn.execute(g.insert().values(project_id=project_id, principal_id=prid, level=int(level)))
    return True


class StoreAccess:
    """`TrackingStore`'s methods on projects, teams and grants (a mixin; see the module doc).

    Each opens an audited transaction, checks there who may call (`require*`), then calls
    this module's function of the same name (a method's own name is not in scope in its body).
    """

    engine: Engine
    default_user: str

    def _user(self, user: str | None) -> str:
        """Who a call acts as: `user`, or the store's `default_user` when None."""
        return user or self.default_user

    def create_project(self, name: str, user: str | None = None) -> int:
        """Create project `name` (its creator becomes ADMIN); return its id. Idempotent."""
        user = self._user(user)
        with audit.audited_write(self.engine) as conn:
            if find_project(conn, name) is None:
                pid = create_project(conn, name, user)  # None: another was quicker
                if pid is not None:
                    audit.record(conn, user, "create_project", name, None, True)
                    return pid
            return require(conn, name, user, Level.VIEW, "see")  # it exists: need VIEW

    def add_to_team(self, team: str, member: str, user: str | None = None) -> None:
        """Add user `member` to `team` (created if new); needs store ADMIN (see `access`)."""
        user = self._user(user)
        with audit.audited_write(self.engine) as conn:
            require_store_admin(conn, user, f"add members to team {team!r}", scope=f"team:{team}")
            add_member(conn, team, member)
            audit.record(conn, user, "add_to_team", None, f"team:{team}+{member}", True)

    def grant(
        self,
        project: str,
        principal: str,
        level: Level | str,
        user: str | None = None,
        kind: str | None = None,
    ) -> None:
        """Give `principal` `level` on `project` (NONE revokes); needs ADMIN. `principal` is a
        user, a team, or a new name, which becomes a user (never a team; see `access` on name
        squatting); ``kind="user"``/``"team"`` refuses the other kind, ``"team"`` a new name."""
        user, level = self._user(user), Level.parse(level)
        with audit.audited_write(self.engine) as conn:
            pid = require(conn, project, user, Level.ADMIN, "grant access")
            set_grant(conn, pid, principal, level, kind)
            audit.record(conn, user, f"grant {level.name}", project, principal, True)

    def set_store_admin(self, principal: str, admin: bool = True, user: str | None = None) -> None:
        """Make user `principal` a store ADMIN (gc, counts, teams) or not; needs store ADMIN."""
        user = self._user(user)
        with audit.audited_write(self.engine) as conn:
            require_store_admin(conn, user, f"make {principal!r} a store ADMIN")
            set_store_admin(conn, principal, admin)
            audit.record(conn, user, f"store admin {admin}", None, principal, True)

    def level(self, project: str, user: str | None = None, principal: str | None = None) -> Level:
        """The effective level of the caller (or of `principal`) on `project`; NONE if none.
        Your own needs no grant (NONE also where no project); another's needs ADMIN."""
        user = self._user(user)
        with audit.audited_read(self.engine) as conn:
            if principal is not None and principal != user:
                require(conn, project, user, Level.ADMIN, f"see the level of {principal}")
            pid = find_project(conn, project)
            return effective_level(conn, pid, principal or user) if pid else Level.NONE
