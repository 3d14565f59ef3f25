"""The course's pytest plugin: quarantine known-flaky tests, and update references on purpose.

Contract: a test marked ``@pytest.mark.quarantine(reason="...", issue="#12")`` still runs
and is reported, but its failure does not fail the session; a quarantine without an issue
reference is a collection error; the terminal summary lists every quarantined test with
its outcome. ``--update-references WHY`` rewrites tolerance references, recording WHY.

Design decisions:
- Quarantine, not retry: a retried test turns a red build green without anyone looking,
  and trains the team to press "re-run". A quarantined test keeps running, so its outcome
  stays visible and the issue that tracks it has fresh evidence, but it is outside the
  merge-blocking gate. The plugin refuses ``--reruns`` (pytest-rerunfailures) for the same
  reason.
- The issue reference is mandatory: a quarantine nobody tracks is a deleted test.
- A failed quarantined report is turned into a "skipped" outcome carrying ``wasxfail``,
  which is how pytest itself keeps an xfail out of the exit status; its status category is
  ``quarantined`` (letter ``Q``), so the summary line counts it apart from passes and fails.
- Opt-in: ``pytest -p mlinfra_lab.ci.pytest_plugin``, or that ``-p`` in a project's
  ``addopts`` (this repository's pyproject.toml has it). No ``pytest11`` entry point: an
  installed package must not change every pytest run where it is installed (a Colab
  kernel's, another project's). It imports nothing heavy.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["QUARANTINE_KEY"]

# config.stash[QUARANTINE_KEY]: [(nodeid, phase, outcome, reason, issue, error line)]
QUARANTINE_KEY = pytest.StashKey[list]()
_UPDATE_ENV = "MLINFRA_UPDATE_REFERENCES"  # read by mlinfra_lab.ci.references
_SAVED_ENV = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mlinfra", "mlinfra course")
    group.addoption(
        "--update-references",
        metavar="WHY",
        default=None,
        help="rewrite tolerance references (tests/references/*.json) with the values of "
        "this run, recording WHY in each entry; review the diff before committing",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "quarantine(reason, issue): known-flaky test: runs and is reported, but is kept "
        "out of the pass/fail gate; issue= (a tracked issue reference) is required",
    )
    config.stash[QUARANTINE_KEY] = []
    if getattr(config.option, "reruns", 0):
        raise pytest.UsageError(
            "automatic re-runs are off in this project: a flaky test is a bug to fix or to "
            "quarantine with @pytest.mark.quarantine(reason=..., issue=...), not to retry"
        )
    reason = config.getoption("--update-references", default=None)
    if reason is not None:
        if not reason.strip():
            raise pytest.UsageError("--update-references needs a reason: --update-references 'WHY'")
        config.stash[_SAVED_ENV] = os.environ.get(_UPDATE_ENV)
        os.environ[_UPDATE_ENV] = reason


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SAVED_ENV in config.stash:
        saved = config.stash[_SAVED_ENV]
        if saved is None:
            os.environ.pop(_UPDATE_ENV, None)
        else:
            os.environ[_UPDATE_ENV] = saved


def _quarantine(item: pytest.Item) -> tuple[str, str] | None:
    marker = item.get_closest_marker("quarantine")
    if marker is None:
        return None
    reason = marker.kwargs.get("reason", marker.args[0] if marker.args else "")
    issue = marker.kwargs.get("issue", marker.args[1] if len(marker.args) > 1 else "")
    return str(reason), str(issue).strip()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        found = _quarantine(item)
        if found is not None and not found[1]:
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.quarantine needs an issue reference, e.g. "
                "@pytest.mark.quarantine(reason='seed-dependent loss', issue='#12'): a "
                "quarantine that no issue tracks is a silently deleted test"
            )


def _error_line(report: pytest.TestReport) -> str:
    """The first ``E   ...`` line of a failure, so the summary shows what went wrong."""
    lines = [ln[1:].strip() for ln in report.longreprtext.splitlines() if ln.startswith("E ")]
    return lines[0] if lines else (report.longreprtext.strip().splitlines() or [""])[-1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    found = _quarantine(item)
    if found is None:
        return
    reason, issue = found
    report.quarantine = (reason, issue)
    if report.when == "call" or report.failed:
        result = "failed" if report.failed else report.outcome
        detail = _error_line(report) if report.failed else ""
        item.config.stash[QUARANTINE_KEY].append(
            (item.nodeid, report.when, result, reason, issue, detail)
        )
    if report.failed:
        report.outcome = "skipped"
        report.wasxfail = f"quarantined ({issue}): {reason}"


def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, str] | None:
    quarantine = getattr(report, "quarantine", None)
    if quarantine is None:
        return None
    if getattr(report, "wasxfail", "").startswith("quarantined"):
        return "quarantined", "Q", "QUARANTINED (failed)"
    if report.when == "call":
        return "quarantined", "q", f"QUARANTINED ({report.outcome})"
    return None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    entries = config.stash.get(QUARANTINE_KEY, [])
    if not entries:
        return
    terminalreporter.section("quarantined tests (outside the pass/fail gate)", sep="=")
    for nodeid, when, result, reason, issue, detail in entries:
        phase = "" if when == "call" else f" in {when}"
        terminalreporter.line(f"{result.upper()}{phase} {nodeid} [{issue}] {reason}")
        if detail:
            terminalreporter.line(f"    {detail}")
    failed = sum(1 for entry in entries if entry[2] == "failed")
    terminalreporter.line(
        f"{len(entries)} quarantined, {failed} failed this run: fix them and drop the marker; "
        "do not retry"
    )
