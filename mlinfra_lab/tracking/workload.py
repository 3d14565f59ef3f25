"""The workload of ``mlinfra-lab bench tracking``: its config, synthetic runs, searches, bulk fills, timing.

Contract: `BenchConfig` sizes every phase (and records the scale of each system);
`synthetic_runs(n, seed, now)` makes the same run specs for every system; `QUERIES` are
the five searches in this store's and MLflow's filter languages; `fill_ours` and
`fill_mlflow` grow a database to the search size with plain SQL (untimed); `time_queries`
times each search (two warm-ups, then `search_repeats` calls) into p50/p99 latencies.
Shared by the in-process systems (`bench`) and the served ones (`server.bench`).
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = [
    "DAY",
    "QUERIES",
    "SEARCH_P99_TARGET_MS",
    "BenchConfig",
    "Progress",
    "fill_mlflow",
    "fill_ours",
    "percentile",
    "synthetic_runs",
    "time_queries",
]

DAY = 86400.0
SEARCH_P99_TARGET_MS = 50.0  # the target the benchmark checks: p99 of the five searches
T = TypeVar("T")


class Progress(Protocol):
    """A progress wrapper such as ``tqdm``: yields what `iterable` yields (and may draw a bar)."""

    def __call__(self, iterable: Iterable[T], /, desc: str = "") -> Iterable[T]: ...


@dataclass(frozen=True)
class BenchConfig:
    scale: float = 1.0  # multiplies every run count below (1.0 = the sizes)
    mlflow_scale: float | None = None  # MLflow's log/create scale (it is slow); None = scale
    mlflow_async_scale: float | None = None  # MLflow's async logging; None = mlflow_scale
    log_runs: int = 100  # metric logging: runs x metrics x steps = 1M points at scale 1
    log_metrics: int = 10
    log_steps: int = 1000
    create_runs: int = 100_000  # runs created through the API (timed)
    search_runs: int = 100_000  # database size for the searches (rest bulk-inserted)
    search_repeats: int = 30  # timed calls per query, for p50/p99
    with_mlflow: bool = True
    seed: int = 0
    with_server: bool = True  # the served path: TrackingClient -> `track serve` -> SQLite
    server_scale: float | None = (
        None  # both servers' log/create scale; None = mlflow_scale, else scale
    )
    mlflow_bin: str | None = (
        None  # the `mlflow` command for its server; None: on PATH or python -m mlflow
    )

    def mlflow_async_scale_or_default(self) -> float:
        return next(
            s for s in (self.mlflow_async_scale, self.mlflow_scale, self.scale) if s is not None
        )

    def server_scale_or_default(self) -> float:
        return next(s for s in (self.server_scale, self.mlflow_scale, self.scale) if s is not None)

    def n(
        self, count: int, mlflow: bool = False, served: bool = False, mlflow_async: bool = False
    ) -> int:
        s = self.mlflow_scale if (mlflow and self.mlflow_scale is not None) else self.scale
        s = self.server_scale_or_default() if served else s
        if mlflow_async:
            s = self.mlflow_async_scale_or_default()
        return max(1, int(round(count * s)))


# (name, this store's filter, MLflow's filter); {week_ms} is filled in at run time.
QUERIES: tuple[tuple[str, str, str], ...] = (
    ("metric range", "metrics.val_acc > 0.95", "metrics.val_acc > 0.95"),
    (
        "param and metric",
        "params.optimizer = 'adam' and metrics.val_loss < 0.1",
        "params.optimizer = 'adam' and metrics.val_loss < 0.1",
    ),
    (
        "tag and status",
        "tags.team = 'nlp' and status = 'FINISHED'",
        "tags.team = 'nlp' and attributes.status = 'FINISHED'",
    ),
    ("last 7 days", "created > -7d", "attributes.start_time > {week_ms}"),
    (
        "like, tag, metric",
        "params.model like 'resnet%' and tags.team = 'vision' and metrics.val_acc > 0.9",
        "params.model LIKE 'resnet%' and tags.team = 'vision' and metrics.val_acc > 0.9",
    ),
)


def synthetic_runs(n: int, seed: int, now: float) -> list[dict[str, Any]]:
    """`n` run specs with realistic spreads: params, a team tag, final metrics, a creation time."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        acc = rng.uniform(0.3, 0.99)
        out.append(
            {
                "params": {
                    "lr": rng.choice([1e-4, 3e-4, 1e-3, 3e-3, 1e-2]),
                    "optimizer": rng.choice(["adam", "adamw", "sgd"]),
                    "model": rng.choice(["resnet18", "resnet50", "vit-b16", "bert-base", "gpt2"]),
                    "batch_size": rng.choice([32, 64, 128, 256]),
                },
                "tags": {"team": rng.choice(["nlp", "vision", "speech", "rl"])},
                "metrics": {"val_acc": acc, "val_loss": max(0.0, 1 - acc + rng.gauss(0, 0.05))},
                "created": now - rng.uniform(0, 365) * DAY,
            }
        )
    return out


def percentile(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def time_queries(
    search: Callable[[str], Sized], queries: list[tuple[str, str]], repeats: int
) -> dict[str, Any]:
    rows, every = [], []
    for name, text in queries:
        results = len(search(text))
        search(text)  # second warm-up
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            search(text)
            samples.append((time.perf_counter() - t0) * 1000)
        every += samples
        rows.append(
            {
                "name": name,
                "filter": text,
                "results": results,
                "p50_ms": statistics.median(samples),
                "p99_ms": percentile(samples, 99),
            }
        )
    return {"queries": rows, "p50_ms": statistics.median(every), "p99_ms": percentile(every, 99)}


def fill_ours(
    engine: Engine,
    project: str,
    fill: list[dict[str, Any]],
    now: float,
    progress: Progress,
    desc: str = "mlinfra: bulk fill",
) -> None:
    """Insert the runs `fill` into `project` with plain SQL, 5000 a transaction (untimed)."""
    from sqlalchemy import func, select

    from mlinfra_lab.tracking import schema as S
    from mlinfra_lab.tracking.db import write_tx
    from mlinfra_lab.tracking.writing import number

    with write_tx(engine) as conn:
        pid = conn.execute(select(S.projects.c.id).where(S.projects.c.name == project)).scalar()
        next_id = (conn.execute(select(func.max(S.runs.c.id))).scalar() or 0) + 1
    for i in progress(range(0, len(fill), 5000), desc=desc):
        chunk, runs_rows, p_rows, t_rows, m_rows = fill[i : i + 5000], [], [], [], []
        for spec in chunk:
            rid, next_id = next_id, next_id + 1
            p = spec["params"]
            runs_rows.append(
                {
                    "id": rid,
                    "project_id": pid,
                    "name": f"run-{rid}",
                    "status": "FINISHED",
                    "user": "bench",
                    "code_commit": None,
                    "created_at": spec["created"],
                    "ended_at": spec["created"] + 60,
                    "hot_lr": p["lr"],
                    "hot_batch_size": float(p["batch_size"]),
                }
            )
            p_rows += [
                {"run_id": rid, "key": k, "value_str": str(v), "value_num": number(v)}
                for k, v in p.items()
            ]
            t_rows += [{"run_id": rid, "key": k, "value": v} for k, v in spec["tags"].items()]
            m_rows += [
                {"run_id": rid, "key": k, "step": 0, "value": v} for k, v in spec["metrics"].items()
            ]
        with write_tx(engine) as conn:
            conn.execute(S.runs.insert(), runs_rows)
            conn.execute(S.params.insert(), p_rows)
            conn.execute(S.tags.insert(), t_rows)
            conn.execute(S.latest_metrics.insert(), m_rows)
            conn.execute(S.metrics.insert(), [r | {"timestamp": now} for r in m_rows])
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")


def fill_mlflow(
    url: str,
    experiment_id: int,
    fill: list[dict[str, Any]],
    now: float,
    progress: Progress,
    desc: str = "mlflow: bulk fill",
) -> None:
    """Insert the runs `fill` into MLflow's tables of experiment `experiment_id` at database
    `url` with plain SQL (untimed), each a copy of a run the API created, with new values."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    md = sa.MetaData()
    t = {
        name: sa.Table(name, md, autoload_with=engine)
        for name in ("runs", "params", "tags", "metrics", "latest_metrics")
    }
    with engine.connect() as conn:
        row = (
            conn.execute(
                sa.select(t["runs"]).where(t["runs"].c.experiment_id == experiment_id).limit(1)
            )
            .mappings()
            .first()
        )
    assert row is not None, (
        f"experiment {experiment_id} has no run to copy: log one with MLflow first"
    )
    template = dict(row)
    ts = int(now * 1000)
    for i in progress(range(0, len(fill), 5000), desc=desc):
        runs_rows, p_rows, t_rows, m_rows = [], [], [], []
        for spec in fill[i : i + 5000]:
            ru = uuid.uuid4().hex
            start = int(spec["created"] * 1000)
            runs_rows.append(
                template
                | {
                    "run_uuid": ru,
                    "name": f"run-{ru[:8]}",
                    "status": "FINISHED",
                    "start_time": start,
                    "end_time": start + 60_000,
                    "artifact_uri": f"{template['artifact_uri'].rsplit('/', 2)[0]}/{ru}/artifacts",
                }
            )
            p_rows += [
                {"key": k, "value": str(v), "run_uuid": ru} for k, v in spec["params"].items()
            ]
            t_rows += [{"key": k, "value": v, "run_uuid": ru} for k, v in spec["tags"].items()]
            t_rows.append({"key": "mlflow.runName", "value": f"run-{ru[:8]}", "run_uuid": ru})
            m_rows += [
                {"key": k, "value": v, "timestamp": ts, "step": 0, "is_nan": False, "run_uuid": ru}
                for k, v in spec["metrics"].items()
            ]
        with engine.begin() as conn:
            conn.execute(t["runs"].insert(), runs_rows)
            conn.execute(t["params"].insert(), p_rows)
            conn.execute(t["tags"].insert(), t_rows)
            conn.execute(t["metrics"].insert(), m_rows)
            conn.execute(t["latest_metrics"].insert(), m_rows)
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
    engine.dispose()
