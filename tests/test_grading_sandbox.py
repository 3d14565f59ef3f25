"""Submissions that attack the grader itself (issue 14, items 1-3).

One module-scoped ``mlinfra-lab grade --jobs 2`` call grades, beside an honest neighbour,
one warm-up submission per attack: errors that never reach nbval (a custom exception
handler, silenced tracebacks, exceptions IPython does not broadcast), input and AST
transformers that empty the graders, patched comparisons (numpy and builtins), reading the
instructor's lab and the grader's command line through ``/proc``, writing outside its
folder, a daemon that outlives its notebook, and killing every process it can see. Each
attack must score 0 (or change nothing), the neighbour keeps full marks, and no file
outside the sandboxes changes. The last tests check the fallback sandbox in-process.

These attacks are run in the bubblewrap sandbox (``--sandbox bwrap``): without it, the
"kill every process" submission would take this test run down with it, which is the
point of the sandbox. ``make test`` and ``.ci/run`` install bubblewrap.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import os
import time
from pathlib import Path

import nbformat
import pytest
from test_grading_pipeline import _student_copy, _write  # the same warm-up submissions

from mlinfra_lab.cli import main
from mlinfra_lab.grading.execute import ExecutionConfig, run_notebooks
from mlinfra_lab.grading.sandbox import RlimitSandbox, SandboxUnavailable, make_sandbox

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
FULL = {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}
ZERO = {"stable_softmax": 0, "logsumexp": 0, "log_softmax": 0}
# a naive softmax and log-sum-exp fail their graders; log_softmax, graded with the reference
# log-sum-exp (graders do not cascade), keeps its points
NAIVE_TWO = {"stable_softmax": 0, "logsumexp": 0, "log_softmax": 3}
TOKEN = f"mlinfra-daemon-{os.getpid()}"

NAIVE_SOFTMAX = """def stable_softmax(x, axis=-1):
    e = np.exp(np.asarray(x))
    return e / e.sum(axis=axis, keepdims=True)"""
NAIVE_LSE = """def logsumexp(x, axis=-1):
    return np.log(np.exp(np.asarray(x)).sum(axis=axis))"""
STUB = "def {name}(x, axis=-1):\n    raise NotImplementedError"


def _hook(nb, source: str):
    """Insert `source` as a student cell right after the set-up cell."""
    cell = nbformat.v4.new_code_cell(source)
    cell.id = f"attack-{len(nb.cells)}"
    nb.cells.insert(2, cell)
    return nb


def _stubs(**keep: str):
    """A submission whose three solutions are stubs unless given."""
    return _student_copy(
        softmax_solution=keep.get("softmax", STUB.format(name="stable_softmax")),
        lse_solution=keep.get("lse", STUB.format(name="logsumexp")),
        logsoftmax_solution=keep.get("logsoftmax", STUB.format(name="log_softmax")),
    )


def _attacks(subs: Path, out: Path) -> dict[str, object]:
    """student -> submission notebook."""
    gradebook = out / "gradebook.csv"
    return {
        "honest": _student_copy(),
        # errors that never reach an nbval error message
        "custom_exc": _hook(
            _student_copy(softmax_solution=NAIVE_SOFTMAX, lse_solution=NAIVE_LSE),
            "get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)",
        ),
        "silenced": _hook(
            _student_copy(softmax_solution=NAIVE_SOFTMAX, lse_solution=NAIVE_LSE),
            "ip = get_ipython()\nquiet = lambda *a, **k: None\n"
            "ip.showtraceback = ip._showtraceback = quiet\n"
            "type(ip).showtraceback = type(ip)._showtraceback = quiet\n"
            "import sys; sys.excepthook = quiet",
        ),
        "unbroadcast": _stubs(
            softmax="import bdb\ndef stable_softmax(x, axis=-1):\n    raise bdb.BdbQuit()",
            lse="def logsumexp(x, axis=-1):\n    raise ExceptionGroup('no', [ValueError()])",
            logsoftmax="class Silent(Exception):\n    def __str__(self):\n        raise self\n"
            "def log_softmax(x, axis=-1):\n    raise Silent()",
        ),
        # transformers that empty every later cell, graders included
        "transformers": _hook(
            _stubs(),
            "import ast\nip = get_ipython()\n"
            "ip.input_transformers_post.append(lambda lines: ['pass\\n'])\n"
            "class Empty(ast.NodeTransformer):\n"
            "    def visit_Module(self, node):\n"
            "        return ast.Module(body=[ast.Pass()], type_ignores=[])\n"
            "ip.ast_transformers.append(Empty())",
        ),
        # comparisons the graders use, patched to always agree
        "patched": _hook(
            _student_copy(softmax_solution=NAIVE_SOFTMAX, lse_solution=NAIVE_LSE),
            "import builtins\nimport numpy as np\nyes = lambda *a, **k: True\n"
            "np.all = np.allclose = np.isclose = yes\n"
            "np.abs = lambda x, *a, **k: np.zeros_like(x)\n"
            "builtins.abs = lambda x: 0.0",
        ),
        # the instructor's lab, the grader's command line, files outside the folder
        "prober": _hook(
            _stubs(),
            f"""import glob, json
found = []
for path in glob.glob('/proc/[0-9]*/cmdline'):
    try:
        found.append(open(path, 'rb').read())
    except OSError:
        pass
assert not any(b'--source' in c or b'pytest' in c for c in found), 'saw the grader'
for target in ({str(gradebook)!r}, {str(subs / "honest.ipynb")!r}, {str(WARMUP)!r}):
    try:
        open(target, 'a').write('forged')
    except OSError:
        pass
source = json.load(open({str(WARMUP)!r}))
for cell in source['cells']:
    if cell.get('id', '').endswith('-solution'):
        exec(''.join(cell['source']))""",
        ),
        # a daemon that outlives the notebook, to rewrite the gradebook afterwards
        "daemon": _hook(
            _stubs(),
            f"""import subprocess, sys
subprocess.Popen([sys.executable, '-c', '''
import os, time
os.setsid()
for _ in range(600):
    try:
        open({str(gradebook)!r}, "w").write("{TOKEN}")
    except OSError:
        pass
    time.sleep(0.1)
''', '{TOKEN}'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)""",
        ),
        # kill the grader, and every process in sight
        "killer": _hook(
            _student_copy(),
            """import os, signal
for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:
    if pid not in (os.getpid(),):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
os.kill(os.getppid(), signal.SIGKILL)""",
        ),
    }


def _digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def _alive_with(token: str) -> list[int]:
    pids = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token.encode() in path.read_bytes():
                pids.append(int(path.parent.name))
        except OSError:
            continue
    return [p for p in pids if p != os.getpid()]


def require_bubblewrap() -> None:
    """Fail (not skip) where bubblewrap cannot run: these tests attack its sandbox."""
    try:
        make_sandbox("bwrap")
    except SandboxUnavailable as err:
        pytest.fail(f"these tests need bubblewrap: {err}")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require_bubblewrap()
    tmp = tmp_path_factory.mktemp("sandbox")
    subs, out = tmp / "submissions", tmp / "gradebook"
    for student, nb in _attacks(subs, out).items():
        _write(nb, subs / f"{student}.ipynb")
    watched = sorted(subs.glob("*.ipynb")) + [WARMUP]
    before = _digest(watched)
    err = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stderr(err):
        code = main(
            [
                "grade",
                str(subs),
                "--source",
                str(WARMUP),
                "--out",
                str(out),
                "--timeout",
                "20",
                "--jobs",
                "2",
                "--sandbox",
                "bwrap",
            ]
        )
    seconds = time.monotonic() - started
    survivors = _alive_with(TOKEN)
    time.sleep(1.0)  # a surviving daemon would rewrite the gradebook within 0.1 s
    with open(out / "gradebook.csv", newline="") as fh:
        rows: dict[str, dict[str, dict]] = {}
        for row in csv.DictReader(fh):
            rows.setdefault(row["student"], {})[row["exercise"]] = row
    return {
        "code": code,
        "stderr": err.getvalue(),
        "rows": rows,
        "survivors": survivors,
        "unchanged": before == _digest(watched),
        "seconds": seconds,
        "out": out,
    }


def _points(rows: dict[str, dict]) -> dict[str, float]:
    return {ex: float(r["points"]) for ex, r in rows.items()}


def test_the_honest_neighbour_keeps_full_marks(graded):
    assert graded["code"] == 0, graded["stderr"]
    assert _points(graded["rows"]["honest"]) == FULL
    print(f"graded {len(graded['rows'])} submissions with --jobs 2 in {graded['seconds']:.1f} s")


@pytest.mark.parametrize("student", ["custom_exc", "silenced", "patched"])
def test_hiding_or_faking_a_failure_scores_zero(graded, student):
    rows = graded["rows"][student]
    assert _points(rows) == NAIVE_TWO, rows
    assert (
        "overflows" in rows["stable_softmax"]["message"]
        or "AssertionError" in rows["stable_softmax"]["message"]
    )


def test_exceptions_ipython_does_not_broadcast_still_fail(graded):
    rows = graded["rows"]["unbroadcast"]
    assert _points(rows) == ZERO, rows
    assert "BdbQuit" in rows["stable_softmax"]["message"]
    assert "ExceptionGroup" in rows["logsumexp"]["message"]


def test_transformers_that_empty_the_graders_are_removed_first(graded):
    rows = graded["rows"]["transformers"]
    assert _points(rows) == ZERO, rows


def test_the_sources_and_the_grader_are_out_of_sight(graded):
    rows = graded["rows"]["prober"]
    assert _points(rows) == ZERO, rows
    assert graded["unchanged"], "a submission changed a file outside its sandbox"


def test_nothing_a_notebook_starts_survives_it(graded):
    assert graded["survivors"] == [], f"processes left by a notebook: {graded['survivors']}"
    assert TOKEN not in (graded["out"] / "gradebook.csv").read_text()
    assert _points(graded["rows"]["daemon"]) == ZERO


def test_killing_every_visible_process_hurts_no_one(graded):
    assert _points(graded["rows"]["killer"]) == FULL  # its own kernel lived on, and so did we


# ------------------------------------------------------------------ the fallback, in-process
def test_the_fallback_kills_a_detached_daemon_and_applies_limits(tmp_path):
    token = f"{TOKEN}-fallback"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(f"""import resource, subprocess, sys
print(resource.getrlimit(resource.RLIMIT_AS))
subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(60)', '{token}'],
                 start_new_session=True)"""),
        nbformat.v4.new_code_cell("import numpy as np\nnp.empty(3 << 30, dtype=np.uint8)"),
    ]
    for k, cell in enumerate(nb.cells):
        cell.id = f"c{k}"
    path = _write(nb, tmp_path / "nb" / "fallback.ipynb")
    config = ExecutionConfig(cell_timeout=20, memory_limit=2 << 30, jobs=2)
    outcomes = run_notebooks([path], config, sandbox=RlimitSandbox())[path.resolve()]
    assert outcomes["c0"].passed, outcomes
    assert not outcomes["c1"].passed and "MemoryError" in outcomes["c1"].message
    assert _alive_with(token) == [], "the fallback left a daemon running"


def test_the_kernel_gets_no_notebook_file_and_no_network(tmp_path):
    import socket

    server = socket.create_server(("127.0.0.1", 0))  # reachable from anything on this host
    port = server.getsockname()[1]
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import os\nassert [f for f in os.listdir('.') if f.endswith('.ipynb')] == [], "
            "os.listdir('.')"
        ),
        nbformat.v4.new_code_cell(
            f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            "except OSError as err:\n    print('no way out:', err)\n"
            "else:\n    raise AssertionError('the kernel reached the host network')"
        ),
    ]
    nb.cells[0].id, nb.cells[1].id = "look", "net"
    path = _write(nb, tmp_path / "nb" / "graded.ipynb")
    try:
        outcomes = run_notebooks([path], ExecutionConfig(cell_timeout=20, sandbox="bwrap"))
    finally:
        server.close()
    outcomes = outcomes[path.resolve()]
    assert outcomes["look"].passed, outcomes["look"].message
    assert outcomes["net"].passed, outcomes["net"].message


def test_an_unknown_sandbox_is_refused_with_the_choices():
    with pytest.raises(SandboxUnavailable, match="auto, bwrap, rlimit"):
        make_sandbox("docker")


def test_the_kernel_gets_the_graders_pythonpath_but_not_the_checkout(tmp_path, monkeypatch):
    """Packages installed with `pip --target` (a GPU image without Jupyter) reach the kernel
    through the grader's PYTHONPATH; the checkout on it (which holds the instructor's labs)
    does not: the kernel sees the mlinfra_lab package alone."""
    from mlinfra_lab.grading.kernel_runner import kernel_env
    from mlinfra_lab.grading.sandbox import _python_paths, package_root

    site = tmp_path / "site"
    site.mkdir()
    root = package_root()
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(site), str(root), str(tmp_path / "gone")])
    )
    env = kernel_env(tmp_path / "work", ())
    assert env["PYTHONPATH"].split(os.pathsep) == [str(root), str(site.resolve())]
    mounted = _python_paths()
    assert str(site.resolve()) in mounted and str(root / "mlinfra_lab") in mounted
    assert str(root) not in mounted


@pytest.mark.parametrize("kind", ["bwrap", "rlimit"])
def test_the_throwaway_user_has_a_name_and_a_private_temp_folder(tmp_path, kind):
    """The sandbox's uid is in no passwd file; torch.compile's caches (and anything else
    calling `getpass.getuser`) must still work, and temporary files stay in the sandbox
    (its home, the working directory: a size-capped tmpfs under bubblewrap)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import getpass, os, tempfile\n"
            "assert getpass.getuser() == 'student', getpass.getuser()\n"
            "assert tempfile.gettempdir() == os.getcwd(), (tempfile.gettempdir(), os.getcwd())"
        )
    ]
    nb.cells[0].id = "who"
    path = _write(nb, tmp_path / "nb" / "who.ipynb")
    outcomes = run_notebooks([path], ExecutionConfig(cell_timeout=20, sandbox=kind))
    assert outcomes[path.resolve()]["who"].passed, outcomes[path.resolve()]["who"].message


def test_a_crash_in_the_grader_names_where_not_what(tmp_path, monkeypatch):
    """A notebook whose run raises in the grading process is reported as not graded, with
    the exception's class and the grader's file and line (so an instructor can report it),
    never the exception's text (a submission may have written it); the others still run."""
    from mlinfra_lab.grading import execute

    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    for p in (good, bad):
        p.write_text("{}")

    def fake_run(path, *args, **kwargs):
        if path.name == "bad.ipynb":
            raise SystemError("\x1b[31mstudent text")
        return {"c1": execute.CellOutcome("c1", 0, "passed", "")}

    monkeypatch.setattr(execute, "run_notebook", fake_run)
    out = execute.run_notebooks([good, bad], ExecutionConfig(jobs=2), sandbox=RlimitSandbox())
    (crash,) = out[bad.resolve()].values()
    assert crash.outcome == "failed"
    assert "SystemError at test_grading_sandbox.py:" in crash.message
    assert "in fake_run" in crash.message and "student text" not in crash.message
    assert out[good.resolve()]["c1"].passed
