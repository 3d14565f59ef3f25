# mlinfra course: set-up and targets. `make book` and `make test` are all a newcomer needs.
#
#   make book     create .venv, install, execute every notebook, build _build/html
#   make test     the whole suite: lint (ruff, mypy), unit tests, lab validation, the book build
#                 (which executes every chapter: a cell that raises fails it) and the browser test (what CI runs, via .ci/run); starts a
#                 throwaway PostgreSQL server for the tracking tests where one is installed.
#                 It first checks the system packages it needs (make check-system):
#                 apt-get install bubblewrap chromium postgresql nginx
#   make release-labs   regenerate book/labs/ (the student edition of labs/) after editing labs/
#   make release-check  before a release: the README shows the newest GPU notebook record
#   make test-gpu on a CUDA GPU: the device unit tests, then every chapter and lab under nbval
#                 at GPU sizes, recorded in benchmarks/results/GPU-notebooks-DATE.json
#   make lab      JupyterLab on the repository
#   make lock     regenerate requirements.lock: requirements.txt resolved for every platform,
#                 with hashes (uv; the previous lock's versions kept where they still fit)
#   make bench-attention | bench-scaling | bench-ci | bench-tracking | bench-staleness
#                 benchmarks, each written to benchmarks/results/DEVICE-TOPIC-YYYY-MM-DD.json

PYTHON   ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
# Without a GPU, torch's CPU build is installed first (PyPI's Linux torch is the CUDA build:
# about 3 GB with its CUDA libraries). It comes from PyTorch's CPU index, except where a local
# wheel folder (pip's find-links, as on the course machines) already holds a torch wheel.
# Override either: make setup TORCH_INDEX=https://mirror/whl/cpu, or TORCH_INDEX= for plain pip.
# Where a GPU is present, requirements.txt's range picks a CUDA build.
TORCH_CPU_PIN   ?= torch==2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
LOCAL_WHEELS    ?= $(PIP_FIND_LINKS)
TORCH_INDEX     ?= $(if $(wildcard $(addsuffix /torch-*.whl,$(LOCAL_WHEELS))),,$(TORCH_CPU_INDEX))
HAS_GPU  := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
PYTEST   := $(BIN)/python -m pytest
export PYTHONHASHSEED := 0
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: setup book test test-gpu test-stages unit notebooks validate browser lint lab lock check-lock \
        release-labs check-student-labs release-check clean print-torch-cpu-index check-system \
        bench-attention bench-scaling bench-ci bench-tracking bench-staleness

setup: $(STAMP)

$(STAMP): requirements.txt requirements.lock pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
ifeq ($(HAS_GPU),)
	$(BIN)/python -m pip install -q "$(TORCH_CPU_PIN)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	# The CPU environment is locked with hashes (requirements.lock, `make lock`): CI gets exactly
	# it, and pip refuses any file whose sha256 the lock does not list. Its torch==X line (no
	# hash) is the build just installed, and goes; its triton entry applies on Linux only, and
	# yields to the triton a CUDA build of torch pins itself (PyPI's, with TORCH_INDEX=).
	$(BIN)/python .ci/lock_for_torch.py requirements.lock > $(VENV)/requirements.lock
	$(BIN)/python -m pip install -q --require-hashes -r $(VENV)/requirements.lock
endif
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mlinfra)" >/dev/null
	touch $@

# Browser-side libraries (widget manager, MathJax) from the npm registry, so the book renders
# offline; without npm the pages load them from a CDN instead.
_vendor/.stamp: book/_ext/vendor-libs.sh
	bash book/_ext/vendor-libs.sh
	touch $@

# The book publishes the student edition of the labs (book/labs/, committed: the launch
# buttons open it in the public repository), never the instructor source labs/.
STUDENT_LABS := $(BIN)/python book/_ext/student_labs.py labs book/labs

release-labs: setup
	$(STUDENT_LABS)

check-student-labs: setup
	$(STUDENT_LABS) --check

book: setup _vendor/.stamp check-student-labs
	$(BIN)/jupyter-book build . --all -W --keep-going
	@echo
	@echo "The book is built: open file://$(CURDIR)/_build/html/index.html"

# ruff's rules and the formatter (pyproject.toml [tool.ruff]): `ruff format mlinfra_lab tests` fixes
# what the format check finds. Then mypy on the package (pyproject.toml [tool.mypy]).
lint: setup
	$(BIN)/ruff check mlinfra_lab tests
	$(BIN)/ruff format --check mlinfra_lab tests
	$(BIN)/mypy

unit: setup
	$(PYTEST) -m "not notebooks and not browser" --durations=8 tests

# The unit tests in two halves for `make test`'s lanes: the ones that mostly wait (the grading
# tests' sandboxed kernels, budgets and timeouts; the install tests' pip and fresh venvs), and
# the rest. Together they are `make unit`.
WAITING := grading or install
unit-waiting: setup
	$(PYTEST) -m "($(WAITING)) and not notebooks and not browser" --durations=8 tests
unit-quick: setup
	$(PYTEST) -m "not ($(WAITING)) and not notebooks and not browser" --durations=8 tests

# The chapters under nbval. Not a stage of `make test`: its book stage executes every chapter
# under the same rule (`allow_errors: false` with `-W`: a cell that raises fails the build),
# and running them twice cost CI three minutes. The instructor labs run in `validate` (their
# source, their release and every wrong answer, as `grade` runs them); book/labs/ is not run
# (stubs raise by design). NOTEBOOKS= narrows it (.ci/fresh-venv.sh runs chapter 5 alone in a
# fresh environment; `make test-gpu` runs every notebook under nbval at GPU sizes).
NOTEBOOKS ?= book
notebooks: setup
	$(PYTEST) --nbval-lax --nbval-cell-timeout=900 --ignore=book/labs $(NOTEBOOKS)

validate: setup
	$(BIN)/mlinfra-lab validate labs --jobs 2

# The built book: first the student edition (files only: no solution or hidden test in
# _build/html, launch buttons on book/labs/), then every page in headless Chromium
# (.ci/chromium.py finds it, or tries Playwright's own download, or says how to install it).
browser: setup
	$(PYTEST) -m browser tests/test_student_edition.py
	chromium=$$($(BIN)/python .ci/chromium.py) && \
	  MLINFRA_CHROMIUM="$$chromium" $(PYTEST) -m browser tests --ignore=tests/test_student_edition.py

# The environment must match the committed lock (chapter 3, tier 2): drift fails the build.
# The lock pins the CPU environment; a GPU machine (CUDA torch build) is not checked against it.
check-lock: setup
ifeq ($(HAS_GPU),)
	$(BIN)/mlinfra-lab ci check-lock requirements.lock
else
	@echo "check-lock: skipped: requirements.lock pins the CPU environment, this machine has a GPU"
endif

# `make test` runs the stages under .ci/with-postgres.sh: it starts a throwaway PostgreSQL
# server (unless MLINFRA_PG_URL is set) so the tracking suite runs on both backends, stops it
# even when a stage fails, and ends with a summary that says what was skipped and why.
test: check-system setup
	@bash .ci/with-postgres.sh $(MAKE) --no-print-directory test-stages

# The system packages `make test` needs, checked before anything is installed: one line per
# missing one, naming what it is for and the Debian/Ubuntu package. bubblewrap is required
# (the grading tests attack the grader from inside its sandbox; it is Linux-only, so `make
# test` runs on Linux, `make book` anywhere); without Chromium the browser stage tries
# Playwright's own download; without PostgreSQL the tracking suite runs on SQLite only; without
# nginx the tracking server's slow-client attacks run against the server alone, not behind it.
PG_BINS := $(wildcard /usr/lib/postgresql/*/bin/initdb)
check-system:
	@command -v bwrap >/dev/null || { echo "make test: bubblewrap (bwrap) is missing: the grading tests run submissions in its sandbox; apt-get install bubblewrap (Linux only)" >&2; exit 1; }
	@[ -n "$$MLINFRA_CHROMIUM" ] || [ -x /usr/bin/chromium ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
	  || echo "make test: note: no Chromium: the browser stage will try Playwright's download, else fail; apt-get install chromium" >&2
	@[ -n "$$MLINFRA_PG_URL" ] || [ -n "$(PG_BINS)" ] || command -v initdb >/dev/null \
	  || echo "make test: note: no PostgreSQL server programs (initdb): the tracking suite runs on SQLite only; apt-get install postgresql" >&2
	@[ -n "$$MLINFRA_NGINX" ] || [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null \
	  || echo "make test: note: no nginx: the tracking server's attacks behind a proxy are skipped; apt-get install nginx" >&2

# Three lanes at once (.ci/lanes.sh), each a list of stages run one after another; the first
# lane prints as it goes, the others when every lane has ended, with each stage's wall time.
# LANES=1 runs them all one after another. The lanes are balanced by CPU time on 2 cores
# (CI, 2026-12-08: unit-quick 838 s, unit-waiting 896 s, validate 791 s, book 198 s): lint and
# the lock check lead the first lane instead of delaying all three.
TEST_LANES := "lint check-lock unit-quick" "unit-waiting" "validate book browser"
test-stages:
	@MAKE="$(MAKE)" bash .ci/lanes.sh $(TEST_LANES)

# GPU: the unit tests that run on the device (GPU-marked ones, the attention kernels with one
# tile per shape class, Hogwild after CUDA is live), then every chapter and lab under nbval
# (60 s per cell at most) with a dated record of device, versions, pass/fail and seconds.
# On a machine with its own environment (no .venv): make test-gpu GPU_PY=python3 GPU_SETUP=
GPU_PY     ?= $(BIN)/python
GPU_SETUP  ?= setup
GPU_NAME   := $(shell nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | sed 's/NVIDIA //; s/ /-/g' | tr A-Z a-z)
GPU_JOBS   ?= 1
# extra pytest arguments for the unit tests, e.g. GPU_PYTEST_ARGS="-n 8" (pytest-xdist)
GPU_PYTEST_ARGS ?=
GPU_RECORD ?= benchmarks/results/$(or $(GPU_NAME),gpu)-notebooks-$(shell date -u +%Y-%m-%d).json
test-gpu: $(GPU_SETUP)
	@$(GPU_PY) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'make test-gpu needs a CUDA GPU (torch.cuda.is_available() is False): use make test')"
	MLINFRA_ATTENTION_AUTOTUNE=0 $(GPU_PY) -m pytest $(GPU_PYTEST_ARGS) -m "gpu or attention or staleness" tests
	$(GPU_PY) -m mlinfra_lab.ci.notebook_record --cell-timeout 60 --jobs $(GPU_JOBS) --out $(GPU_RECORD) book labs

# Release-time checks (the release workflow runs them before it builds): the README shows the
# newest GPU notebook record and names every notebook changed since (mlinfra_lab.ci.gpu_record_check).
# Not part of `make test`: no edit on a machine without a GPU can make a stale record fresh.
# Needs only Python and `packaging`, not the .venv.
release-check:
	PYTHONPATH=$(CURDIR) $(PYTHON) -m mlinfra_lab.ci.gpu_record_check $(CURDIR)

# For .ci/fresh-venv.sh: the index the set-up takes the CPU torch from off the course machines.
print-torch-cpu-index:
	@echo $(TORCH_CPU_INDEX)

lab: setup
	$(BIN)/jupyter lab

# The resolver is uv (`uv pip compile --universal --generate-hashes`, pinned by the lock
# itself): one file for every platform, with markers and every wheel's hash, that pip installs
# (mlinfra_lab/ci/lock_compile.py says why not pip-tools or `pip lock`). It reads pypi.org.
# LOCK_PYTHON: the oldest Python the lock serves. UPGRADE=1 lets every version move.
LOCK_PYTHON ?= 3.11
lock: setup
	$(BIN)/mlinfra-lab ci lock requirements.lock --python-version $(LOCK_PYTHON) $(if $(UPGRADE),--upgrade)

clean:
	rm -rf _build .pytest_cache

# Every `mlinfra-lab bench TARGET` takes --out FILE and defaults to
# benchmarks/results/DEVICE-TARGET-YYYY-MM-DD.json (DEVICE: cpu, h200, ...; UTC date).
bench-staleness: setup
	$(BIN)/mlinfra-lab bench staleness

# MLflow is an optional extra (pip install -e ".[bench]"); without it only this store is measured
# (in process, and through its server); with it, MLflow's SQLAlchemy store and its own server too
# (both servers' logging and run creation run at --server-scale, default --mlflow-scale).
# MLflow runs its log/create phases at 2% scale (it is ~100x slower per call) and its
# asynchronous logging at 20% (enough runs for its queue to matter); searches use 100k runs
# for both. These are the scales of the committed result that chapter 4 reads.
bench-tracking: setup
	$(BIN)/mlinfra-lab bench tracking --mlflow-scale 0.02 --mlflow-async-scale 0.2 --out benchmarks/results/cpu-tracking-$(shell date -u +%Y-%m-%d).json

# Attention: on a GPU the full bf16 sweep, checked against this GPU's committed baseline,
# benchmarks/baselines/<gpu>-attention.json (fails when a shape is >10% slower; a GPU with
# no baseline is timed unchecked; pass ATTN_BASELINE= to skip the check);
# on a CPU a tiny sweep under the Triton interpreter (tests the command, not the speed).
ATTN_BASELINE ?= $(if $(HAS_GPU),$(wildcard benchmarks/baselines/$(GPU_NAME)-attention.json))
bench-attention: setup
	$(if $(HAS_GPU),$(if $(ATTN_BASELINE),,@echo "bench-attention: no benchmarks/baselines/$(GPU_NAME)-attention.json: timing without a regression check"))
	$(BIN)/mlinfra-lab bench attention $(if $(ATTN_BASELINE),--check-baseline $(ATTN_BASELINE))

# Scaling: the all-reduce sweep and alpha-beta fit (gloo on a CPU, NCCL on GPUs).
bench-scaling: setup
	$(BIN)/mlinfra-lab bench scaling --nproc 2

# CI: what each CI tier of chapter 3 costs on this machine.
bench-ci: setup
	$(BIN)/mlinfra-lab bench ci
