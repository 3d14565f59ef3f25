#!/bin/bash
# One node's launcher, started by `srun` from train.sbatch: torchrun with a c10d rendezvous
# on the job's first node, one rank per GPU of this node. With DRY_RUN set it prints the
# command instead of running it.
set -euo pipefail

: "${SLURM_JOB_NODELIST:?run under srun (from cluster/train.sbatch)}"
: "${SLURM_JOB_NUM_NODES:?run under srun (from cluster/train.sbatch)}"
: "${SLURM_GPUS_ON_NODE:?ask Slurm for GPUs with --gpus-per-node}"
: "${CONFIG:?set CONFIG to a RunConfig JSON file}"
: "${OUT:?set OUT to the result file rank 0 writes}"

# All of scontrol's output is read (a `| head -n 1` would end it with SIGPIPE, which
# pipefail turns into a failed job).
mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_node=${hosts[0]:?scontrol listed no hosts for $SLURM_JOB_NODELIST}
port=${RDZV_PORT:-29500}

cmd=(
  python -m torch.distributed.run
  --nnodes="$SLURM_JOB_NUM_NODES"
  --nproc-per-node="$SLURM_GPUS_ON_NODE"
  --rdzv-backend=c10d
  --rdzv-endpoint="$head_node:$port"
  --rdzv-id="${SLURM_JOB_ID:-mlinfra}"
  --max-restarts=0
  -m mlinfra_lab.scaling.harness
  --config "$CONFIG"
  --out "$OUT"
)
if [[ -n "${DRY_RUN:-}" ]]; then
  printf '%q ' "${cmd[@]}"
  echo
else
  exec "${cmd[@]}"
fi
