#!/usr/bin/env bash
# The set-up a student's machine runs, proven from nothing: a copy of the checkout as a
# clone has it, a fresh venv under /tmp, pip cut off from this machine's configuration,
# `make setup` and `make notebooks` as README says, then chapter 5 under nbval there.
#
# Decisions:
# - The copy holds what git tracks (and untracked files git does not ignore): no .venv,
#   _build or egg-info of the checkout, and nothing is written into the checkout, so this
#   runs beside `make test` (.ci/run) without the two editable installs meeting.
# - pip as on a laptop: no config file (PIP_CONFIG_FILE=/dev/null: no local wheel folder,
#   no extra index, no constraint), no PIP_* variables, no cache, public PyPI only.
# - torch: the Makefile's default, PyTorch's CPU index, where it answers. Where it does
#   not (this CI reaches PyPI only), the fallback is what PyPI gives this platform, said so
#   in the log: on Linux x86-64 that is the CUDA build with its nvidia-* libraries (about
#   3 GB), which imports and runs on a machine without a GPU. Installing PyPI's torch with
#   --no-deps to save the download would not be the student's environment (it does not
#   import without them: "libcudnn.so.9: cannot open shared object file"), so it is not done.
# - `make setup` installs the lock with `pip install --require-hashes` (every file checked
#   against the sha256 the lock lists, from public PyPI here), then it is checked in the
#   fresh environment (`check_lockfile`): its torch==X matches the CPU build and PyPI's.
#   PyPI's CUDA build pins its own triton (torch 2.13.0: 3.7.1, the lock's CPU environment
#   has 3.9.0): `make setup` drops the lock's triton entry, hashes and all, and lets that pin
#   win (.ci/lock_for_torch.py); this check accepts that difference only on the fallback.
# - Kept from the caller's environment: the TLS trust settings (REQUESTS_CA_BUNDLE,
#   SSL_CERT_FILE: a CI network's proxy CA), which say whom to trust, not where packages are.
# - The log ends with the seconds each step took, the bytes this machine received meanwhile
#   (/proc/net/dev: the downloads, plus whatever else ran) and the venv's size; the venv is
#   deleted at the end, also on failure (FRESH_KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/mlinfra-fresh.XXXXXX")
[ "${FRESH_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
mkdir "$work/clone"
if [ -d .git ]; then
  git ls-files -co --exclude-standard -z \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$work/clone"
else
  tar --exclude=./.venv --exclude=./_build --exclude='*.egg-info' -cf - . | tar -xf - -C "$work/clone"
fi
cd "$work/clone"
log() { printf 'fresh-venv: %s\n' "$*"; }
step() { log "$1: $(( $(date +%s) - t0 )) s"; t0=$(date +%s); }

for var in $(env | sed -n 's/^\(PIP_[A-Z_]*\)=.*/\1/p'); do unset "$var"; done
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV JUPYTER_PATH TRITON_INTERPRET
export PIP_CONFIG_FILE=/dev/null PIP_INDEX_URL=https://pypi.org/simple
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export PYTHONNOUSERSITE=1
PYTHON=${PYTHON:-python3}
received() {  # bytes received on every network interface but loopback, from /proc/net/dev
  $PYTHON -c 'import re; print(sum(int(re.split(r"[:\s]+", l.strip())[1]) for l in open("/proc/net/dev").readlines()[2:] if not l.strip().startswith("lo:")))' 2>/dev/null || echo 0
}
rx0=$(received)
cpu_index=$(make -s --no-print-directory -f Makefile print-torch-cpu-index)
log "python: $($PYTHON -c 'import platform, sys; print(sys.version.split()[0], platform.system(), platform.machine())')"
log "pip: no configuration, index $PIP_INDEX_URL only"

if $PYTHON - "$cpu_index/torch/" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=15).close()
except OSError as err:
    print(f"fresh-venv: PyTorch's CPU index {sys.argv[1]} is unreachable ({err})")
    sys.exit(1)
PY
then
  torch_index=$cpu_index
  log "torch: the CPU build from $cpu_index (the Makefile's default)"
else
  torch_index=
  log "torch: FALLBACK: PyPI's torch for this platform (on Linux x86-64 the CUDA build and"
  log "       its nvidia-* libraries), as a student's pip would get it without the CPU index"
fi

t0=$(date +%s)
make --no-print-directory setup VENV="$work/venv" PYTHON="$PYTHON" TORCH_INDEX="$torch_index"
step "make setup"
"$work/venv/bin/mlinfra-lab" info
(cd /tmp && "$work/venv/bin/python" -c 'import mlinfra_lab, torch; print("fresh-venv: mlinfra_lab from", mlinfra_lab.__file__, "| torch", torch.__version__, "from", torch.__file__)')
# The lock, checked in the fresh environment: it must match, except (fallback only) where
# the torch build pins its own version (.ci/lock_for_torch.py says which).
"$work/venv/bin/python" - "$torch_index" <<'PY'
import sys
sys.path.insert(0, ".ci")
from lock_for_torch import torch_pins
from mlinfra_lab.ci import check_lockfile

report, cpu_path = check_lockfile("requirements.lock"), bool(sys.argv[1])
print(report)
allowed = set() if cpu_path else set(torch_pins())
unexpected = [m for m in report.mismatches if m.name not in allowed]
if unexpected:
    sys.exit(f"fresh-venv: the fresh environment differs from requirements.lock: {unexpected}")
for m in report.mismatches:
    print(f"fresh-venv: {m.name} {m.installed} is the torch build's own pin (fallback), not the lock's")
PY
make --no-print-directory notebooks VENV="$work/venv" NOTEBOOKS=book/05_staleness.ipynb
step "chapter 5 under nbval"

installed=$(du -sm "$work/venv" | cut -f1)
log "received $(( ($(received) - rx0) / 1000000 )) MB over the network; the venv is ${installed} MB on disk"
log "passed in $(( $(date +%s) - start )) s"
