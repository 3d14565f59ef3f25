"""The data loader alone: samples/s at several worker counts, and from one shared source.

Contract: `loader_bench(workers, batches, ms_per_batch)` runs a `DataLoader` over synthetic
batches without any model and returns one row per configuration: workers, readers, samples/s
per reader and in aggregate. It answers step 1b of the course text: can the input pipeline
feed N consumers, or does it, not compute, cap throughput?

Design decisions:
- Each batch costs `ms_per_batch` of work (a sleep, as I/O waits are). With a private source
  more workers overlap that cost; with a shared single-process source (one lock, as a
  single-threaded reader or a saturated filesystem behaves) adding readers adds waiting.
- `shared_source_bench(readers, ...)` runs `readers` threads reading through one lock, the
  way N ranks on a host contend for one source; aggregate samples/s stays flat as N grows.

Caveats: worker processes cost start-up time; the clock starts once every worker has
delivered its first batch, so the rate is the steady state (`batches` > 2 x workers).
"""

from __future__ import annotations

import threading
import time
from typing import Any, cast

__all__ = ["loader_bench", "shared_source_bench"]


class _SlowBatches:
    """Map-style dataset of `n` synthetic batches, each taking `delay_s` to produce."""

    def __init__(self, n: int, batch: int, hidden: int, delay_s: float, lock: Any = None) -> None:
        self.n, self.batch, self.hidden, self.delay_s, self.lock = n, batch, hidden, delay_s, lock

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        import torch

        if self.lock is not None:
            with self.lock:
                time.sleep(self.delay_s)
        else:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.batch, self.hidden, generator=g)  # (B, hidden)


def loader_bench(
    workers: list[int],
    batches: int = 16,
    ms_per_batch: float = 10.0,
    batch: int = 32,
    hidden: int = 64,
) -> list[dict[str, Any]]:
    """Samples/s of a DataLoader alone at each worker count (0 = in the main process)."""
    import torch

    if batches <= 2 * max(workers):
        raise ValueError(f"batches ({batches}) must exceed twice the most workers")
    rows = []
    for w in workers:
        data = _SlowBatches(batches, batch, hidden, ms_per_batch / 1e3)
        # DataLoader takes any object with __getitem__ and __len__ (a map-style dataset) but
        # is annotated with torch's Dataset, which _SlowBatches cannot subclass: torch is
        # imported lazily so that importing this module stays cheap.
        loader = torch.utils.data.DataLoader(
            cast("torch.utils.data.Dataset[torch.Tensor]", data),
            batch_size=None,
            num_workers=w,
            prefetch_factor=2 if w else None,
        )
        skip = max(1, w)  # steady state: start the clock once every worker has delivered
        t0 = 0.0
        for i, _ in enumerate(loader):
            if i == skip - 1:
                t0 = time.perf_counter()
        rate = (batches - skip) * batch / (time.perf_counter() - t0)
        rows.append(
            {"workers": w, "readers": 1, "samples_per_s": rate, "aggregate_samples_per_s": rate}
        )
    return rows


def shared_source_bench(
    readers: list[int],
    batches: int = 8,
    ms_per_batch: float = 10.0,
    batch: int = 32,
    shared: bool = True,
) -> list[dict[str, Any]]:
    """Aggregate samples/s when `r` readers (threads) share one serialised source.

    With ``shared=False`` each reader has its own source: the aggregate then grows with r.
    """
    rows = []
    for r in readers:
        lock = threading.Lock() if shared else None
        data = _SlowBatches(batches, batch, 8, ms_per_batch / 1e3, lock)

        def read(data: _SlowBatches = data) -> None:
            for i in range(len(data)):
                data[i]

        threads = [threading.Thread(target=read) for _ in range(r)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
        total = r * batches * batch
        rows.append(
            {
                "workers": 0,
                "readers": r,
                "shared": shared,
                "samples_per_s": total / seconds / r,
                "aggregate_samples_per_s": total / seconds,
            }
        )
    return rows
