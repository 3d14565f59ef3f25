"""Both implementations satisfy `TrackingAPI`: a module that only mypy reads.

Contract: ``make lint``'s mypy checks the assignments below; each fails to type-check when
`TrackingStore` or `TrackingClient` (or `Run`, `RemoteRun`) drifts from the written
contract in `api`. Nothing imports this module, and importing it does nothing at run time.

Design decision: the check lives apart from `api`, because `store` and `server.client`
import `api` (for `HasNode`); had `api` imported them back, even under ``TYPE_CHECKING``,
the package would have an import cycle (`tests/test_package_imports.py` counts type-only
imports as dependencies).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlinfra_lab.tracking.api import RunAPI, TrackingAPI
    from mlinfra_lab.tracking.run import Run
    from mlinfra_lab.tracking.server.client import TrackingClient
    from mlinfra_lab.tracking.server.remote_run import RemoteRun
    from mlinfra_lab.tracking.store import TrackingStore

    _store: type[TrackingAPI] = TrackingStore
    _client: type[TrackingAPI] = TrackingClient
    _run: type[RunAPI] = Run
    _remote_run: type[RunAPI] = RemoteRun
