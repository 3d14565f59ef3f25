"""A run logged through the tracking server: the `Run` API, metrics buffered and sent in batches.

Contract: a `RemoteRun` (from `TrackingClient.start_run`) has `Run`'s methods and
behaviour: `log_metrics` appends to a buffer, `flush` sends the buffered points in one
request (every `batch_size` points, at `flush()` and at `end()`), `log_params`,
`set_tags` and `log_artifact` send one request each, `end(status)` sends the last batch
with the status; used as a context manager it ends the run, FAILED if the block raised.

Design decisions:
- One POST per batch, not per point: a training loop that logs ten metrics per step pays
  a few list appends per step and one round trip per `batch_size` points, which is where
  the served path keeps the in-process store's ingest rate (MLflow's client sends one
  request per `log_metric`, or per `log_batch` the user assembles by hand).
- The buffer is emptied only after the server answered that the batch was written, so a
  refused batch (a revoked grant) or a lost connection loses no point: `flush` again.
  A batch the server wrote but whose answer was lost would be sent twice by a retry;
  the history then holds the points twice, the latest values are unchanged.
- Checks that need no server happen here first, with the store's own rules and messages
  (`bounds`: a non-finite metric, a step out of range, a metric name that is too long or
  not Unicode; a bad end status, a dangerous artifact name), so a mistake fails at the line
  that made it, as in process, and a point the server would refuse is never buffered: a
  refused batch is one the server may accept later (a grant restored, the server back),
  never one that fails the same way on every flush.
- A batch the server refuses as `InvalidInput` (422: a value it can never store, which this
  client's checks let through, e.g. a newer server's stricter rule) would be refused again
  on every flush, and the run would store nothing more. So it is split until each refused
  point is alone; those points are dropped, reported (a warning, and `refused`), and the
  rest written. Any other refusal (a revoked grant, a lost connection) keeps the whole
  batch buffered, since a later flush may succeed.
- The run talks through the client's `request` (`Transport`), and does not import the
  client: the client depends on the run, not both ways.
- The handle holds only the run's id: the server never trusts its project or name (it
  re-reads the run's project for each write), so building a handle by hand gains nothing.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any, BinaryIO, Protocol

from mlinfra_lab.tracking import bounds
from mlinfra_lab.tracking.artifacts import CHUNK, check_name
from mlinfra_lab.tracking.errors import InvalidInput, TrackingError
from mlinfra_lab.tracking.handle import RunHandle
from mlinfra_lab.tracking.records import ArtifactInfo
from mlinfra_lab.tracking.run import RUN_STATUSES
from mlinfra_lab.tracking.server import wire

__all__ = ["RemoteRun", "Transport"]


class Transport(Protocol):
    """What a remote run sends its requests through: a `TrackingClient` is one (no import of it)."""

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict | None = None,
        content: Any = None,
    ) -> Any: ...


def _stream(source: bytes | str | os.PathLike | BinaryIO) -> bytes | Iterator[bytes]:
    """The request body for `source`: bytes as they are, a path or a stream in `CHUNK` pieces."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)

    def chunks() -> Iterator[bytes]:
        f = open(source, "rb") if isinstance(source, str | os.PathLike) else source  # noqa: SIM115
        try:
            yield from iter(lambda: f.read(CHUNK), b"")
        finally:
            if f is not source:
                f.close()

    return chunks()


class RemoteRun(RunHandle):
    """Handle of one run on a tracking server; created by `TrackingClient.start_run`."""

    def __init__(
        self,
        client: Transport,
        run_id: int,
        project: str,
        name: str,
        user: str,
        batch_size: int = 1000,
    ) -> None:
        super().__init__(run_id, project, name, user, batch_size)
        self.client = client
        self._buffer: list[tuple[int, dict[str, float]]] = []
        self._points = 0
        # (step, key, value, the server's message) of each point dropped as InvalidInput
        self.refused: list[tuple[int, str, float, str]] = []

    # -- metrics -------------------------------------------------------------------
    def log_metrics(self, values: dict[str, float], step: int | None = None) -> None:
        """Buffer one point per key at `step` (default: one past the previous step)."""
        self._check_open()
        step = self._next_step(bounds.step(self._step if step is None else step))
        point = {  # every value checked before the point is buffered, by the store's own rules
            self._metric_key(key): bounds.metric_value(key, value, step)
            for key, value in values.items()
        }
        self._buffer.append((step, point))
        self._points += len(point)
        if self._points >= self.batch_size:
            self.flush()

    def flush(self) -> int:
        """Send the buffered points in one request; return how many the server wrote.

        The buffer is emptied only once the server answered: a refusal or a lost
        connection leaves every point buffered for the next `flush`, except points the
        server refuses as `InvalidInput`, which are dropped and reported (see the module doc).
        """
        if not self._buffer:
            return 0
        sent = list(self._buffer)
        written = self._send(sent)
        self._written(sent)
        return written

    def _send(self, batch: list[tuple[int, dict[str, float]]]) -> int:
        """POST `batch`; on `InvalidInput`, split it and drop the refused points. Points written."""
        try:
            self.client.request("POST", f"/runs/{self.id}/metrics", {"points": batch})
            return sum(len(p) for _, p in batch)
        except InvalidInput as err:
            singles = [(step, {k: v}) for step, point in batch for k, v in point.items()]
            if len(singles) > 1:
                mid = len(singles) // 2
                return self._send(singles[:mid]) + self._send(singles[mid:])
            if singles:
                ((step, point),) = singles
                ((key, value),) = point.items()
                self.refused.append((step, key, value, str(err)))
                warnings.warn(
                    f"run {self.id}: the server refused metric {key!r} at step {step} "
                    f"({err}); that point is dropped, the others are written",
                    stacklevel=4,
                )
            return 0

    def _written(self, sent: list[tuple[int, dict[str, float]]]) -> int:
        del self._buffer[: len(sent)]
        n = sum(len(p) for _, p in sent)
        self._points -= n
        self.flushes += bool(sent)
        return n

    # -- params, tags, artifacts ---------------------------------------------------
    def log_params(self, params: dict[str, Any]) -> None:
        self._check_open()
        self.client.request("POST", f"/runs/{self.id}/params", {"params": wire.key_values(params)})

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._check_open()
        self.client.request("POST", f"/runs/{self.id}/tags", {"tags": wire.key_values(tags)})

    def log_artifact(
        self,
        source: bytes | str | os.PathLike | BinaryIO,
        name: str,
        kind: str = "other",
        step: int | None = None,
        pinned: bool = False,
    ) -> ArtifactInfo:
        """Stream `source` (bytes, a file path or a binary stream) to the server as an artifact."""
        self._check_open()
        check_name(name)
        params: dict[str, str | int] = {
            "name": name,
            "kind": kind,
            "pinned": str(bool(pinned)).lower(),
        }
        if step is not None:
            params["step"] = int(step)
        out = self.client.request(
            "POST", f"/runs/{self.id}/artifacts", params=params, content=_stream(source)
        )
        return wire.artifact_info(out)

    # -- end -----------------------------------------------------------------------
    def end(self, status: str = "FINISHED") -> None:
        """Send the last batch and mark the run ended with `status` (FINISHED, FAILED or KILLED)."""
        if status not in RUN_STATUSES[1:]:
            raise TrackingError(f"end status must be one of {RUN_STATUSES[1:]}, got {status!r}")
        self._check_open()
        sent = list(self._buffer)
        try:
            self.client.request("POST", f"/runs/{self.id}/end", {"status": status, "points": sent})
        except InvalidInput:  # a refused point must not keep the run open: drop it, then end
            self._send(sent)
            self.client.request("POST", f"/runs/{self.id}/end", {"status": status, "points": []})
        self._written(sent)
        self.ended = True
