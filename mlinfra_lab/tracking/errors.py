"""The exceptions of the tracking store: each names what went wrong and what to do about it.

Contract: every failure a caller can act on is one of these classes (all subclasses of
`TrackingError`), so a notebook or the command line can catch exactly what it expects.

Design decisions:
- `PermissionDenied` carries the missing grant (project, principal, level) as attributes
  and in its message, so the fix (`mlinfra-lab track grant ...`) is obvious.
- `QueryError` carries the character position of the problem and renders the filter with
  a caret under it, the way a compiler points at a syntax error.
- `IntegrityError` is raised when bytes read back do not hash to the recorded sha256: a
  tampered or corrupted blob is never returned silently.
"""

from __future__ import annotations

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "ArtifactNameError",
    "IntegrityError",
    "NotFound",
    "PermissionDenied",
    "QueryError",
    "TrackingError",
]


class TrackingError(MlinfraError):
    """Base class of every error the tracking store raises on purpose."""


class NotFound(TrackingError, LookupError):
    """A project, run, dataset or artifact that does not exist (or that you may not see)."""


class ArtifactNameError(TrackingError, ValueError):
    """An artifact name that could escape the artifact root (``..``, absolute, NUL byte)."""


class IntegrityError(TrackingError):
    """Bytes read from the artifact store do not match the sha256 recorded at upload."""

    def __init__(self, artifact_id: int | None, expected: str, actual: str, where: str):
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

    def __init__(self, principal: str, project: str, needed: str, action: str):
        self.principal, self.project, self.needed, self.action = principal, project, needed, action
        super().__init__(
            f"{principal!r} may not {action} in project {project!r}: needs grant {needed} "
            f"(an ADMIN of the project can run: mlinfra-lab track grant {project} "
            f"{principal} {needed})"
        )


class QueryError(TrackingError, ValueError):
    """A search filter that does not parse; points at the offending character."""

    def __init__(self, message: str, text: str, position: int):
        self.reason, self.text, self.position = message, text, position
        caret = " " * position + "^"
        super().__init__(f"{message} at character {position}:\n  {text}\n  {caret}")
