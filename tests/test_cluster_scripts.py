"""The cluster path of chapter 2: `cluster/train.sbatch` and `cluster/torchrun.sh` are correct
for a Slurm cluster, checked here without one.

Both scripts pass `bash -n`; the #SBATCH lines ask for one task (one torchrun) per node; the
sbatch's dry run prints the NCCL settings and the srun line; the torchrun script, run with
the environment srun gives it and a stand-in `scontrol`, prints a command that
`torch.distributed.run`'s own parser accepts, with the rendezvous on the first node, as
many nodes as Slurm allocated and one rank per GPU of the node; its script arguments parse
with the harness's parser, and the committed config is a valid `RunConfig`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from mlinfra_lab.scaling import RunConfig

pytestmark = pytest.mark.scaling

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "cluster" / "train.sbatch"
TORCHRUN = ROOT / "cluster" / "torchrun.sh"
HOSTS = [f"gpu{i:02d}" for i in range(1, 9)]


def _sbatch_options() -> dict[str, str]:
    options = {}
    for line in SBATCH.read_text().splitlines():
        if m := re.match(r"#SBATCH\s+--([\w-]+)(?:=(\S+))?", line):
            options[m.group(1)] = m.group(2) or ""
    return options


@pytest.mark.parametrize("script", [SBATCH, TORCHRUN], ids=lambda p: p.name)
def test_scripts_parse_and_are_executable(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert os.access(script, os.X_OK), f"chmod +x {script.relative_to(ROOT)}"


def test_sbatch_asks_for_one_torchrun_per_node() -> None:
    options = _sbatch_options()
    assert int(options["nodes"]) >= 2, "the multi-node job (the small scale: --nodes=1)"
    assert options["ntasks-per-node"] == "1", "torchrun starts the node's ranks itself"
    assert int(options["gpus-per-node"]) >= 1
    assert "ntasks" not in options and "gpus" not in options  # no competing totals


def _sbatch_dry_run() -> str:
    env = {"PATH": os.environ["PATH"], "DRY_RUN": "1", "HOME": os.environ.get("HOME", "/")}
    proc = subprocess.run(
        ["bash", str(SBATCH)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_sbatch_dry_run_sets_nccl_logging_and_launches_torchrun_with_srun() -> None:
    out = _sbatch_dry_run()
    assert "NCCL_DEBUG=INFO" in out and "NCCL_DEBUG_SUBSYS=INIT,NET" in out
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in out
    launch = shlex.split(out.strip().splitlines()[-1])
    assert launch[0] == "srun" and "--kill-on-bad-exit=1" in launch
    assert (ROOT / launch[-1]) == TORCHRUN


def _torchrun_dry_run(tmp_path: Path, gpus: str) -> list[str]:
    fake = tmp_path / "bin"
    fake.mkdir()
    scontrol = fake / "scontrol"
    scontrol.write_text(
        '#!/bin/bash\n[[ "$1 $2 $3" == "show hostnames gpu[01-08]" ]] || exit 2\n'
        + "".join(f"echo {h}\n" for h in HOSTS)
    )
    scontrol.chmod(0o755)
    env = {
        "PATH": f"{fake}:{os.environ['PATH']}",
        "DRY_RUN": "1",
        "SLURM_JOB_NODELIST": "gpu[01-08]",
        "SLURM_JOB_NUM_NODES": _sbatch_options()["nodes"],
        "SLURM_GPUS_ON_NODE": gpus,
        "SLURM_JOB_ID": "4242",
        "CONFIG": "cluster/config.json",
        "OUT": "runs/scaling.json",
    }
    proc = subprocess.run(
        ["bash", str(TORCHRUN)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout)


def test_torchrun_command_parses_with_rendezvous_on_the_first_node(tmp_path: Path) -> None:
    from torch.distributed.run import get_args_parser

    from mlinfra_lab.scaling.harness import build_parser

    gpus = _sbatch_options()["gpus-per-node"]
    cmd = _torchrun_dry_run(tmp_path, gpus)
    assert cmd[:3] == ["python", "-m", "torch.distributed.run"]
    args = get_args_parser().parse_args(cmd[3:])
    assert args.nnodes == _sbatch_options()["nodes"]
    assert args.nproc_per_node == gpus
    assert args.rdzv_backend == "c10d"
    assert args.rdzv_endpoint == f"{HOSTS[0]}:29500"
    assert args.rdzv_id == "4242" and args.max_restarts == 0
    assert args.module and args.training_script == "mlinfra_lab.scaling.harness"
    harness = build_parser().parse_args(args.training_script_args)
    assert harness.config == "cluster/config.json" and harness.out == "runs/scaling.json"


def test_torchrun_refuses_to_start_without_gpus_from_slurm(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_NUM_NODES": "1"}
    proc = subprocess.run(["bash", str(TORCHRUN)], capture_output=True, text=True, env=env)
    assert proc.returncode != 0 and "--gpus-per-node" in proc.stderr


def test_committed_config_is_the_gpu_config_with_hang_settings() -> None:
    config = RunConfig.from_dict(json.loads((ROOT / "cluster" / "config.json").read_text()))
    assert config == RunConfig.for_gpu(timeout_s=600.0, pg_timeout_s=600.0, stack_dump_s=300.0)
    assert 0 < config.stack_dump_s < config.pg_timeout_s  # the dumps come before the timeout
