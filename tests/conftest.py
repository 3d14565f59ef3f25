"""Suite-wide test set-up: every test starts from the same seeds.

The course's pytest plugin (``mlinfra_lab.ci.pytest_plugin``, loaded by ``-p`` in
pyproject.toml's addopts: it is opt-in) adds
``@pytest.mark.quarantine(reason=..., issue=...)`` and ``--update-references WHY``; this
file seeds Python, NumPy and torch from one base seed before each test, so a test that
forgets to seed still repeats itself (chapter 3: a flaky test is a bug, not a retry).
"""

import pytest

from mlinfra_lab.ci import seed_everything


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    seed_everything(0)
