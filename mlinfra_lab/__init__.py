"""mlinfra_lab: the executable companion of the mlinfra course on ML training infrastructure.

The package reads like the syllabus; each sub-package is one chapter and is imported on
demand (nothing heavy happens when you ``import mlinfra_lab``):

- ``mlinfra_lab.runtime``    where am I running: device, versions, problem sizes, Triton mode
- ``mlinfra_lab.attention``  1. fused attention on Tensor Cores (Triton FlashAttention)
- ``mlinfra_lab.scaling``    2. debugging poor multi-GPU scaling (profiler harness, cost model)
- ``mlinfra_lab.ci``         3. CI for ML training code (seeding, tolerances, flaky tests)
- ``mlinfra_lab.tracking``   4. an experiment-tracking backend (metadata, artifacts, lineage)
- ``mlinfra_lab.staleness``  5. staleness in asynchronous training (parameter-server simulator)
- ``mlinfra_lab.grading``    release, grade and validate the lab notebooks
- ``mlinfra_lab.results``    the committed benchmark results, in a checkout or a wheel
- ``mlinfra_lab.errors``     `MlinfraError`, the base of every error the package raises
- ``mlinfra_lab.progress``   progress bars drawn on a terminal only (a summary line in logs)
- ``mlinfra_lab.cli``        the ``mlinfra-lab`` command
"""

from mlinfra_lab import runtime

__all__ = ["runtime", "__version__"]
# The one place the version is written: pyproject.toml reads it (dynamic version), so do the
# notebooks' set-up cells and .ci/release. A release adds its section to CHANGELOG.md.
__version__ = "0.1.0"
