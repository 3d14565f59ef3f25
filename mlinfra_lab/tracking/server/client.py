"""`TrackingClient(url, token)`: the `TrackingStore` API, through the tracking server.

Contract: a `TrackingClient` has the store's public methods with the same arguments,
return types and exceptions (`start_run` returns a `RemoteRun` with `Run`'s methods), so
code written against a store runs against a server by changing how it is opened;
`connect(url, token)` opens either from a URL (``http(s)://`` -> client, else a store).
Every call acts as the token's user (`user`, learned from the server when the client
opens, which also checks the token).

Design decisions:
- ``user=`` is accepted where the store takes it, so the same code runs on both, but may
  only name the token's own user: naming anyone else raises `IdentityError` before any
  request is sent (and the server would refuse it anyway: it acts as the token's user).
- Errors come back as the store's classes with the store's messages (`wire`): code that
  catches `PermissionDenied`, `NotFoundOrDenied` or `QueryError` works unchanged; a bad,
  absent or revoked token raises `AuthenticationError`, a server that cannot be reached
  `ServerUnavailable`.
- One HTTP/1.1 connection kept alive (httpx); artifact bodies are streamed both ways in
  `CHUNK` pieces, and a download lands in an unnamed temporary file, as with the store
  without a cache, checked against the length the server announced.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO

import httpx

from mlinfra_lab.tracking.access import Level
from mlinfra_lab.tracking.api import HasNode
from mlinfra_lab.tracking.artifacts import CHUNK
from mlinfra_lab.tracking.errors import IdentityError, ServerUnavailable, TrackingError
from mlinfra_lab.tracking.lineage import LineageGraph
from mlinfra_lab.tracking.records import ArtifactInfo, DatasetRef, GcReport, RunInfo
from mlinfra_lab.tracking.retention import RetentionPlan, RetentionPolicy
from mlinfra_lab.tracking.server import wire
from mlinfra_lab.tracking.server.remote_run import RemoteRun

__all__ = ["TOKEN_ENV", "TrackingClient", "connect"]

TOKEN_ENV = "MLINFRA_TRACKING_TOKEN"


def _node(node: Any) -> str:
    return node if isinstance(node, str) else node.node


class TrackingClient:
    """The tracking store's API over HTTP, as the user of one bearer token."""

    def __init__(
        self, url: str, token: str | None = None, batch_size: int = 1000, timeout_s: float = 60.0
    ) -> None:
        token = token or os.environ.get(TOKEN_ENV)
        if not token:
            raise TrackingError(
                f"TrackingClient({url!r}) needs a token: pass token=, or set ${TOKEN_ENV}; "
                "a store ADMIN creates one with: mlinfra-lab track token create USER"
            )
        self.url, self.batch_size = url.rstrip("/"), batch_size
        self._http = httpx.Client(
            base_url=self.url + "/api",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
        )
        try:
            self.user: str = self.request("GET", "/whoami")["user"]
        except BaseException:
            self._http.close()
            raise

    @property
    def default_user(self) -> str:  # as `TrackingStore.default_user`: who the calls act as
        return self.user

    def __repr__(self) -> str:
        return f"TrackingClient(url={self.url!r}, user={self.user!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TrackingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one way a request is sent -------------------------------------------------
    def _as(self, user: str | None) -> None:
        if user is not None and user != self.user:
            raise IdentityError(user, self.user)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict | None = None,
        content: Any = None,
    ) -> Any:
        """Send one request to the server's API (`path` under ``/api``); its JSON answer, or the
        store's exception rebuilt from the error. The one way the client and its runs talk."""
        try:
            r = self._http.request(method, path, json=body, params=params, content=content)
        except httpx.TransportError as err:
            raise ServerUnavailable(
                f"no answer from the tracking server at {self.url} ({type(err).__name__}: "
                f"{err}); is `mlinfra-lab track serve` running there? Nothing "
                "buffered was dropped: retry the call"
            ) from None
        if r.status_code >= 400:
            raise self._error(r)
        return r.json()

    @staticmethod
    def _error(r: httpx.Response) -> TrackingError:
        try:
            body = r.json()
        except ValueError:
            body = r.text
        return wire.error_from_payload(r.status_code, body)

    # -- projects, teams, grants -------------------------------------------------------
    def create_project(self, name: str, user: str | None = None) -> int:
        self._as(user)
        return self.request("POST", "/projects", {"name": name})["id"]

    def add_to_team(self, team: str, member: str, user: str | None = None) -> None:
        self._as(user)
        self.request("POST", "/teams", {"team": team, "member": member})

    def grant(
        self,
        project: str,
        principal: str,
        level: Level | str,
        user: str | None = None,
        kind: str | None = None,
    ) -> None:
        self._as(user)
        self.request(
            "POST",
            "/grants",
            {
                "project": project,
                "principal": principal,
                "level": Level.parse(level).name,
                "kind": kind,
            },
        )

    def set_store_admin(self, principal: str, admin: bool = True, user: str | None = None) -> None:
        self._as(user)
        self.request("POST", "/store-admins", {"principal": principal, "admin": admin})

    def level(self, project: str, user: str | None = None, principal: str | None = None) -> Level:
        self._as(user)
        params = {"project": project} | ({"principal": principal} if principal is not None else {})
        return Level[self.request("GET", "/level", params=params)["level"]]

    # -- datasets and runs -------------------------------------------------------------
    def register_dataset(
        self,
        project: str,
        name: str,
        version: str,
        uri: str,
        sha256: str | None = None,
        user: str | None = None,
    ) -> DatasetRef:
        self._as(user)
        return wire.dataset_ref(
            self.request(
                "POST",
                "/datasets",
                {
                    "project": project,
                    "name": name,
                    "version": version,
                    "uri": uri,
                    "sha256": sha256,
                },
            )
        )

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
    ) -> RemoteRun:
        self._as(user)
        out = self.request(
            "POST",
            "/runs",
            {
                "project": project,
                "name": name,
                "params": wire.key_values(params),
                "tags": wire.key_values(tags),
                "code_commit": code_commit,
                "inputs": [_node(i) for i in inputs],
                "start_time": start_time,
            },
        )
        return RemoteRun(self, out["id"], out["project"], out["name"], out["user"], self.batch_size)

    def get_run(self, run_id: int, user: str | None = None) -> RunInfo:
        self._as(user)
        return wire.run_info(self.request("GET", f"/runs/{int(run_id)}"))

    def metric_history(
        self, run_id: int, key: str, user: str | None = None
    ) -> list[tuple[int, float]]:
        self._as(user)
        return [
            tuple(p)
            for p in self.request("GET", f"/runs/{int(run_id)}/metric-history", params={"key": key})
        ]

    def search_runs(
        self,
        project: str | Sequence[str] | None,
        filter: str | None = None,
        order_by: str | None = None,
        limit: int = 100,
        user: str | None = None,
    ) -> list[RunInfo]:
        self._as(user)
        project = project if project is None or isinstance(project, str) else list(project)
        body = {"project": project, "filter": filter, "order_by": order_by, "limit": limit}
        return [wire.run_info(r) for r in self.request("POST", "/runs/search", body)]

    def explain_search(
        self,
        project: str | Sequence[str] | None,
        filter: str | None = None,
        order_by: str | None = None,
        user: str | None = None,
    ) -> list[str]:
        self._as(user)
        return self.request(
            "POST", "/runs/explain", {"project": project, "filter": filter, "order_by": order_by}
        )

    # -- artifacts and lineage -----------------------------------------------------------
    def list_artifacts(self, run_id: int, user: str | None = None) -> list[ArtifactInfo]:
        self._as(user)
        return [
            wire.artifact_info(a) for a in self.request("GET", f"/runs/{int(run_id)}/artifacts")
        ]

    def open_artifact(self, artifact_id: int, user: str | None = None) -> BinaryIO:
        """An open binary file of the artifact's bytes (verified by the server, length checked here)."""
        self._as(user)
        out = tempfile.TemporaryFile()  # noqa: SIM115 (handed to the caller, who closes it)
        try:
            with self._http.stream("GET", f"/artifacts/{int(artifact_id)}/content") as r:
                if r.status_code >= 400:
                    r.read()
                    raise self._error(r)
                for chunk in r.iter_bytes(CHUNK):
                    out.write(chunk)
                expected = r.headers.get("content-length")
            if expected is not None and out.tell() != int(expected):
                raise ServerUnavailable(
                    f"artifact {artifact_id}: {out.tell()} of {expected} bytes arrived; "
                    "the connection was cut, download it again"
                )
        except httpx.TransportError as err:
            out.close()
            raise ServerUnavailable(
                f"artifact {artifact_id}: the download from {self.url} failed "
                f"({type(err).__name__}); download it again"
            ) from None
        except BaseException:
            out.close()
            raise
        out.seek(0)
        return out

    def read_artifact(self, artifact_id: int, user: str | None = None) -> bytes:
        with self.open_artifact(artifact_id, user) as f:
            return f.read()

    def pin_artifact(self, artifact_id: int, pinned: bool = True, user: str | None = None) -> None:
        self._as(user)
        self.request("POST", f"/artifacts/{int(artifact_id)}/pin", {"pinned": pinned})

    def cache_stats(self) -> None:  # the server's cache is the server's business
        return None

    def lineage(
        self,
        node: str | HasNode,
        direction: str = "forward",
        depth: int | None = None,
        user: str | None = None,
    ) -> LineageGraph:
        self._as(user)
        params = {"node": _node(node), "direction": direction} | (
            {"depth": depth} if depth is not None else {}
        )
        return wire.lineage_graph(self.request("GET", "/lineage", params=params))

    # -- retention, garbage collection, audit, counts ------------------------------------
    def apply_retention(
        self,
        policy: RetentionPolicy,
        now: float | None = None,
        dry_run: bool = True,
        user: str | None = None,
    ) -> RetentionPlan:
        self._as(user)
        body = {"policy": policy.as_dict(), "now": now, "dry_run": dry_run}
        return wire.retention_plan(self.request("POST", "/retention", body))

    def gc(
        self,
        grace_seconds: float = 3600.0,
        dry_run: bool = False,
        extra_roots: Sequence[str] = (),
        user: str | None = None,
        stale_upload_seconds: float = 3600.0,
    ) -> GcReport:
        self._as(user)
        body = {
            "grace_seconds": grace_seconds,
            "dry_run": dry_run,
            "extra_roots": list(extra_roots),
            "stale_upload_seconds": stale_upload_seconds,
        }
        return wire.gc_report(self.request("POST", "/gc", body))

    def audit_log(
        self, project: str | None, limit: int = 100, user: str | None = None
    ) -> list[dict]:
        self._as(user)
        params = {"limit": limit} | ({"project": project} if project is not None else {})
        return self.request("GET", "/audit", params=params)

    def count(self, table: str, user: str | None = None) -> int:
        self._as(user)
        return self.request("GET", f"/count/{table}")["count"]


def connect(url: str, token: str | None = None, **store_kwargs: Any):  # noqa: ANN201 (a store or a client)
    """A `TrackingClient` for an ``http(s)://`` URL (token: `token` or ``$MLINFRA_TRACKING_TOKEN``),
    else a `TrackingStore` on database URL `url` (direct access: trusted, for admins and notebooks)."""
    if url.startswith(("http://", "https://")):
        return TrackingClient(url, token, **store_kwargs)
    from mlinfra_lab.tracking.store import TrackingStore

    return TrackingStore(url, **store_kwargs)
