"""The hot-artifact cache shared by the server's worker threads: 8 threads at once lose nothing.

The attack: 8 threads download through one cache that holds only two of the eight blobs, so
every fill evicts. Without a lock, a thread opened a file another thread had just evicted
(FileNotFoundError), the recency order was mutated while another thread iterated it, and
fills that ran side by side each evicted against a count that missed the others (the bound
broken). The first download of every thread is a miss lined up on a barrier, so all 8 fills
are in flight together on every run, whatever the machine's load; the rest follow a seeded
random order.
"""

from __future__ import annotations

import hashlib
import io
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from mlinfra_lab.tracking.cache import ArtifactCache

pytestmark = pytest.mark.tracking

THREADS, READS, SIZE = 8, 200, 4096
BLOBS = [bytes([i]) * SIZE for i in range(THREADS)]
DIGESTS = [hashlib.sha256(b).hexdigest() for b in BLOBS]


def test_eight_threads_share_one_cache_without_a_failed_download(tmp_path):
    cache = ArtifactCache(tmp_path / "cache", max_bytes=2 * SIZE)
    lined_up = threading.Barrier(THREADS)

    def download(worker: int) -> list[str]:
        rng = random.Random(worker)
        order = [worker] + [rng.randrange(THREADS) for _ in range(READS - 1)]
        problems = []
        for n, i in enumerate(order):

            def fetch(i: int = i, first: bool = n == 0) -> io.BytesIO:
                if first:  # every thread's first read is a miss: all 8 fills at once
                    lined_up.wait()
                return io.BytesIO(BLOBS[i])

            try:
                with cache.open(DIGESTS[i], fetch) as f:
                    if f.read() != BLOBS[i]:
                        problems.append(f"worker {worker} read {n}: wrong bytes")
            except Exception as err:  # noqa: BLE001 (each failure is reported, not raised)
                problems.append(f"worker {worker} read {n}: {type(err).__name__}: {err}")
        return problems

    with ThreadPoolExecutor(THREADS) as pool:
        problems = [p for ps in pool.map(download, range(THREADS)) for p in ps]
    assert problems == [], f"{len(problems)} of {THREADS * READS} downloads failed: {problems[:3]}"
    st = cache.stats()
    assert st.hits + st.misses == THREADS * READS, "every download counted once"
    on_disk = {p.name: p.stat().st_size for p in cache.dir.iterdir() if len(p.name) == 64}
    assert st.bytes_cached <= cache.max_bytes, f"the bound is broken: {st.bytes_cached}"
    assert st.bytes_cached == sum(on_disk.values()), "the byte count matches the files"
    assert {d for d in DIGESTS if d in cache} == set(on_disk), "the index matches the files"
    assert not [p for p in cache.dir.iterdir() if p.name.startswith(".tmp-")]
