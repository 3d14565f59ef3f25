"""Suite-wide test set-up: every test starts from the same seeds.

The course's pytest plugin (``mlinfra_lab.ci.pytest_plugin``, loaded by ``-p`` in
pyproject.toml's addopts: it is opt-in) adds
``@pytest.mark.quarantine(reason=..., issue=...)`` and ``--update-references WHY``; this
file seeds Python, NumPy and torch from one base seed before each test, so a test that
forgets to seed still repeats itself (chapter 3: a flaky test is a bug, not a retry).

The ``install`` tests (fresh venvs, pip installs from the index) run last: in CI,
``.ci/fresh-venv.sh`` downloads about 3.7 GB beside ``make test`` in its first minutes, and
the install tests' own index fetches, queued behind it, took up to ten times as long as on
a quiet machine. By the time they run at the end of their lane, that download is done.
"""

import pytest

from mlinfra_lab.ci import seed_everything


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    seed_everything(0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``install`` tests after the rest, in their collected order (see the docstring)."""
    items.sort(key=lambda item: item.get_closest_marker("install") is not None)
