"""Bearer tokens of the tracking server: created by a store ADMIN, stored hashed, revocable.

Contract: `create_token(engine, user, by)` makes a new token for user `user` and returns it
once (`IssuedToken.secret`; only its sha256 is stored); `authenticate(conn, secret)` is the
name of the user a valid token belongs to, or None for an unknown, malformed or revoked
one; `revoke_token(engine, token_id, by)` ends a token at once (the server checks every
request, so the next one is refused); `list_tokens(engine, by)` shows ids and owners, never
secrets. Creating, revoking and listing need a store ADMIN, and are audited store-wide.

Design decisions:
- A token is ``mlt_`` + 32 random bytes from `secrets.token_urlsafe` (256 bits): far too
  many to guess, so a fast hash is enough (a password needs a slow one because people pick
  guessable ones). The database keeps the sha256 hex digest, unique and indexed, so a
  lookup is one index probe and a copy of the database (a backup, a leaked dump) holds no
  usable token. The prefix makes a leaked token easy to find in logs and by secret scanners.
- A token belongs to a *user* principal (`access.ensure_principal(..., "user")`): a team
  name is refused, and a new name is registered as a user, exactly as a grant would.
  Its identity is the user's name, so every grant and team membership applies unchanged.
- Revocation sets `revoked_at` (the row stays, for the audit trail); `authenticate` reads
  the row on every request, so there is no cache to outlive a revocation.
- These functions are the admins' path (direct database access, fully trusted, as the
  command line's ``mlinfra-lab track token ...``); the server exposes none of them.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select, update

from mlinfra_lab.tracking import access, audit
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.errors import NotFound, TrackingError

__all__ = [
    "PREFIX",
    "IssuedToken",
    "TokenInfo",
    "authenticate",
    "create_token",
    "digest",
    "list_tokens",
    "revoke_token",
]

PREFIX = "mlt_"
_MAX_SECRET = 200  # a longer string is not one of our tokens: refused before hashing


@dataclass(frozen=True)
class IssuedToken:
    id: int
    user: str
    secret: str  # shown once: only its sha256 is stored

    def __repr__(self) -> str:  # never print the secret by accident
        return f"IssuedToken(id={self.id}, user={self.user!r}, secret='{self.secret[:8]}...')"


@dataclass(frozen=True)
class TokenInfo:
    id: int
    user: str
    note: str | None
    created_at: float
    created_by: str
    revoked_at: float | None


def digest(secret: str) -> str:
    """The sha256 hex digest under which a token is stored."""
    return hashlib.sha256(secret.encode()).hexdigest()


def _check_user(user: str) -> str:
    if not isinstance(user, str) or not user or len(user) > 200 or not user.isprintable():
        raise TrackingError(
            f"a token's user must be a printable name of 1..200 characters, got {user!r}"
        )
    return user


def create_token(engine: Engine, user: str, by: str, note: str | None = None) -> IssuedToken:
    """A new token for user `user` (registered if new; a team is refused); `by` needs store ADMIN."""
    _check_user(user)
    secret = PREFIX + secrets.token_urlsafe(32)
    with audit.audited_write(engine, "creating a token") as conn:
        access.require_store_admin(conn, by, f"create a token for {user!r}")
        # in a new store, the creator is its first user (ADMIN)
        access.ensure_principal(conn, by, "user")
        pid = access.ensure_principal(conn, user, "user")
        ins = S.api_tokens.insert().values(
            principal_id=pid,
            digest=digest(secret),
            note=note and note[:200],
            created_at=time.time(),
            created_by=by[:200],
        )
        tid = conn.execute(ins.returning(S.api_tokens.c.id)).scalar_one()
        audit.record(conn, by, "create token", None, f"token:{tid}:{user}", True)
    return IssuedToken(tid, user, secret)


def revoke_token(engine: Engine, token_id: int, by: str) -> None:
    """Revoke token `token_id` now (its next request is refused); `by` needs store ADMIN."""
    t = S.api_tokens
    with audit.audited_write(engine, "revoking a token") as conn:
        access.require_store_admin(conn, by, f"revoke token {token_id}")
        done = conn.execute(
            update(t)
            .where(t.c.id == int(token_id), t.c.revoked_at.is_(None))
            .values(revoked_at=time.time())
        ).rowcount
        if not done:
            exists = conn.execute(select(t.c.id).where(t.c.id == int(token_id))).first()
            if exists is None:
                raise NotFound(
                    f"no token with id {token_id}; list them with: mlinfra-lab track token list"
                )
        audit.record(conn, by, "revoke token", None, f"token:{token_id}", True)


def list_tokens(engine: Engine, by: str, user: str | None = None) -> list[TokenInfo]:
    """Every token (or `user`'s), oldest first, without secrets; `by` needs store ADMIN."""
    t, p = S.api_tokens, S.principals
    q = select(t.c.id, p.c.name, t.c.note, t.c.created_at, t.c.created_by, t.c.revoked_at)
    q = q.join(p, p.c.id == t.c.principal_id).order_by(t.c.id)
    with audit.audited_read(engine, "listing tokens") as conn:
        access.require_store_admin(conn, by, "list tokens")
        rows = conn.execute(q if user is None else q.where(p.c.name == user)).all()
    return [TokenInfo(*r) for r in rows]


def authenticate(conn: Connection, secret: str | None) -> str | None:
    """The user of a valid token, or None (absent, malformed, unknown or revoked)."""
    if not secret or len(secret) > _MAX_SECRET or not secret.startswith(PREFIX):
        return None
    t, p = S.api_tokens, S.principals
    row = conn.execute(
        select(p.c.name)
        .join(t, t.c.principal_id == p.c.id)
        .where(t.c.digest == digest(secret), t.c.revoked_at.is_(None), p.c.kind == "user")
    ).first()
    return None if row is None else row.name
