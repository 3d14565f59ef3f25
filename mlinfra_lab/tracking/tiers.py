"""The two tiers measured: the bytes of an artifact reference row, and a cold read against a cache hit.

Contract: `reference_row_bytes(store)` measures, from the database itself, how many bytes
an artifact reference takes (its row in ``artifacts`` and its entries in that table's
indexes) and which columns they go to; `cold_and_cached_reads(store, sizes, repeats)`
logs `repeats` distinct random blobs of each size, reads each one twice through the
store's cache, and returns per size the median latency, the storage calls and the bytes
moved from storage of the first (cold: a cache miss) and the second (a cache hit) read.

Design decisions:
- Bytes per row come from SQLite's ``dbstat`` table (the record payload of every b-tree
  page of the table and of its indexes), not from a formula: what the database stores is
  what is measured. Page slack is reported apart (``page_bytes_per_row``), since it shrinks
  as the table fills its pages and says nothing about the row.
- A cold read is a cache miss, not a cold disk or a cold server: the loopback server keeps
  its objects in memory. Both reads pay the same access check, audit record and sha256
  verification, so their difference is the fetch from storage.
- Storage calls and bytes come from `spy.spy_storage`, the same instrument that shows a
  search makes no storage call, so the zero and the non-zero are counted one way.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.errors import TrackingError
from mlinfra_lab.tracking.spy import spy_storage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mlinfra_lab.tracking.store import TrackingStore

__all__ = ["cold_and_cached_reads", "reference_row_bytes"]

# columns of a reference row whose stored length the report breaks out
_TEXT_COLUMNS = ("uri", "sha256", "name", "kind", "tier")


def reference_row_bytes(store: TrackingStore) -> dict[str, Any]:
    """Bytes per artifact reference row, measured with SQLite's ``dbstat``; needs at least one row."""
    if store.engine.dialect.name != "sqlite":
        raise TrackingError(
            "reference_row_bytes reads SQLite's dbstat table; on PostgreSQL compare "
            "pg_total_relation_size('artifacts') with the row count instead"
        )
    a = S.artifacts
    with store.engine.connect() as conn:
        rows = conn.execute(select(func.count()).select_from(a)).scalar()
        if not rows:
            raise TrackingError("no artifact rows to measure; log an artifact first")
        names = [
            r[0]
            for r in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE tbl_name = 'artifacts' AND type = 'index'"
            )
        ]
        btrees: dict[str, dict[str, int]] = {}
        for name in ["artifacts", *names]:
            payload, pages = conn.exec_driver_sql(
                "SELECT SUM(payload), SUM(pgsize) FROM dbstat WHERE name = ?", (name,)
            ).one()
            btrees[name] = {"payload": int(payload or 0), "page_bytes": int(pages or 0)}
        lengths = conn.execute(
            select(
                *(func.avg(func.length(a.c[c])).label(c) for c in _TEXT_COLUMNS),
                func.avg(a.c.size).label("artifact_bytes"),
            )
        ).one()
    payload = sum(b["payload"] for b in btrees.values())
    return {
        "rows": rows,
        "table_payload_per_row": btrees["artifacts"]["payload"] / rows,
        "index_payload_per_row": {n: btrees[n]["payload"] / rows for n in names},
        "payload_per_row": payload / rows,  # table + indexes: what one reference costs
        "page_bytes_per_row": sum(b["page_bytes"] for b in btrees.values()) / rows,
        "column_chars": {c: float(getattr(lengths, c)) for c in _TEXT_COLUMNS},
        "artifact_bytes_mean": float(lengths.artifact_bytes),
    }


def cold_and_cached_reads(
    store: TrackingStore,
    sizes: Sequence[int] = (64 << 10, 1 << 20, 8 << 20),
    repeats: int = 5,
    seed: int = 0,
    project: str = "cold-reads",
) -> list[dict[str, Any]]:
    """Per blob size: median latency (ms), storage calls and bytes moved of a cold read and a hit.

    The store needs a cache (``cache_dir=``) that holds the largest size. Each of the
    `repeats` blobs of a size is distinct (seeded random bytes), so its first read misses.
    """
    if store.cache is None or store.cache.max_bytes < max(sizes):
        raise TrackingError(
            f"cold_and_cached_reads needs a store opened with cache_dir= and cache_bytes >= "
            f"{max(sizes)} (the largest size), so that the second read can hit"
        )
    rng = random.Random(seed)
    run = store.start_run(project, name="cold-and-cached")
    blobs = {
        size: [
            run.log_artifact(rng.randbytes(size), f"blob-{size}-{i}.bin") for i in range(repeats)
        ]
        for size in sizes
    }
    run.end()
    out = []
    for size, arts in blobs.items():
        reads: dict[str, list[tuple[float, int, int]]] = {"cold": [], "hit": []}
        for art in arts:
            for kind in ("cold", "hit"):
                with spy_storage(store) as spy:
                    t0 = time.perf_counter()
                    n = len(store.read_artifact(art.id))
                    ms = (time.perf_counter() - t0) * 1000
                if n != size:
                    raise TrackingError(f"read {n} bytes of a {size}-byte artifact {art.id}")
                reads[kind].append((ms, spy.total_calls, spy.bytes_read))
        row: dict[str, Any] = {"size": size, "repeats": repeats}
        for kind, samples in reads.items():
            row[f"{kind}_ms"] = statistics.median(s[0] for s in samples)
            row[f"{kind}_calls"] = statistics.median(s[1] for s in samples)
            row[f"{kind}_bytes"] = statistics.median(s[2] for s in samples)
        out.append(row)
    return out
