"""The exceptions of the tracking store: each names what went wrong and what to do about it.

Contract: every failure a caller can act on is one of these classes (all subclasses of
`TrackingError`), so a notebook or the command line can catch exactly what it expects.

Design decisions:
- `PermissionDenied` carries the missing grant (project, principal, level) as attributes
  and in its message, so the fix (`mlinfra-lab track grant ...`) is obvious; its `scope`
  names what was refused (``project:NAME``, ``team:NAME`` or ``store``) for the audit log.
- `NotFoundOrDenied` is the one answer for an id the caller may not see: a run, artifact,
  dataset or lineage node that does not exist and one in a project without a grant raise
  the same class with the same message, which names only the id the caller gave (no
  project), so probing ids tells an outsider nothing. It is both a `NotFound` and a
  `PermissionDenied`, so code that catches either keeps working.
- `QueryError` carries the character position of the problem and renders the filter with
  a caret under it, the way a compiler points at a syntax error.
- `DatabaseError` wraps any driver error that reaches the store's API: a caller catching
  `TrackingError` sees every failure, and no message carries SQL or parameters.
- `InvalidInput` is a value that can never be stored, whatever the state of the store: text
  that is not Unicode (a lone surrogate) or longer than its column, an integer outside the
  32-bit range that ids and steps share on both backends, a non-finite metric. It is a
  client error (HTTP 422), never a `DatabaseError`, whose message says to retry.
- `IntegrityError` is raised when bytes read back do not hash to the recorded sha256: a
  tampered or corrupted blob is never returned silently.
- `AuthenticationError` and `IdentityError` belong to the tracking server (`server`): the
  first for a request without a valid token (absent, unknown and revoked get the same
  answer), the second for a request that names a user itself, which the server refuses
  because its identity is the token's user and nothing else; `ServerUnavailable` is the
  client's, for a server it cannot reach.
"""

from __future__ import annotations

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "ArtifactNameError",
    "AuthenticationError",
    "DatabaseError",
    "IdentityError",
    "IntegrityError",
    "InvalidInput",
    "NotFound",
    "NotFoundOrDenied",
    "PermissionDenied",
    "QueryError",
    "RequestTimeout",
    "RequestTooLarge",
    "ServerUnavailable",
    "TrackingError",
]


class TrackingError(MlinfraError):
    """Base class of every error the tracking store raises on purpose."""


class AuthenticationError(TrackingError):
    """The tracking server found no valid token on the request: absent, unknown or revoked."""

    def __init__(
        self,
        message: str = "no valid token: send 'Authorization: Bearer <token>' with a token "
        "a store ADMIN created (mlinfra-lab track token create USER); "
        "a revoked token is refused like an unknown one",
    ) -> None:
        super().__init__(message)


class IdentityError(TrackingError, ValueError):
    """A request through the tracking server that names a user: the server acts as the token's user."""

    def __init__(self, named: str, token_user: str | None = None) -> None:
        self.named = named
        who = f" ({token_user!r})" if token_user else ""
        super().__init__(
            f"the request names user {named!r}, but the server acts only as its token's user{who}; "
            "remove the user (or log in with that user's token)"
        )


class RequestTooLarge(TrackingError, ValueError):
    """A request to the tracking server whose body is over its limit, or of unstated length."""


class RequestTimeout(TrackingError, TimeoutError):
    """A request to the tracking server whose body stalled longer than the server waits (HTTP 408)."""


class InvalidInput(TrackingError, ValueError):
    """A value no backend can store (see `bounds`): the same input fails again, so do not retry."""


class ServerUnavailable(TrackingError, ConnectionError):
    """`TrackingClient` could not reach the tracking server, or lost the connection mid-request."""


class NotFound(TrackingError, LookupError):
    """A project, run, dataset or artifact that does not exist (or that you may not see)."""


class ArtifactNameError(TrackingError, ValueError):
    """An artifact name that could escape the artifact root (``..``, absolute, NUL byte)."""


class DatabaseError(TrackingError):
    """The database failed a statement; the message names the operation and the SQLSTATE only.

    Never the SQL or its parameters (they may hold another user's data or the whole of a
    hostile filter); `sqlstate` and `driver_error` (the exception class name) are attributes.
    """

    def __init__(self, what: str, driver_error: str, sqlstate: str | None, wrote: bool) -> None:
        self.what, self.driver_error, self.sqlstate = what, driver_error, sqlstate
        done = "it was rolled back and nothing was written" if wrote else "nothing was changed"
        super().__init__(
            f"the database failed while {what} ({driver_error}, SQLSTATE {sqlstate or 'unknown'}); "
            f"{done}. Retry; if it persists, the server's log has the statement"
        )


class IntegrityError(TrackingError):
    """Bytes read from the artifact store do not match the sha256 recorded at upload."""

    def __init__(self, artifact_id: int | None, expected: str, actual: str, where: str) -> None:
        self.artifact_id, self.expected, self.actual, self.where = (
            artifact_id,
            expected,
            actual,
            where,
        )
        super().__init__(
            f"artifact {artifact_id}: blob {where} hashes to sha256 {actual[:12]}..., "
            f"expected {expected[:12]}...; the blob was modified or corrupted after upload. "
            "Restore it from a backup or re-log the artifact; do not use these bytes."
        )


class PermissionDenied(TrackingError, PermissionError):
    """The principal lacks the grant an operation needs; the message names that grant."""

    # None for a `NotFoundOrDenied`, whose project is kept from the caller.
    project: str | None
    # Set by `audit.record_denial` once the denial is in the audit log (recorded once).
    _audited: bool = False

    def __init__(
        self, principal: str, project: str, needed: str, action: str, scope: str | None = None
    ) -> None:
        self.principal, self.project, self.needed, self.action = principal, project, needed, action
        self.scope = scope or f"project:{project}"
        if self.scope != f"project:{project}":  # a store-wide or team operation
            super().__init__(
                f"{principal!r} may not {action}: needs {needed} ({self.scope}); "
                "ask a store ADMIN (see TrackingStore.set_store_admin)"
            )
            return
        super().__init__(
            f"{principal!r} may not {action} in project {project!r}: needs grant {needed} "
            f"(an ADMIN of the project can run: mlinfra-lab track grant {project} "
            f"{principal} {needed})"
        )


class NotFoundOrDenied(PermissionDenied, NotFound):
    """An id that does not exist or that the caller may not see: the same answer for both.

    `scope` is the id as the caller gave it (``run:12``); the project it belongs to, when it
    exists, is kept out of the message and the public attributes (`project` is None) and is
    handed to the audit log only.
    """

    def __init__(
        self, principal: str, target: str, action: str, audit_project: str | None = None
    ) -> None:
        self.principal, self.project, self.needed, self.action = principal, None, "VIEW", action
        self.scope, self._audit_project = target, audit_project
        Exception.__init__(
            self,
            f"{target} not found, or {principal!r} may not {action} there; check the "
            "id, or ask an ADMIN of its project for a grant",
        )


class QueryError(TrackingError, ValueError):
    """A search filter that does not parse; points at the offending character."""

    def __init__(self, message: str, text: str, position: int) -> None:
        self.reason, self.text, self.position = message, text, position
        start = max(0, position - 60)  # a long filter is shown as a window around the position
        shown = (
            ("..." if start else "")
            + text[start : position + 60]
            + ("..." if len(text) > position + 60 else "")
        )
        caret = " " * (position - start + (3 if start else 0)) + "^"
        super().__init__(f"{message} at character {position}:\n  {shown}\n  {caret}")
