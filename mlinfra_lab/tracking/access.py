"""Access control: four ordered levels per project, granted to users or to teams.

Contract: `effective_level(conn, project_id, user)` is the highest level granted to the
user directly or through any team they belong to (0 when none), and `require(...)` raises
`PermissionDenied` naming the missing grant; the store calls `require` on every read and
write path (runs, metrics, search, lineage, artifacts, retention, grants).

Design decisions:
- Levels are ordered, each implying the ones below it:
  ``VIEW`` (see runs, params, metrics, tags, lineage) < ``READ_ARTIFACTS`` (also download
  artifact bytes) < ``WRITE`` (create runs, log) < ``ADMIN`` (grant, apply retention).
  Separating VIEW from READ_ARTIFACTS is the point of the chapter: metadata is cheap to
  share, checkpoints and datasets may be licensed, private or just expensive to egress.
- Teams are principals too; a user's level is the max over their own grants and their
  teams'. One SQL query computes it.
- Whoever creates a project becomes its ADMIN. Invisible and non-existent projects look
  the same from outside where that matters (search across projects lists only visible
  ones); a direct request for a named project says which grant is missing.
- Denials and grant changes are written to the audit log by the store.

Caveat: enforcement lives in the store's API. In production the artifact bucket must also
refuse direct reads (bucket policy / IAM), with the store handing out short-lived
pre-signed URLs; here the artifact layer is reachable only through `open_artifact`, and a
user without READ_ARTIFACTS is not even shown the blob URI.
"""

from __future__ import annotations

import enum
import functools
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, union_all

from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.errors import NotFound, PermissionDenied, TrackingError
from mlinfra_lab.tracking.writing import insert_ignoring_conflicts

__all__ = ["Level", "effective_level", "ensure_principal", "require", "visible_project_ids"]


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
    if not name or len(name) > 200:
        raise TrackingError(f"principal name must be 1..200 characters, got {name!r}")
    p = S.principals
    find = select(p.c.id, p.c.kind).where(p.c.name == name)
    row = conn.execute(find).first()
    if row is None:  # another process may be adding the same name right now: one insert wins
        conn.execute(insert_ignoring_conflicts(conn.dialect.name, p).values(name=name, kind=kind))
        row = conn.execute(find).first()
    if row.kind != kind:
        raise TrackingError(f"{name!r} is a {row.kind}, not a {kind}")
    return row.id


def _principal_ids(user):  # noqa: ANN001 (a str or a bindparam)
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
    return Level(conn.execute(_statements()["level"], {"pid": project_id, "user": user}).scalar() or 0)


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


def project_id(conn: Connection, project: str) -> int:
    pid = conn.execute(select(S.projects.c.id).where(S.projects.c.name == project)).scalar()
    if pid is None:
        raise NotFound(f"no project named {project!r}; create it with start_run or create_project")
    return pid


def require(conn: Connection, project: str, user: str, needed: Level, action: str) -> int:
    """Project id if `user` holds `needed` on `project`, else raise `PermissionDenied`.

    A project that does not exist is reported as missing a grant too, so that probing
    names tells an outsider nothing.
    """
    pid = conn.execute(_statements()["project"], {"name": project}).scalar()
    if pid is None or effective_level(conn, pid, user) < needed:
        raise PermissionDenied(user, project, needed.name, action)
    return pid
