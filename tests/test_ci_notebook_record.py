"""The GPU notebook record says why a cell failed, not only that it did."""

import nbformat

from mlinfra_lab.ci.notebook_record import failure_reason, record_notebooks


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def test_failure_reason_keeps_the_cause_and_drops_the_banner():
    text = (
        "\x1b[91mNotebook cell execution failed\x1b[0m\n\x1b[94mCell 3: Cell execution caused "
        "an exception\n\nInput:\n1/0\nTraceback:\n...\nZeroDivisionError: division by zero\n"
    )
    assert failure_reason(text) == (
        "Cell 3: Cell execution caused an exception | ZeroDivisionError: division by zero"
    )
    assert failure_reason("") == "failed"


def test_record_names_the_error_the_timeout_and_the_slowest_cell(tmp_path):
    # The slow cell sleeps far longer than a first cell's start-up costs on a loaded machine
    # (1.5 s once lost to it), and the timeout stays well above that sleep.
    ok = _notebook(tmp_path / "a_ok.ipynb", "x = 1", "import time; time.sleep(4)")
    bad = _notebook(tmp_path / "b_bad.ipynb", "1 / 0", "import time; time.sleep(60)")
    record = record_notebooks([tmp_path], cell_timeout=10, progress=False, jobs=2)
    first, second = record["notebooks"]
    assert first["notebook"] == str(ok) and first["passed"] and first["slowest_cell"] == "Cell 1"
    assert second["notebook"] == str(bad) and not second["passed"] and not record["all_passed"]
    assert record["jobs"] == 2  # run side by side, reported in the order given
    reasons = {c["cell"]: c["message"] for c in second["failed_cells"]}
    assert "ZeroDivisionError" in reasons["Cell 0"], reasons
    assert "Timeout of 10 seconds" in reasons["Cell 1"], reasons


def test_kernel_starts_hold_one_lock_across_processes(tmp_path, monkeypatch):
    """A kernel start runs holding the shared lock (another holder would block), releases it
    after, and the plugin wraps nbval's start only when the lock file is named."""
    import fcntl

    import nbval.kernel

    from mlinfra_lab.ci import kernel_start_lock

    path = tmp_path / "kernel-start.lock"
    seen = []

    def fake_start(*args, **kwargs):
        with open(path, "a") as other:  # a second open file description: as another process
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("free")
            except BlockingIOError:
                seen.append("held")
        return args, kwargs

    assert kernel_start_lock.locked(fake_start, str(path))(1, k=2) == ((1,), {"k": 2})
    assert seen == ["held"]
    with open(path, "a") as other:  # released afterwards
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)

    original = nbval.kernel.start_new_kernel
    monkeypatch.delenv(kernel_start_lock.ENV, raising=False)
    kernel_start_lock.pytest_configure(None)
    assert nbval.kernel.start_new_kernel is original
    monkeypatch.setenv(kernel_start_lock.ENV, str(path))
    monkeypatch.setattr(nbval.kernel, "start_new_kernel", original)
    kernel_start_lock.pytest_configure(None)
    assert nbval.kernel.start_new_kernel.__name__ == "start_one_at_a_time"
