"""Run a GPU experiment's correctness checks where a hang cannot take the whole run down.

Contract: `check_in_children(script, names, limit, env, jobs)` runs
``python script --child NAME`` for each configuration name, each in its own process with a
time limit, ``jobs`` of them at once, and returns the check entries in the order of `names`
(the child's last JSON line, plus ``config`` and, on failure, ``error``) and the names whose
check passed. `run_header()` is the device/versions/date block every result file starts
with.

Why children: a wrong mbarrier phase makes a kernel wait forever, and a hung kernel cannot
be interrupted from Python; killing its process frees the GPU, so a broken configuration
costs its time limit, not the device call. Why several at once: a check is mostly
compilation (CPU) and small launches, so children on one GPU overlap well, and a device
call pays the slowest child rather than the sum; a hung child only holds its own SMs.
"""

import datetime
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _one(script: str, name: str, limit: float, env: dict[str, str] | None) -> dict:
    cmd = [sys.executable, script, "--child", name]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env)
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        entry = json.loads(last) if last.startswith("{") else {"ok": False}
        if done.returncode:
            entry.update(ok=False, error=done.stderr[-1500:])
    except subprocess.TimeoutExpired:  # a hang: barrier phases wrong
        entry = {"ok": False, "error": f"no answer in {limit:g} s (hung)"}
    entry["config"] = name
    print(json.dumps(entry)[:2000], flush=True)
    return entry


def check_in_children(
    script: str,
    names: list[str],
    limit: float,
    env: dict[str, str] | None = None,
    jobs: int = 1,
) -> tuple[list[dict], list[str]]:
    """Each configuration's check in a child process: (entries, names that passed)."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        checks = list(pool.map(lambda name: _one(script, name, limit, env), names))
    return checks, [c["config"] for c in checks if c["ok"]]


def run_header() -> dict:
    """Device, torch and Triton versions, and the UTC date of this run."""
    import torch
    import triton

    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json(path: Path | None, result: dict) -> None:
    """Write `result` to `path` (if given): called after every row, so a run cut off by its
    time limit still leaves the rows it finished."""
    if path:
        path.write_text(json.dumps(result, indent=1) + "\n")
