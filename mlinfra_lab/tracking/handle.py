"""What every run handle shares, in process (`Run`) or through the server (`RemoteRun`).

Contract: `RunHandle` holds a run's id, project, name and user, the batch size and the step
counter, and gives both handles the same surface: ``repr``, use as a context manager (the
block's end ends the run, FAILED if it raised), `node` (the run's lineage node name),
`log_metric` (one key of `log_metrics`) and the default step rule (one past the last step).

Design decisions:
- Only behaviour that is the same to the letter lives here; where the two handles differ
  (what a batch is, where it goes, how the buffer is emptied) each keeps its own code, so a
  reader of either file sees its whole write path.
- Subclasses provide `log_metrics`, `flush`, `log_params`, `set_tags`, `log_artifact` and
  `end`; the base declares them, so that the shared methods type-check and a third handle
  cannot forget one. This class is the run handle's written contract (`api.RunAPI`):
  `log_metrics` raises `InvalidInput` for a point no backend can store (nothing of the
  call is buffered), and every method but `end` raises `TrackingError` once the run ended.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, BinaryIO

from mlinfra_lab.tracking import bounds
from mlinfra_lab.tracking.errors import TrackingError
from mlinfra_lab.tracking.records import ArtifactInfo

__all__ = ["RunHandle"]


class RunHandle(ABC):
    """Base of `Run` and `RemoteRun` (see the module doc)."""

    def __init__(
        self, run_id: int, project: str, name: str, user: str, batch_size: int = 1000
    ) -> None:
        self.id, self.project, self.name, self.user = run_id, project, name, user
        self.batch_size = batch_size
        self._step = 0
        self.ended = False
        self.flushes = 0  # batches written (the benchmark reports it)
        self._keys_ok: set[str] = set()  # metric names already checked (`bounds.text`)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id}, project={self.project!r}, name={self.name!r})"

    def __enter__(self) -> RunHandle:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.ended:
            self.end("FAILED" if exc_type else "FINISHED")

    @property
    def node(self) -> str:
        return f"run:{self.id}"

    def _check_open(self) -> None:
        if self.ended:
            raise TrackingError(f"run {self.id} has ended; start a new run to log more")

    def _next_step(self, step: int | None) -> int:
        """`step`, or one past the previous step when None; the counter moves past it."""
        step = self._step if step is None else int(step)
        self._step = step + 1
        return step

    def _metric_key(self, key: str) -> str:
        """`key` if it can name a metric (`bounds.text`), checked once per name and handle."""
        if key not in self._keys_ok:
            bounds.text("a metric name", key, bounds.column_chars("metrics", "key"))
            self._keys_ok.add(key)
        return key

    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        self.log_metrics({key: value}, step)

    @abstractmethod
    def log_metrics(self, values: dict[str, float], step: int | None = None) -> None:
        """Buffer one point per key at `step` (default: one past the previous step)."""

    @abstractmethod
    def end(self, status: str = "FINISHED") -> None:
        """Send what is buffered and close the run with `status`."""

    @abstractmethod
    def flush(self) -> int:
        """Write the buffered points; return how many were written."""

    @abstractmethod
    def log_params(self, params: dict[str, Any]) -> None:
        """Record params (upserted: a key logged again takes the new value)."""

    @abstractmethod
    def set_tags(self, tags: dict[str, Any]) -> None:
        """Record tags (upserted)."""

    @abstractmethod
    def log_artifact(
        self,
        source: bytes | str | os.PathLike | BinaryIO,
        name: str,
        kind: str = "other",
        step: int | None = None,
        pinned: bool = False,
    ) -> ArtifactInfo:
        """Store `source` (bytes, a file path or a binary stream) as an artifact of the run."""
