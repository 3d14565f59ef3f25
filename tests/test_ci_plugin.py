"""Chapter 3: the quarantine pytest plugin and --update-references, driven with pytester;
and tier 2, the environment lock (check_lockfile, write_lockfile, `mlinfra-lab ci`).
"""

import os
import textwrap

import pytest

from mlinfra_lab.ci import LockfileError, check_lockfile, parse_lockfile, write_lockfile
from mlinfra_lab.cli import main

pytestmark = pytest.mark.ci
pytest_plugins = ["pytester"]

# The plugin is opt-in (no pytest11 entry point): each inner run asks for it, as a user does.
PLUGIN = ("-p", "no:cacheprovider", "-p", "mlinfra_lab.ci.pytest_plugin")

QUARANTINED = textwrap.dedent(
    """
    import pytest

    @pytest.mark.quarantine(reason="loss depends on thread count", issue="#42")
    def test_known_flaky():
        assert False, "flaked again"

    @pytest.mark.quarantine(reason="fixed, soon unquarantined", issue="#43")
    def test_quarantined_but_passing():
        pass

    def test_healthy():
        pass
    """
)


def test_quarantined_failure_is_reported_but_does_not_fail_the_session(pytester):
    pytester.makepyfile(test_q=QUARANTINED)
    result = pytester.runpytest(*PLUGIN)
    assert result.ret == pytest.ExitCode.OK
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("quarantined") == 2
    assert "failed" not in outcomes
    result.stdout.fnmatch_lines(
        [
            "*quarantined tests (outside the pass/fail gate)*",
            "FAILED test_q.py::test_known_flaky [[]#42[]] loss depends on thread count",
            "PASSED test_q.py::test_quarantined_but_passing [[]#43[]] fixed, soon unquarantined",
            "2 quarantined, 1 failed this run*",
        ]
    )


def test_a_real_failure_still_fails_the_session_next_to_a_quarantined_one(pytester):
    pytester.makepyfile(test_q=QUARANTINED + "\ndef test_broken():\n    assert 1 == 2\n")
    result = pytester.runpytest(*PLUGIN)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes().get("failed") == 1


def test_quarantined_setup_error_is_kept_out_of_the_gate(pytester):
    pytester.makepyfile(
        test_fixture="""
        import pytest

        @pytest.fixture
        def database():
            raise ConnectionError("port busy")

        @pytest.mark.quarantine(reason="shared port", issue="#7")
        def test_needs_db(database):
            pass
        """
    )
    result = pytester.runpytest(*PLUGIN)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["FAILED in setup test_fixture.py::test_needs_db [[]#7[]]*"])


def test_quarantine_without_an_issue_is_refused_at_collection(pytester):
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.quarantine(reason="flaky, someone should look")
        def test_untracked():
            pass
        """
    )
    result = pytester.runpytest(*PLUGIN)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*test_bad.py::test_untracked: @pytest.mark.quarantine needs an issue reference*"]
    )


def test_update_references_option_sets_the_reason_for_the_run_only(pytester):
    pytester.makepyfile(
        test_env="""
        import os

        def test_reason_visible():
            assert os.environ["MLINFRA_UPDATE_REFERENCES"] == "new data set"
        """
    )
    before = os.environ.get("MLINFRA_UPDATE_REFERENCES")
    result = pytester.runpytest(*PLUGIN, "--update-references", "new data set")
    assert result.ret == pytest.ExitCode.OK
    assert os.environ.get("MLINFRA_UPDATE_REFERENCES") == before
    result = pytester.runpytest(*PLUGIN, "--update-references", " ")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_automatic_reruns_are_refused(pytester):
    # Stand-in for pytest-rerunfailures (not installed here): a conftest adding --reruns.
    pytester.makeconftest(
        """
        def pytest_addoption(parser):
            parser.addoption("--reruns", type=int, default=0)
        """
    )
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    assert pytester.runpytest(*PLUGIN).ret == pytest.ExitCode.OK
    result = pytester.runpytest(*PLUGIN, "--reruns", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*automatic re-runs are off in this project*"])


def test_the_plugin_loads_only_when_asked(pytester):
    pytester.makepyfile(test_q=QUARANTINED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--trace-config")
    assert "mlinfra_lab" not in result.stdout.str(), "the plugin loaded without -p"
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # no quarantine: the failure counts
    result = pytester.runpytest(*PLUGIN, "--trace-config")
    result.stdout.fnmatch_lines(["*mlinfra_lab.ci.pytest_plugin*"])
    assert result.ret == pytest.ExitCode.OK


def test_lock_round_trip_and_drift_is_reported(tmp_path):
    lock = tmp_path / "requirements.lock"
    count = write_lockfile(lock)
    assert count > 10
    report = check_lockfile(lock)
    assert report.ok and report.checked == count and not report.extra, str(report)
    pins = parse_lockfile(lock)
    text = lock.read_text().replace(f"numpy=={pins['numpy']}", "numpy==0.0.1")
    lock.write_text(text + "surely-not-installed-pkg==1.0\n")
    report = check_lockfile(lock)
    assert not report.ok
    assert [str(m) for m in report.mismatches] == [
        f"numpy: locked 0.0.1, installed {pins['numpy']}",
        "surely-not-installed-pkg==1.0 is locked but not installed",
    ]
    assert main(["ci", "check-lock", str(lock)]) == 1


def test_unparseable_lock_line_names_file_and_line(tmp_path, capsys):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# pinned\nnumpy==2.0.0\ntorch>=2.5\n")
    with pytest.raises(LockfileError, match=r"requirements\.lock:3: cannot parse 'torch>=2.5'"):
        check_lockfile(lock)
    assert main(["ci", "check-lock", str(lock)]) == 2
    assert "requirements.lock:3: cannot parse" in capsys.readouterr().err
    with pytest.raises(LockfileError, match="no such lock file; generate it with `make lock`"):
        check_lockfile(tmp_path / "absent.lock")
