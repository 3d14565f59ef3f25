"""Count what a store asks of its artifact tier: calls into fsspec file systems and bytes moved.

Contract: ``with spy_storage(store) as spy:`` counts, while the block runs, every call the
store makes to a public method of an fsspec file system (`StorageSpy.calls`, by method
name) and the payload bytes that pass through the files it opens and the bytes it ``cat``s
or ``pipe``s (`StorageSpy.bytes_read`, `StorageSpy.bytes_written`); on exit the store and
fsspec are as they were.

Design decisions:
- The seam is fsspec: the store reaches storage only through file systems that fsspec
  resolved from a URL, the blob store's own (``store.blobs.fs``, for writes, listings and
  deletes) and the one `artifacts.open_uri` resolves for every read (hot or cold root).
  The spy wraps the first in a counting proxy and, for the block, has
  ``fsspec.core.url_to_fs`` hand out counting proxies too, so both paths are counted.
- A zero is only as good as the spy's ability to see a non-zero: report each zero beside
  a positive control (a download, counted through the same spy); the tests do.
- Only calls from outside the file system are counted (the proxy sees nothing of what a
  method calls on itself), so one ``open`` is one call however fsspec implements it.
  Private helpers (``_strip_protocol``, a string operation) pass through uncounted.
- Bytes are payload through fsspec, not bytes on the wire: HTTP headers, request signing
  and TLS are not in them. A cache hit that never calls storage moves zero.
- An instrument for notebooks and tests: it swaps a module attribute for the duration of
  the block, so use it in one thread, around one store.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import fsspec.core

if TYPE_CHECKING:
    from mlinfra_lab.tracking.store import TrackingStore

__all__ = ["CountingFile", "CountingFileSystem", "StorageSpy", "spy_storage"]


@dataclass
class StorageSpy:
    """What the store asked of storage during a `spy_storage` block."""

    calls: Counter[str] = field(default_factory=Counter)  # public file-system method -> calls
    bytes_read: int = 0  # payload bytes read from storage
    bytes_written: int = 0  # payload bytes written to storage

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": dict(self.calls),
            "total_calls": self.total_calls,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
        }


class CountingFile:
    """A file opened on storage whose ``read``/``write`` payload is added to a `StorageSpy`."""

    def __init__(self, inner: Any, spy: StorageSpy) -> None:
        self._inner, self._spy = inner, spy

    def read(self, *args: Any) -> bytes:
        data = self._inner.read(*args)
        self._spy.bytes_read += len(data)
        return data

    def write(self, data: bytes) -> int:
        self._spy.bytes_written += len(data)
        return self._inner.write(data)

    def __enter__(self) -> CountingFile:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self._inner.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class CountingFileSystem:
    """A proxy of an fsspec file system that counts calls to its public methods in a spy."""

    def __init__(self, inner: Any, spy: StorageSpy) -> None:
        self._inner, self._spy = inner, spy

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        return self._counted(name, attr)

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        spy = self._spy

        def call(*args: Any, **kwargs: Any) -> Any:
            spy.calls[name] += 1
            if name in ("pipe", "pipe_file") and len(args) > 1 and isinstance(args[1], bytes):
                spy.bytes_written += len(args[1])
            result = method(*args, **kwargs)
            if name == "open":
                return CountingFile(result, spy)
            if isinstance(result, bytes):  # cat, cat_file, read_bytes, ...
                spy.bytes_read += len(result)
            return result

        return call


@contextlib.contextmanager
def spy_storage(store: TrackingStore) -> Iterator[StorageSpy]:
    """Count every storage call `store` makes, and the bytes moved, while the block runs."""
    spy = StorageSpy()
    blobs, resolve = store.blobs, fsspec.core.url_to_fs
    own_fs = blobs.fs

    def counting_url_to_fs(url: str, **kwargs: Any) -> tuple[Any, str]:
        fs, path = resolve(url, **kwargs)
        return CountingFileSystem(fs, spy), path

    blobs.fs = CountingFileSystem(own_fs, spy)
    fsspec.core.url_to_fs = counting_url_to_fs
    try:
        yield spy
    finally:
        fsspec.core.url_to_fs = resolve
        blobs.fs = own_fs
