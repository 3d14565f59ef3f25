"""Run a GPU experiment's correctness checks where a hang cannot take the whole run down.

Contract: `check_in_children(script, names, limit, env)` runs ``python script --child NAME``
for each configuration name, each in its own process with a time limit, and returns the
check entries (the child's last JSON line, plus ``config`` and, on failure, ``error``) and
the names whose check passed. `run_header()` is the device/versions/date block every result
file starts with.

Why children: a wrong mbarrier phase makes a kernel wait forever, and a hung kernel cannot
be interrupted from Python; killing its process frees the GPU, so a broken configuration
costs its time limit, not the device call.
"""

import datetime
import json
import subprocess
import sys


def check_in_children(
    script: str, names: list[str], limit: float, env: dict[str, str] | None = None
) -> tuple[list[dict], list[str]]:
    """Each configuration's check in a child process: (entries, names that passed)."""
    checks, good = [], []
    for name in names:
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
        checks.append(entry)
        if entry["ok"]:
            good.append(name)
    return checks, good


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
