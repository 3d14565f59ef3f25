#!/usr/bin/env bash
# The device calls of issue 32 (2026-12-05), one command each, as they ran:
#   bash benchmarks/experiments/device_session.sh experiments   # call 1
#   bash benchmarks/experiments/device_session.sh sweep         # call 2
#   bash benchmarks/experiments/device_session.sh notebooks     # call 3
# and of 2026-12-06's session:
#   bash benchmarks/experiments/device_session.sh round4        # the early rescale, the backward's host path
# and of 2026-12-07's:
#   bash benchmarks/experiments/device_session.sh taught        # chapter 1's alignment, swizzle and
#                                                               # taught-kernel (v1, split) sweep
#   bash benchmarks/experiments/device_session.sh record        # the notebooks under nbval only
#                                                               # (no device unit tests: a short call;
#                                                               # RECORD_PATHS="book/02_... labs/02_..." narrows it)
#   bash benchmarks/experiments/device_session.sh ci            # chapter 3's `bench ci` with its CUDA
#                                                               # section (what deterministic() costs there)
# The device has PyTorch and Triton but no Jupyter: call 3 carries py3.12 wheels in .whl/
# (device README) and installs only those whose distribution is missing there (wheels()).
# Every step runs under its own `timeout`, so one hang costs that step, not the call; every
# script rewrites its JSON after each row, so a step cut off keeps what it finished. Results go
# to $OUT (the device tool's folder; ./device-out elsewhere), at most 8 files.
set -u
OUT=${OUT:-device-out}
export OUT
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."

step() {  # step SECONDS NAME COMMAND...: run under a time limit, say how it ended
    local limit=$1 name=$2
    shift 2
    echo "== $(date -u +%T) start $name (limit ${limit}s)"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@"
    local rc=$?
    echo "== $(date -u +%T) end $name rc=$rc after $((SECONDS - t0))s"
    echo "$name rc=$rc seconds=$((SECONDS - t0))" >>"$OUT/steps.txt"
}

wheels() {  # install the carried wheels whose distribution the device lacks, into /tmp/site
    [ -d .whl ] || return 0
    python3 - <<'PY' >>"$OUT/steps.txt" 2>&1
import importlib.metadata as md, pathlib, subprocess, sys
need, have = [], []
for wheel in sorted(pathlib.Path(".whl").glob("*.whl")):
    name = wheel.name.split("-")[0]
    try:
        have.append(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        need.append(str(wheel))
print("wheels: present on the device:", " ".join(have))
print("wheels: installing:", " ".join(pathlib.Path(w).name for w in need))
subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                "--no-compile", "--no-cache-dir", "--target", "/tmp/site", *need], check=True)
PY
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
}

machine() {
    {
        date -u
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
            --format=csv
        python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"
        command -v ncu && ncu --version | tail -1
    } >>"$OUT/steps.txt" 2>&1
}

case "${1:-}" in
experiments)
    machine
    X=benchmarks/experiments
    step 170 fwd-r3 python3 $X/gluon_fwd_experiment.py --jobs 12 --out "$OUT/fwd-r3.json"
    step 170 bwd python3 $X/gluon_bwd_experiment.py --jobs 4 --out "$OUT/bwd.json"
    step 90 ws python3 $X/gluon_ws_experiment.py --jobs 6 --out "$OUT/ws.json"
    step 40 host python3 $X/host_overhead.py --breakdown --out "$OUT/host-breakdown.json"
    MLINFRA_ATTENTION_AUTOTUNE=0 step 110 kernel-tests python3 -m pytest -q -n 8 \
        -m "gpu or attention" tests/test_attention_kernel.py --junitxml="$OUT/kernel-tests.xml"
    ;;
round4)
    machine
    X=benchmarks/experiments
    MLINFRA_ATTENTION_AUTOTUNE=0 step 120 v5-tests python3 -m pytest -q -n 4 \
        -m "gpu or attention" -k "version_5" tests/test_attention_kernel.py
    step 300 fwd-r4 python3 $X/gluon_fwd_experiment.py --jobs 12 --passes 3 --out "$OUT/fwd-r4.json"
    step 90 host-bwd python3 $X/host_overhead.py --breakdown-backward --out "$OUT/host-bwd.json"
    ;;
sweep)
    machine
    shift
    # the Gluon kernels of the default path, against float64, before they are timed
    MLINFRA_ATTENTION_AUTOTUNE=0 step 90 gluon-tests python3 -m pytest -q -n 6 \
        -m "gpu or attention" -k "version_5 or gluon_backward or backward_switch" \
        tests/test_attention_kernel.py
    # checked against this GPU's baseline (benchmarks/baselines/h200-attention.json or h100-...)
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[12]00' | tr H h)
    step "${SWEEP_LIMIT:-330}" sweep python3 -m mlinfra_lab.cli bench attention --quiet \
        --providers "${PROVIDERS:-ours,sdpa_flash,sdpa_cudnn,flex,sdpa_efficient,eager}" \
        --repeats 3 --check-baseline "benchmarks/baselines/${gpu:-h200}-attention.json" \
        --head-dims 128,64 --out "$OUT/attention.json" "$@"
    step "${NCU_LIMIT:-130}" ncu python3 -m mlinfra_lab.attention.studies.counters --kernels \
        --causal "${NCU_CAUSAL:-no}" --out "$OUT/ncu-kernels.json"
    ;;
taught)
    machine
    S=mlinfra_lab.attention.studies
    step "${ALIGN_LIMIT:-240}" alignment python3 -m $S.alignment --out "$OUT/alignment.json"
    step "${SWIZZLE_LIMIT:-120}" swizzle python3 -m $S.swizzle --out "$OUT/swizzle.json"
    # the kernel chapter 1 teaches (forward version 1, the Triton split backward) beside the anchors
    MLINFRA_ATTENTION_BACKWARD=split step "${SWEEP_LIMIT:-200}" taught-sweep python3 -m mlinfra_lab.cli \
        bench attention --quiet --providers ours_v1,sdpa_flash,sdpa_cudnn,flex --repeats 3 \
        --head-dims 128,64 --out "$OUT/attention-taught.json"
    ;;
record)
    wheels
    machine
    export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd)"
    step "${RECORD_LIMIT:-300}" notebook-record python3 -m mlinfra_lab.ci.notebook_record \
        --cell-timeout 60 --jobs "${GPU_JOBS:-4}" --out "$OUT/notebooks.json" ${RECORD_PATHS:-book labs}
    ;;
notebooks)
    wheels
    machine
    # the notebooks' kernels start in book/ and labs/: the package must import from the root
    export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd)"
    step "${NOTEBOOKS_LIMIT:-470}" test-gpu bash -c 'set -o pipefail; make test-gpu \
        GPU_PY=python3 GPU_SETUP= GPU_JOBS="${GPU_JOBS:-4}" GPU_PYTEST_ARGS="-n ${PYTEST_JOBS:-8}" GPU_RECORD="$OUT/notebooks.json" \
        2>&1 | tee "$OUT/test-gpu.log"'
    if [ ! -s "$OUT/notebooks.json" ] && [ $((${CALL_LIMIT:-575} - SECONDS)) -gt 60 ]; then
        # the unit tests failed (or no make): the record anyway
        step $((${CALL_LIMIT:-575} - SECONDS)) notebook-record python3 -m mlinfra_lab.ci.notebook_record \
            --cell-timeout 60 --jobs "${GPU_JOBS:-4}" --out "$OUT/notebooks.json" book labs
    fi
    # on a Hopper GPU with time left: the sweep of the default kernel, checked against that
    # GPU's baseline (benchmarks/baselines/h200-attention.json or h100-attention.json)
    left=$((${CALL_LIMIT:-575} - SECONDS))
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[12]00' | tr H h)
    if [ -n "$gpu" ] && [ "$left" -gt 200 ]; then
        step "$left" sweep python3 -m mlinfra_lab.cli bench attention --quiet \
            --providers ours,sdpa_flash,sdpa_cudnn,flex --repeats 3 --head-dims 128,64 \
            --check-baseline "benchmarks/baselines/$gpu-attention.json" --out "$OUT/attention.json"
    else
        echo "sweep skipped: $(nvidia-smi --query-gpu=name --format=csv,noheader), ${left}s left" \
            >>"$OUT/steps.txt"
    fi
    ;;
ci)
    wheels
    machine
    step "${CI_LIMIT:-150}" bench-ci python3 -m mlinfra_lab.cli bench ci --repeats 3 \
        --rounds "${CI_ROUNDS:-8}" --out "$OUT/ci.json"
    ;;
*)
    echo "usage: $0 experiments|round4|sweep|taught|record|notebooks|ci" >&2
    exit 2
    ;;
esac
