"""The served paths of ``mlinfra-lab bench tracking``: our client -> our server, and MLflow's server.

Contract: `bench_served(cfg, work, now, progress)` starts ``mlinfra-lab track serve`` on a
fresh SQLite file (or on `db_url`, e.g. PostgreSQL) in a child process and measures,
through `TrackingClient`, the workload `bench` runs in process: metric logging one call
per step, run creation, and the five searches over `search_runs` runs;
`bench_mlflow_server(cfg, work, now, progress, command)` does the same against
``mlflow server`` on SQLite on loopback; `mlflow_server_command(hint)` finds that command
(None, with the reason in `why_no_mlflow_server`, when MLflow is not installed).

Design decisions:
- Each server runs in its own process, as deployed, on loopback; the benchmark process is
  the client. Both servers' databases are grown to `search_runs` runs by the same bulk
  fill as the in-process systems (`workload.fill_ours`, `workload.fill_mlflow`: plain SQL into
  the file the server has open, untimed), so all four systems answer the same queries
  over the same number of runs.
- Our side uses its own client as a user would: `RemoteRun` buffers points and sends one
  request per `batch_size` points. MLflow's side is driven through its REST API with
  httpx (one ``runs/log-batch`` per step, as `MlflowClient.log_batch` sends it, and
  batches of 1000, its maximum, as its best case): the requests `MlflowClient` would
  send, without its client-side overhead, so the comparison favours MLflow if anything.
- Calls over HTTP are slower than in process, so both servers' log and create phases run
  at `BenchConfig.server_scale`; throughputs are rates, and the JSON records each scale.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from mlinfra_lab.tracking.workload import (
    DAY,
    QUERIES,
    BenchConfig,
    Progress,
    fill_mlflow,
    fill_ours,
    synthetic_runs,
    time_queries,
)

__all__ = ["bench_mlflow_server", "bench_served", "mlflow_server_command", "why_no_mlflow_server"]

why_no_mlflow_server = (
    "MLflow is not installed (no `mlflow` command, no importable mlflow): its server was not "
    "measured; pip install 'mlinfra-lab[bench]', or pass --mlflow-bin PATH"
)


def mlflow_server_command(hint: str | None = None) -> list[str] | None:
    """The command that starts MLflow: `hint`, else ``mlflow`` on PATH, else ``python -m mlflow``."""
    if hint:
        return [hint]
    if found := shutil.which("mlflow"):
        return [found]
    if importlib.util.find_spec("mlflow") is not None:
        return [sys.executable, "-m", "mlflow"]
    return None


def _start(
    cmd: list[str], log: Path, env: dict | None = None, pipe: bool = False
) -> subprocess.Popen:
    """Start a server; its output goes to `log` (never to a pipe nobody reads: a server that logs
    each request would fill it and stop), except stdout when `pipe` (a server that prints one line)."""
    out = open(log, "w")  # noqa: SIM115 (the child keeps it)
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE if pipe else out, stderr=out, text=True, env=env
    )


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- our client -> our server ------------------------------------------------------------
def bench_served(
    cfg: BenchConfig, work: Path, now: float, progress: Progress, db_url: str | None = None
) -> dict[str, Any]:
    from mlinfra_lab.tracking.server.client import TrackingClient
    from mlinfra_lab.tracking.server.tokens import create_token
    from mlinfra_lab.tracking.store import TrackingStore

    db_url = db_url or f"sqlite:///{work / 'served.db'}"
    art = str(work / "served-artifacts")
    with TrackingStore(db_url, art, default_user="bench") as admin:
        token = create_token(admin.engine, "bench", by="bench").secret
        engine_url = admin.db_url
    package_root = str(Path(__file__).resolve().parents[3])
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")])
    }
    proc = _start(
        [
            sys.executable,
            "-m",
            "mlinfra_lab.tracking.server",
            "--db",
            db_url,
            "--artifacts",
            art,
            "--port",
            "0",
        ],
        work / "served.log",
        env,
        pipe=True,
    )
    out: dict[str, Any] = {
        "system": "mlinfra_lab.tracking served (TrackingClient -> uvicorn/FastAPI)",
        "backend": db_url.split(":", 1)[0],
        "scale": cfg.server_scale_or_default(),
    }
    assert proc.stdout is not None  # started with pipe=True
    try:
        line = proc.stdout.readline()
        if not line.startswith("serving on "):
            raise RuntimeError(
                f"`mlinfra-lab track serve` did not start: {(work / 'served.log').read_text()[-2000:]}"
            )
        client = TrackingClient(line.split()[-1], token)
        runs, keys = cfg.n(cfg.log_runs, served=True), [f"m{k}" for k in range(cfg.log_metrics)]
        t0 = time.perf_counter()
        for r in progress(range(runs), desc="served: log metrics"):
            run = client.start_run("log", name=f"log-{r}")
            for step in range(cfg.log_steps):
                run.log_metrics({k: step / cfg.log_steps for k in keys}, step=step)
            run.end()
        dt = time.perf_counter() - t0
        points = runs * cfg.log_steps * cfg.log_metrics
        out["log"] = {
            "runs": runs,
            "points": points,
            "seconds": dt,
            "points_per_s": points / dt,
            # start, batches, end
            "requests_per_run": 2 + cfg.log_steps * cfg.log_metrics // client.batch_size,
        }
        n_create = cfg.n(cfg.create_runs, served=True)
        specs = synthetic_runs(max(n_create, cfg.n(cfg.search_runs)), cfg.seed, now)
        t0 = time.perf_counter()
        for spec in progress(specs[:n_create], desc="served: create runs"):
            run = client.start_run(
                "search", params=spec["params"], tags=spec["tags"], start_time=spec["created"]
            )
            run.log_metrics(spec["metrics"])
            run.end()
        dt = time.perf_counter() - t0
        out["create"] = {
            "runs": n_create,
            "seconds": dt,
            "runs_per_s": n_create / dt,
            "requests_per_run": 2,
        }
        with TrackingStore(engine_url, art, default_user="bench", migrate_schema=False) as admin:
            fill_ours(
                admin.engine, "search", specs[n_create:], now, progress, desc="served: bulk fill"
            )
            assert admin.count("metrics") == points + n_create * 2 + len(specs[n_create:]) * 2, (
                "lost points"
            )
        queries = [(name, ours) for name, ours, _ in QUERIES]
        search = time_queries(
            lambda f: client.search_runs("search", f, limit=100), queries, cfg.search_repeats
        )
        out["search"] = {"db_runs": len(specs), "bulk_inserted": len(specs) - n_create, **search}
        client.close()
    finally:
        _stop(proc)
    if db_url.startswith("sqlite:///"):
        out["db_bytes"] = os.path.getsize(db_url[len("sqlite:///") :])
    return out


# -- REST -> MLflow's server ---------------------------------------------------------------
def _free_port() -> int:
    from mlinfra_lab.tracking.server.serving import bind

    with bind("127.0.0.1", 0) as s:
        return s.getsockname()[1]


def bench_mlflow_server(
    cfg: BenchConfig, work: Path, now: float, progress: Progress, command: list[str]
) -> dict[str, Any]:
    url, port = f"sqlite:///{work / 'mlflow-server.db'}", _free_port()
    proc = _start(
        [
            *command,
            "server",
            "--backend-store-uri",
            url,
            "--default-artifact-root",
            (work / "mlflow-server-artifacts").as_uri(),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        work / "mlflow-server.log",
    )
    out: dict[str, Any] = {
        "system": "mlflow server (REST via httpx; SqlAlchemyStore)",
        "backend": "sqlite",
        "scale": cfg.server_scale_or_default(),
        "command": " ".join(command),
    }
    try:
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}/api/2.0/mlflow", timeout=120)
        deadline = time.monotonic() + 180
        while True:  # MLflow migrates a new database before it listens
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"`mlflow server` did not start: {(work / 'mlflow-server.log').read_text()[-2000:]}"
                )
            time.sleep(0.5)

        def call(path: str, body: dict) -> dict:
            r = http.post(path, json=body)
            r.raise_for_status()
            return r.json()

        def run_id(exp: str, **kw) -> str:  # noqa: ANN003
            return call("/runs/create", {"experiment_id": exp, **kw})["run"]["info"]["run_id"]

        def finish(rid: str) -> None:
            call(
                "/runs/update",
                {"run_id": rid, "status": "FINISHED", "end_time": int(time.time() * 1000)},
            )

        exp = call("/experiments/create", {"name": "log"})["experiment_id"]
        runs, keys = cfg.n(cfg.log_runs, served=True), [f"m{k}" for k in range(cfg.log_metrics)]
        t0 = time.perf_counter()
        for _ in progress(range(runs), desc="mlflow server: log metrics"):
            rid = run_id(exp, start_time=int(time.time() * 1000))
            for step in range(cfg.log_steps):
                ts = int(time.time() * 1000)
                call(
                    "/runs/log-batch",
                    {
                        "run_id": rid,
                        "metrics": [
                            {"key": k, "value": step / cfg.log_steps, "timestamp": ts, "step": step}
                            for k in keys
                        ],
                    },
                )
            finish(rid)
        dt = time.perf_counter() - t0
        points = runs * cfg.log_steps * cfg.log_metrics
        out["log"] = {"runs": runs, "points": points, "seconds": dt, "points_per_s": points / dt}
        rid = run_id(exp, start_time=int(now * 1000))
        pts = [
            {"key": k, "value": 0.5, "timestamp": int(now * 1000), "step": s}
            for s in range(cfg.log_steps)
            for k in keys
        ]
        t0 = time.perf_counter()
        for i in range(0, len(pts), 1000):
            call("/runs/log-batch", {"run_id": rid, "metrics": pts[i : i + 1000]})
        dt = time.perf_counter() - t0
        out["log_batched_1000"] = {"points": len(pts), "seconds": dt, "points_per_s": len(pts) / dt}

        sexp = call("/experiments/create", {"name": "search"})["experiment_id"]
        n_create = cfg.n(cfg.create_runs, served=True)
        specs = synthetic_runs(max(n_create, cfg.n(cfg.search_runs)), cfg.seed, now)
        t0 = time.perf_counter()
        for spec in progress(specs[:n_create], desc="mlflow server: create runs"):
            rid = run_id(
                sexp,
                start_time=int(spec["created"] * 1000),
                tags=[{"key": k, "value": v} for k, v in spec["tags"].items()],
            )
            call(
                "/runs/log-batch",
                {
                    "run_id": rid,
                    "metrics": [
                        {"key": k, "value": v, "timestamp": int(now * 1000), "step": 0}
                        for k, v in spec["metrics"].items()
                    ],
                    "params": [{"key": k, "value": str(v)} for k, v in spec["params"].items()],
                },
            )
            finish(rid)
        dt = time.perf_counter() - t0
        out["create"] = {
            "runs": n_create,
            "seconds": dt,
            "runs_per_s": n_create / dt,
            "requests_per_run": 3,
        }
        fill_mlflow(
            url, int(sexp), specs[n_create:], now, progress, desc="mlflow server: bulk fill"
        )
        week_ms = int((now - 7 * DAY) * 1000)
        queries = [(name, theirs.format(week_ms=week_ms)) for name, _, theirs in QUERIES]

        def search(f: str) -> list:
            return call(
                "/runs/search", {"experiment_ids": [sexp], "filter": f, "max_results": 100}
            ).get("runs", [])

        out["search"] = {
            "db_runs": len(specs),
            "bulk_inserted": len(specs) - n_create,
            **time_queries(search, queries, cfg.search_repeats),
        }
        http.close()
    finally:
        _stop(proc)
    out["db_bytes"] = os.path.getsize(work / "mlflow-server.db")
    return out
