"""Content-addressed blob storage on any fsspec file system: atomic writes, de-duplication.

Contract: `BlobStore(root).put(source)` streams bytes to ``<root>/blobs/<sha[:2]>/<sha>``
and returns (uri, sha256, size); a blob appears at its final name only when it is
complete, the same bytes are stored once, and the database only ever records the URI.

Design decisions:
- Content addressing (sha256) gives de-duplication for free (ten runs that save the same
  tokenizer store it once) and an end-to-end integrity check: whoever reads a blob can
  hash it and compare with the digest recorded at upload (`IntegrityError` otherwise).
- Atomic write: bytes go to ``<root>/tmp/<random>`` first and are renamed to the final
  name only after the last byte and the digest are known. On a local disk the rename is
  atomic; on object stores (``s3://``, ``gs://``) fsspec's ``mv`` is a server-side copy
  of an object that was itself written in one PUT, so no reader ever sees half a blob.
  A failure midway removes the temporary file; the caller writes the database row only
  after `put` returned, so no row ever points at a missing blob.
- A URI-scheme registry is fsspec itself: ``file://``, ``s3://``, ``memory://`` ... all
  work unchanged; the root's protocol picks the backend. Credentials and endpoints come
  from fsspec's configuration (``~/.config/fsspec/s3.json``, ``FSSPEC_S3_*`` variables) or
  the AWS environment, never from the database. Reads fetch `CHUNK`-sized ranges and
  writes buffer one `PART`, so memory stays bounded whatever the blob size; the S3 path
  is tested against moto's S3 server on loopback (``tests/test_tracking_s3.py``).
- One root, one name. A local root is resolved (symlinks, ``.`` and ``..``, ``file://`` or a
  plain path) before it is used or compared (`to_url`), and a blob URI read from a row is
  compared in that form (`canonical_blob_uri`): the garbage collector decides whether a
  blob is referenced by comparing names, and two spellings of one folder must not look
  like two folders. Object-store URLs are compared as written (their keys may hold ``..``).
- Only what the store made is listed: `list_blobs` yields the files that have the
  content-addressed layout, ``blobs/<sha[:2]>/<sha>`` (64 hex digits), and nothing else
  under a root, so a cold root shared with other files never exposes those to deletion;
  `overlaps` tells whether two roots share a prefix, which the store refuses for a cold root.
- Artifact *names* are labels in the database, never paths: `check_name` still refuses
  names that would be dangerous if someone exported artifacts by name (``..``, absolute
  paths, NUL bytes, backslashes).

- The blob is always published, even when one with that name exists: the new bytes hash
  to the name, so they are right by construction, and a blob that was tampered with is
  replaced by the right bytes the next time they are logged (a rename on a local disk).
- `put(source, before_publish)` calls ``before_publish(uri)`` once the name is known and
  before the blob is moved into place: the store records a pending upload there, which
  the garbage collector honours (`uploads`).

Caveats: a crash between `put` and the row insert leaves an unreferenced blob (and a
pending-upload record), which the garbage collector removes once they are stale; a writer
killed mid-upload leaves a partial file in ``tmp/``, swept by the collector the same way.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, BinaryIO

import fsspec

from mlinfra_lab.tracking.errors import ArtifactNameError, IntegrityError

__all__ = [
    "BlobStore",
    "PutResult",
    "canonical_blob_uri",
    "check_name",
    "open_uri",
    "overlaps",
    "sha256_file",
    "to_url",
    "verified_copy",
]

CHUNK = 1 << 20  # 1 MiB: big enough to stream fast, small enough to bound memory
PART = 5 << 20  # write buffer: S3's smallest multipart part (s3fs's default buffers 50 MiB)


def check_name(name: str) -> str:
    """Return `name` if it is a safe relative artifact name, else raise `ArtifactNameError`."""
    if not isinstance(name, str) or not name or len(name) > 500:
        raise ArtifactNameError(
            f"artifact name must be a non-empty string of <= 500 characters, got {name!r}"
        )
    if "\x00" in name:
        raise ArtifactNameError(f"artifact name {name!r} contains a NUL byte; remove it")
    if "\\" in name:
        raise ArtifactNameError(
            f"artifact name {name!r} contains a backslash; use '/' to separate parts"
        )
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArtifactNameError(
            f"artifact name {name!r} is absolute; use a relative name such as 'ckpt/step100.pt'"
        )
    if any(part in ("..", ".") for part in PurePosixPath(name).parts) or "//" in name:
        raise ArtifactNameError(
            f"artifact name {name!r} has a '..', '.' or empty part; use a plain relative name"
        )
    return name


_BLOB = re.compile(r"([0-9a-f]{2})/([0-9a-f]{64})")  # blobs/<sha[:2]>/<sha>, relative to blobs/


def to_url(root: str) -> str:
    """The canonical fsspec URL of `root`: a plain path or a ``file://`` URL becomes
    ``file://<real absolute path>`` (symlinks, ``.`` and ``..`` resolved); other URLs pass
    through, without a trailing slash."""
    if root.startswith("file://"):
        return "file://" + os.path.realpath(root[len("file://") :])
    return root.rstrip("/") if "://" in root else "file://" + os.path.realpath(root)


def canonical_blob_uri(uri: str) -> str:
    """`uri` (``<root>/blobs/...``, as a row holds it) with its root in `to_url`'s form."""
    root, sep, rest = uri.rpartition("/blobs/")
    return f"{to_url(root)}/blobs/{rest}" if sep else uri


def overlaps(a: str, b: str) -> bool:
    """Whether roots `a` and `b` (any spelling) are one folder or one holds the other."""
    a, b = to_url(a).rstrip("/"), to_url(b).rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def open_uri(uri: str) -> BinaryIO:
    """Open any fsspec URI for binary reading (the caller closes it)."""
    fs, path = fsspec.core.url_to_fs(uri)
    # object stores: CHUNK-sized ranges, no read-ahead
    return fs.open(path, "rb", block_size=CHUNK, cache_type="none")


def sha256_file(f: BinaryIO) -> str:
    """sha256 hex digest of a binary stream, read in chunks."""
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(CHUNK), b""):
        h.update(chunk)
    return h.hexdigest()


def verified_copy(uri: str, sha256: str, artifact_id: int | None = None) -> BinaryIO:
    """An open temporary file holding the blob at `uri`, checked against `sha256` (`IntegrityError`).

    Copied and hashed one chunk at a time, so memory stays at one chunk whatever the size;
    the file has no name on disk and disappears when closed.
    """
    out = tempfile.TemporaryFile()  # noqa: SIM115 (handed to the caller, who closes it)
    h = hashlib.sha256()
    try:
        with open_uri(uri) as src:
            for chunk in iter(lambda: src.read(CHUNK), b""):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != sha256:
            raise IntegrityError(artifact_id, sha256, h.hexdigest(), f"at {uri}")
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


@dataclass(frozen=True)
class PutResult:
    uri: str  # final location, e.g. file:///data/blobs/ab/ab12...
    sha256: str
    size: int  # bytes
    deduplicated: bool  # True when the blob was already there and nothing was written


def _chunks(source: bytes | str | os.PathLike | BinaryIO) -> Iterator[bytes]:
    if isinstance(source, bytes | bytearray | memoryview):
        stream: BinaryIO = io.BytesIO(bytes(source))
    elif isinstance(source, str | os.PathLike):
        stream = open(source, "rb")  # noqa: SIM115 (closed below)
    else:
        stream = source
    try:
        yield from iter(lambda: stream.read(CHUNK), b"")
    finally:
        if stream is not source:
            stream.close()


class BlobStore:
    """Blobs under one fsspec root URL (``file:///...``, ``memory://...``, ``s3://bucket/x``)."""

    def __init__(self, root: str, **storage_options: Any) -> None:
        self.root = root.rstrip("/")
        self.fs, self._root_path = fsspec.core.url_to_fs(self.root, **storage_options)

    # -- naming ----------------------------------------------------------------------
    def uri_for(self, sha256: str) -> str:
        return f"{self.root}/blobs/{sha256[:2]}/{sha256}"

    def _path(self, uri: str) -> str:
        return self.fs._strip_protocol(uri)

    # -- writing ---------------------------------------------------------------------
    def put(
        self,
        source: bytes | str | os.PathLike | BinaryIO,
        before_publish: Callable[[str], None] | None = None,
    ) -> PutResult:
        """Store bytes (or a file path, or a binary stream) atomically; de-duplicate by sha256.

        ``before_publish(uri)`` runs after the bytes are hashed and before the blob appears
        (or is replaced) at `uri`.
        """
        tmp = f"{self._root_path}/tmp/{uuid.uuid4().hex}"
        self.fs.makedirs(f"{self._root_path}/tmp", exist_ok=True)
        h, size = hashlib.sha256(), 0
        try:
            with self.fs.open(tmp, "wb", block_size=PART) as out:
                for chunk in _chunks(source):
                    h.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            sha = h.hexdigest()
            uri = self.uri_for(sha)
            final = self._path(uri)
            if before_publish is not None:
                before_publish(uri)
            existed = self.fs.exists(final)
            self.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            self.fs.mv(tmp, final)  # replaces a tampered blob; a fresh mtime for the GC's grace
            return PutResult(uri, sha, size, deduplicated=existed)
        except BaseException:
            if self.fs.exists(tmp):
                self.fs.rm(tmp)
            raise

    # -- reading and deleting --------------------------------------------------------
    def open(self, uri: str) -> BinaryIO:
        return self.fs.open(self._path(uri), "rb", block_size=CHUNK, cache_type="none")

    def exists(self, uri: str) -> bool:
        return self.fs.exists(self._path(uri))

    def size(self, uri: str) -> int:
        return int(self.fs.size(self._path(uri)))

    def delete(self, uri: str) -> None:
        """Remove the blob at `uri` (nothing to do when it is already gone)."""
        try:
            self.fs.rm(self._path(uri))
        except FileNotFoundError:
            pass

    def list_tmp(self) -> list[tuple[str, float, int]]:
        """(path, modified time, size) of every temporary upload file: in flight, or left by a killed writer."""
        base = f"{self._root_path}/tmp"
        if not self.fs.exists(base):
            return []
        out = []
        for info in self.fs.ls(base, detail=True):
            try:
                mtime = self.fs.modified(info["name"]).timestamp()
            except (NotImplementedError, AttributeError, FileNotFoundError):
                mtime = 0.0
            out.append((info["name"], mtime, int(info.get("size") or 0)))
        return out

    def remove_tmp(self, path: str) -> None:
        try:
            self.fs.rm(path)
        except FileNotFoundError:
            pass

    def list_blobs(self) -> list[tuple[str, float]]:
        """(uri, modified time as epoch seconds) of every blob under this root: the files with
        the content-addressed layout only (see the module doc), never anything else there."""
        base = f"{self._root_path}/blobs"
        if not self.fs.exists(base):
            return []
        out = []
        for path in self.fs.find(base):
            m = _BLOB.fullmatch(path[len(base) + 1 :])
            if m is None or not m.group(2).startswith(m.group(1)):
                continue  # not a blob this store wrote: never listed, so never deleted
            try:
                mtime = self.fs.modified(path).timestamp()
            except (NotImplementedError, AttributeError):
                mtime = 0.0
            out.append((f"{self.root}/blobs/{path[len(base) + 1 :]}", mtime))
        return out
