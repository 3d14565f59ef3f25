"""Routes of artifacts: uploads and downloads streamed, listing and pinning.

Contract: ``POST /api/runs/{id}/artifacts?name=...&kind=...`` stores the request body as an
artifact of the run (`Run.log_artifact`) and returns its `ArtifactInfo`;
``GET /api/artifacts/{id}/content`` streams the artifact's verified bytes
(`TrackingStore.open_artifact`); listing and pinning call the store's methods.

Design decisions:
- Streamed both ways, memory bounded by one chunk: the upload hands the store a file
  object (`_RequestBody`) whose ``read`` pulls the next chunks of the request from the
  event loop (`anyio.from_thread.run`), so bytes go from the socket through the hash into
  the blob store's temporary file without being held whole; the download iterates the
  store's verified file in `artifacts.CHUNK` pieces.
- WRITE is checked before the first byte is read (`uploads.log_artifact` checks first),
  so a refused upload is answered at once and stores nothing; the client stops sending
  when the answer arrives.
- The store verifies the blob against its recorded sha256 before the first byte is sent
  (`verified_copy`, or the cache's check), so a tampered blob is a 500
  `IntegrityError`, never wrong bytes; the reply's ``Content-Length`` lets the client
  tell a cut connection from a short artifact.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator
from typing import BinaryIO

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from mlinfra_lab.tracking.artifacts import CHUNK
from mlinfra_lab.tracking.run import Run
from mlinfra_lab.tracking.server.deps import caller, json_response, store_of

__all__ = ["router"]

router = APIRouter()


class Pin(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pinned: bool = True


class _RequestBody(io.RawIOBase):
    """The request's body as a blocking binary file, for a worker thread (not the event loop)."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks, self._pending, self._done = chunks, bytearray(), False

    def readable(self) -> bool:
        return True

    async def _next(self) -> bytes | None:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return None

    def read(self, n: int = -1) -> bytes:
        while not self._done and (n < 0 or len(self._pending) < n):
            chunk = anyio.from_thread.run(self._next)
            if chunk is None:
                self._done = True
            else:
                self._pending += chunk
        n = len(self._pending) if n < 0 else min(n, len(self._pending))
        out = bytes(self._pending[:n])
        del self._pending[:n]
        return out


@router.post("/runs/{run_id}/artifacts")
async def log_artifact(
    run_id: int,
    name: str,
    request: Request,
    kind: str = "other",
    step: int | None = None,
    pinned: bool = False,
    user: str = Depends(caller),
) -> Response:
    # the handle is never trusted: WRITE is re-read per write
    run = Run(store_of(request), run_id, "?", "?", user)
    body = _RequestBody(request.stream())
    info = await run_in_threadpool(run.log_artifact, body, name, kind, step, pinned)
    return json_response(info)


@router.get("/runs/{run_id}/artifacts")
def list_artifacts(run_id: int, request: Request, user: str = Depends(caller)) -> Response:
    return json_response(store_of(request).list_artifacts(run_id, user=user))


def _chunks(f: BinaryIO) -> Iterator[bytes]:
    try:
        yield from iter(lambda: f.read(CHUNK), b"")
    finally:
        f.close()


@router.get("/artifacts/{artifact_id}/content")
def download(artifact_id: int, request: Request, user: str = Depends(caller)) -> Response:
    f = store_of(request).open_artifact(artifact_id, user=user)  # verified, or IntegrityError
    size = f.seek(0, io.SEEK_END)
    f.seek(0)
    return StreamingResponse(
        _chunks(f), media_type="application/octet-stream", headers={"Content-Length": str(size)}
    )


@router.post("/artifacts/{artifact_id}/pin")
def pin(artifact_id: int, body: Pin, request: Request, user: str = Depends(caller)) -> Response:
    store_of(request).pin_artifact(artifact_id, body.pinned, user=user)
    return json_response({"ok": True})
