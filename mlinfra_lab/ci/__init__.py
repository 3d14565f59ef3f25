"""Chapter 3: CI for ML training code: seeded, tolerance-based, flake-hunting checks.

The four CI tiers and the module that serves each:

- fast unit tests, seeded: ``seeding`` (``seed_everything``, ``deterministic``), the units
  they test (``build_tiny_model``, ``regression_loss``, ``Augment``, ``make_dataset``), and the
  pytest plugin ``pytest_plugin`` (``@pytest.mark.quarantine``, ``--update-references``)
- environment reproducibility: ``lockfile`` (``check_lockfile``, ``write_lockfile``) and
  ``lock_compile`` (``compile_lockfile``: the resolver's hashed lock, ``make lock``)
- small integration training runs: ``train`` (``train_tiny``), ``references``
  (``assert_close_to_reference``, ``assert_decreasing``), ``spread`` (``measure_spread``,
  ``derive_band``: the band from the legitimate spread), ``checkpoint``
  (``checkpoint_roundtrip``), and the distributed tier ``ddp`` (``ddp_check``)
- artifact validation: ``artifacts`` (``validate_artifacts``)

a small training repository for Lab 3's gate, with the edits a gate must accept or reject:
``repository`` (``make_repository``, ``LEGITIMATE_CHANGES``, ``BUGS``);

and, when a check turns out flaky, ``flaky`` (``detect_flaky``, ``find_unseeded_source``);
what ``deterministic()`` costs, under two timing protocols: ``determinism_cost``
(``measure_determinism_cost``), and on a CUDA device, with what it buys in repeatability:
``gpu_determinism`` (``measure_gpu_determinism_cost``).
Importing this package imports numpy/torch only when a function needs them.
"""

from mlinfra_lab.ci.artifacts import (
    TRAIN_TINY_ARTIFACTS,
    ArtifactError,
    ArtifactReport,
    validate_artifacts,
)
from mlinfra_lab.ci.checkpoint import CheckpointMismatch, CheckpointReport, checkpoint_roundtrip
from mlinfra_lab.ci.ddp import (
    DDP_REGRESSIONS,
    DdpCheckError,
    DdpReport,
    ddp_check,
    gloo_unavailable,
)
from mlinfra_lab.ci.determinism_cost import measure_determinism_cost
from mlinfra_lab.ci.flaky import (
    BisectReport,
    FlakyReport,
    RunOutcome,
    Trial,
    detect_flaky,
    find_unseeded_source,
)
from mlinfra_lab.ci.gpu_determinism import NoCudaDeviceError, measure_gpu_determinism_cost
from mlinfra_lab.ci.jsonfile import JsonFileError
from mlinfra_lab.ci.lock_compile import LockCompileError, compile_lockfile
from mlinfra_lab.ci.lockfile import (
    LockfileError,
    LockReport,
    Mismatch,
    check_lockfile,
    parse_lockfile,
    write_lockfile,
)
from mlinfra_lab.ci.references import (
    NotDecreasingError,
    ReferenceFileError,
    ReferenceMismatch,
    assert_close_to_reference,
    assert_decreasing,
)
from mlinfra_lab.ci.repository import BUGS, LEGITIMATE_CHANGES, RepoSpec, make_repository
from mlinfra_lab.ci.seeding import (
    RNG_SOURCES,
    derive_seed,
    deterministic,
    reseed,
    seed_everything,
)
from mlinfra_lab.ci.spread import (
    BASELINE,
    LEGITIMATE_VARIANTS,
    Band,
    SpreadReport,
    Variant,
    VariantError,
    derive_band,
    measure_spread,
    run_variant,
)
from mlinfra_lab.ci.train import (
    PIN_SEED,
    REGRESSIONS,
    TRAIN_SOURCES,
    Augment,
    TrainConfig,
    TrainResult,
    build_tiny_model,
    make_dataset,
    regression_loss,
    train_tiny,
    train_tiny_final_loss,
)

__all__ = [
    # seeding and determinism
    "RNG_SOURCES",
    "derive_seed",
    "deterministic",
    "reseed",
    "seed_everything",
    "measure_determinism_cost",
    "measure_gpu_determinism_cost",
    "NoCudaDeviceError",
    # the tiny training run
    "PIN_SEED",
    "REGRESSIONS",
    "TRAIN_SOURCES",
    "Augment",
    "TrainConfig",
    "TrainResult",
    "build_tiny_model",
    "make_dataset",
    "regression_loss",
    "train_tiny",
    "train_tiny_final_loss",
    # tolerance references and directional checks
    "NotDecreasingError",
    "ReferenceFileError",
    "ReferenceMismatch",
    "assert_close_to_reference",
    "assert_decreasing",
    # the legitimate spread and the band derived from it
    "BASELINE",
    "Band",
    "LEGITIMATE_VARIANTS",
    "SpreadReport",
    "Variant",
    "VariantError",
    "derive_band",
    "measure_spread",
    "run_variant",
    # a small training repository and the edits a gate must accept or reject
    "BUGS",
    "LEGITIMATE_CHANGES",
    "RepoSpec",
    "make_repository",
    # the distributed tier
    "DDP_REGRESSIONS",
    "DdpCheckError",
    "DdpReport",
    "ddp_check",
    "gloo_unavailable",
    # checkpoints and artifacts
    "ArtifactError",
    "ArtifactReport",
    "CheckpointMismatch",
    "CheckpointReport",
    "JsonFileError",
    "TRAIN_TINY_ARTIFACTS",
    "checkpoint_roundtrip",
    "validate_artifacts",
    # environment lock
    "LockCompileError",
    "LockReport",
    "LockfileError",
    "Mismatch",
    "check_lockfile",
    "compile_lockfile",
    "parse_lockfile",
    "write_lockfile",
    # flake hunting
    "BisectReport",
    "FlakyReport",
    "RunOutcome",
    "Trial",
    "detect_flaky",
    "find_unseeded_source",
]
