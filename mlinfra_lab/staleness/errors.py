"""Exceptions of `mlinfra_lab.staleness`: each message says what to change.

Contract: invalid simulator inputs raise `StalenessConfigError` (a ``ValueError``) before any
work is done; a run that cannot make progress raises `SimulationStalledError` instead of
hanging. A run whose loss blows up is *not* an error: its `SimResult` is marked ``diverged``.
"""

from __future__ import annotations

from mlinfra_lab.errors import MlinfraError

__all__ = ["SimulationStalledError", "StalenessConfigError"]


class StalenessConfigError(MlinfraError, ValueError):
    """A bad argument: negative bound, no workers, non-finite learning rate, ..."""


class SimulationStalledError(MlinfraError, RuntimeError):
    """The event budget ran out before the requested number of updates was applied."""
