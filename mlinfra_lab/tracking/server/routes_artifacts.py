"""Routes of artifacts: uploads and downloads streamed, listing and pinning.

Contract: ``POST /api/runs/{id}/artifacts?name=...&kind=...`` stores the request body as an
artifact of the run (`Run.log_artifact`) and returns its `ArtifactInfo`;
``GET /api/artifacts/{id}/content`` streams the artifact's verified bytes
(`TrackingStore.open_artifact`); listing and pinning call the store's methods.

Design decisions:
- Streamed both ways, memory bounded by a chunk. The upload awaits the request's chunks on
  the event loop and writes them to a local temporary file (the spool) in a worker thread,
  one short call per `SPOOL_WRITE` bytes; once the body is whole the store copies the spool
  at disk speed (`Run.log_artifact`, in a thread). So a worker thread never waits on the
  client: a slow or stalled upload holds a connection and a coroutine, and the server's
  threads (`slow_clients.ClientLimits.worker_threads`) stay free for everyone else. The
  price is one local copy of each upload, in the temporary directory (``$TMPDIR``: give it
  room for the largest artifact times the concurrent uploads). The download iterates the
  store's verified file in `artifacts.CHUNK` pieces, each read in a thread.
- The name and WRITE are checked before the first byte is read, so a refused upload is
  answered at once and stores nothing; the client stops sending when the answer arrives
  (and a client that keeps sending is cut off after the body timeout, `slow_clients`).
  `uploads.log_artifact` checks WRITE again in the transaction that records the artifact.
- The store verifies the blob against its recorded sha256 before the first byte is sent
  (`verified_copy`, or the cache's check), so a tampered blob is a 500
  `IntegrityError`, never wrong bytes; the reply's ``Content-Length`` lets the client
  tell a cut connection from a short artifact.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import BinaryIO

from anyio import to_thread
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from mlinfra_lab.tracking import access
from mlinfra_lab.tracking.access import Level
from mlinfra_lab.tracking.artifacts import CHUNK, check_name
from mlinfra_lab.tracking.audit import denials_audited
from mlinfra_lab.tracking.db import database_errors
from mlinfra_lab.tracking.run import Run
from mlinfra_lab.tracking.server.deps import caller, json_response, store_of
from mlinfra_lab.tracking.store import TrackingStore

__all__ = ["SPOOL_WRITE", "router"]

SPOOL_WRITE = 256 << 10  # bytes gathered before a thread writes them: an upload's memory bound

router = APIRouter()


class Pin(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pinned: bool = True


def _require_write(store: TrackingStore, run_id: int, user: str) -> None:
    with (
        denials_audited(store.engine),
        database_errors("checking access"),
        store.engine.connect() as conn,
    ):
        access.require_run(conn, run_id, user, Level.WRITE, "log artifacts")


async def _spool(chunks: AsyncIterator[bytes]) -> BinaryIO:
    """The request body in a local temporary file: awaited on the event loop, written in a thread."""
    spool = await to_thread.run_sync(tempfile.TemporaryFile)
    try:
        pending = bytearray()
        async for chunk in chunks:
            pending += chunk
            if len(pending) >= SPOOL_WRITE:
                await to_thread.run_sync(spool.write, bytes(pending))
                pending.clear()
        if pending:
            await to_thread.run_sync(spool.write, bytes(pending))
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return spool


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
    store = store_of(request)
    check_name(name)
    await run_in_threadpool(_require_write, store, run_id, user)  # before a byte is read
    try:
        spool = await _spool(request.stream())
    except ClientDisconnect:  # the client left mid-body: nothing to store, no one to answer
        return Response(status_code=400)
    try:
        # the handle is never trusted: WRITE is re-read per write
        run = Run(store, run_id, "?", "?", user)
        info = await run_in_threadpool(run.log_artifact, spool, name, kind, step, pinned)
    finally:
        spool.close()
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
