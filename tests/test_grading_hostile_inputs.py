"""Grading inputs a student controls, and the budgets (issue 14, items 4 and 5).

One module-scoped ``mlinfra-lab grade`` call (one nbval batch) over a folder of warm-up
submissions holds every hostile input beside honest neighbours: symbolic links (to the
instructor's lab, to a system file, to a folder), a file name that disagrees with its
collection folder, a file named after another student, an nbformat 3 notebook, a student
folder named ``=1+1``, an oversize file, too many cells, a 6 GiB allocation with a flood of
output, and a notebook that runs past its time limit. ``--verify`` is then run on that
gradebook, intact and edited; the keyed seal is checked in-process on a small report.

The submissions replace the Colab set-up cell by a light one (as in
``test_grading_pipeline``), so a 10-second per-cell timeout is safe on a busy machine.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest
from test_grading_pipeline import _cell, _student_copy  # the same warm-up submissions

from mlinfra_lab.cli import main
from mlinfra_lab.grading import SECRET_ENV, release_node
from mlinfra_lab.grading.budgets import DEFAULT_MAX_BYTES, DEFAULT_MAX_CELLS, DEFAULT_MEMORY_LIMIT
from mlinfra_lab.grading.cli import (
    DEFAULT_MAX_CELLS as CLI_MAX_CELLS,
)
from mlinfra_lab.grading.cli import (
    DEFAULT_MAX_MB,
    DEFAULT_MEMORY_GIB,
)
from mlinfra_lab.grading.grade import CellResult, GradeReport, GradeResult
from mlinfra_lab.grading.gradebook import csv_safe, write_gradebook
from mlinfra_lab.grading.manifest import ManifestError, verify_gradebook
from mlinfra_lab.grading.submissions import SubmissionProblem

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
SYSTEM_FILE = Path("/etc/passwd")
FULL = {"stable_softmax": 2, "logsumexp": 2, "log_softmax": 3}
NOTEBOOK_TIMEOUT = "30"

HOARD = """def stable_softmax(x, axis=-1):
    hoard = np.empty(6 << 30, dtype=np.uint8)  # 6 GiB, past the 4 GiB default limit
    x = np.asarray(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)"""


def _insert_before(nb, cell_id: str, *sources: str):
    at = nb.cells.index(_cell(nb, cell_id))
    for k, text in enumerate(sources):
        cell = nbformat.v4.new_code_cell(text)
        cell.id = f"student-extra-{k}"
        nb.cells.insert(at + k, cell)
    return nb


def _write(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every case in one batch; return (exit code, output, CSV rows by student, JSON
    text, gradebook folder, submissions folder)."""
    tmp = tmp_path_factory.mktemp("hostile")
    subs = tmp / "submissions"
    honest = _student_copy()
    _write(honest, subs / "alice" / "00_warmup.ipynb")  # the honest neighbour
    _write(honest, subs / "=1+1" / "00_warmup.ipynb")  # a formula as a folder name
    _write(
        _student_copy(softmax_solution="raise NotImplementedError"),
        subs / "bob" / "alice_00_warmup.ipynb",  # named after alice, in bob's folder
    )
    _write(honest, subs / "carol" / "00_warmup.ipynb")  # carol's own, in her folder
    impostor = _write(
        release_node(nbformat.read(str(WARMUP), as_version=4), "00_warmup"),
        subs / "carol_00_warmup.ipynb",  # a blank copy named after carol
    )
    (subs / "gina").mkdir()
    (subs / "gina" / "00_warmup.ipynb").write_text(
        nbformat.writes(nbformat.convert(honest, 3), version=3)  # nbformat 3
    )
    # 3 MB of output, cut at 1 MiB
    mallory = _insert_before(
        _student_copy(softmax_solution=HOARD), "lse-solution", "print('x' * 3_000_000)"
    )
    _write(mallory, subs / "mallory" / "00_warmup.ipynb")
    # each cell under --timeout
    tim = _insert_before(_student_copy(), "lse-solution", *["import time\ntime.sleep(9)"] * 4)
    _write(tim, subs / "tim" / "00_warmup.ipynb")
    many = _student_copy()
    many.cells += [nbformat.v4.new_markdown_cell("") for _ in range(DEFAULT_MAX_CELLS)]
    _write(many, subs / "ivan" / "00_warmup.ipynb")
    (subs / "olga").mkdir()
    with open(subs / "olga" / "00_warmup.ipynb", "wb") as fh:  # oversize, sparse
        fh.truncate(DEFAULT_MAX_BYTES + 1)
    (subs / "eve").mkdir()
    (subs / "eve" / "00_warmup.ipynb").symlink_to(WARMUP)  # the instructor's own lab
    (subs / "frank").mkdir()
    (subs / "frank" / "00_warmup.ipynb").symlink_to(SYSTEM_FILE)
    (subs / "linked").symlink_to(tmp, target_is_directory=True)  # a folder link

    out = tmp / "gradebook"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(SECRET_ENV, raising=False)
        # the impostor first on the command line: the file in carol's folder still wins
        code, output = _run(
            "grade",
            str(impostor),
            str(subs),
            "--source",
            str(WARMUP),
            "--out",
            str(out),
            "--timeout",
            "10",
            "--notebook-timeout",
            NOTEBOOK_TIMEOUT,
            "--jobs",
            "2",
        )
    rows: dict[str, dict[str, dict]] = {}
    with open(out / "gradebook.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            rows.setdefault(row["student"], {})[row["exercise"]] = row
    return code, output, rows, (out / "gradebook.json").read_text(), out, subs


def _points(rows: dict[str, dict]) -> dict[str, float]:
    return {ex: float(r["points"]) for ex, r in rows.items()}


def _refused(output: str, path: Path) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith(f"not graded: {path}:")]
    assert len(lines) == 1, (path, output)
    return lines[0]


def test_honest_neighbours_keep_full_marks(graded):
    code, _, rows, _, _, _ = graded
    assert code == 1, "refused inputs make the exit status 1"
    assert _points(rows["alice"]) == FULL
    assert all(r["message"] == "" for r in rows["alice"].values())


def test_symlinks_are_refused_and_never_read(graded):
    _, output, rows, book, _, subs = graded
    for name in ("eve", "frank"):
        line = _refused(output, subs / name / "00_warmup.ipynb")
        assert "symbolic link" in line and "never followed" in line
    assert "symbolic link" in _refused(output, subs / "linked")
    assert not {"eve", "frank", "linked"} & set(rows)
    head = SYSTEM_FILE.read_bytes()[:24].decode(errors="replace")
    assert head and head not in output and head not in book
    assert "BEGIN SOLUTION" not in output and "BEGIN HIDDEN" not in book


def test_a_file_name_that_disagrees_with_its_folder_is_reported(graded):
    _, output, rows, _, _, subs = graded
    line = _refused(output, subs / "bob" / "alice_00_warmup.ipynb")
    assert "says student 'alice'" in line and "collection folder of 'bob'" in line
    assert rows["bob"][""]["points"] == "" and "not graded" in rows["bob"][""]["message"]
    assert _points(rows["alice"]) == FULL  # not credited to alice, not counted against her


def test_a_file_named_after_another_student_shows_on_both(graded):
    _, output, rows, _, _, subs = graded
    carol = rows["carol"]
    assert _points(carol) == FULL, "the file in carol's own folder is graded"
    assert "disputed" in carol["stable_softmax"]["message"]
    assert "carol_00_warmup.ipynb" in carol["stable_softmax"]["message"]
    line = _refused(output, subs / "carol_00_warmup.ipynb")
    assert "a second submission" in line and str(subs / "carol" / "00_warmup.ipynb") in line


def test_an_nbformat_3_notebook_is_upgraded_and_graded(graded):
    _, output, rows, _, _, _ = graded
    assert _points(rows["gina"]) == FULL
    assert "upgrading the file from nbformat 3" in rows["gina"]["stable_softmax"]["message"]
    assert "from nbformat 3" in output


def test_a_formula_student_name_is_text_in_the_csv(graded):
    _, _, rows, book, out, _ = graded
    assert "=1+1" not in rows and _points(rows["'=1+1"]) == FULL
    assert "\n=1+1," not in (out / "gradebook.csv").read_text()
    assert any(r["student"] == "=1+1" for r in json.loads(book)["rows"])  # JSON unescaped


def test_oversize_and_too_many_cells_are_not_graded(graded):
    _, output, rows, _, _, subs = graded
    assert "over the limit of 20 MB (--max-size)" in _refused(
        output, subs / "olga" / "00_warmup.ipynb"
    )
    line = _refused(output, subs / "ivan" / "00_warmup.ipynb")
    assert f"over the limit of {DEFAULT_MAX_CELLS} (--max-cells)" in line
    assert "--max-cells" in rows["ivan"][""]["message"]


def test_a_6_gib_allocation_fails_that_cell_only(graded):
    _, output, rows, _, _, _ = graded
    mallory = rows["mallory"]
    assert _points(mallory) == {"stable_softmax": 0, "logsumexp": 2, "log_softmax": 3}
    message = mallory["stable_softmax"]["message"]
    assert "MemoryError" in message and "4 GiB" in message and "--memory-limit" in message
    assert "output truncated" in message and "1 MiB" in message  # the 3 MB print
    assert "output truncated" in output


def test_a_notebook_past_its_time_limit_stops_with_a_message(graded):
    _, _, rows, _, _, _ = graded
    tim = rows["tim"]
    assert _points(tim) == {"stable_softmax": 2, "logsumexp": 0, "log_softmax": 0}
    assert f"time limit of {NOTEBOOK_TIMEOUT} s (--notebook-timeout)" in tim["logsumexp"]["message"]


def test_verify_passes_an_intact_gradebook_and_names_an_edited_file(graded, tmp_path):
    _, output, _, _, out, _ = graded
    assert "only checksummed, not keyed" in output
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(SECRET_ENV, raising=False)
        code, text = _run("grade", "--verify", str(copy))
        assert code == 0, text
        assert "ok:" in text and "not keyed" in text
        csv_path = copy / "gradebook.csv"
        csv_path.write_text(csv_path.read_text().replace(",0,2,", ",2,2,", 1))
        code, text = _run("grade", "--verify", str(copy))
    assert code == 1
    edited = [ln for ln in text.splitlines() if ln.startswith("FAIL:")]
    assert len(edited) == 1 and "gradebook.csv" in edited[0], text


# ------------------------------------------------------------------- in-process, no nbval


def _report() -> GradeReport:
    cells = (CellResult("c1", "ex", 0.0, 2.0, False, "-2 is wrong"),)
    return GradeReport(
        (GradeResult("@alice", "lab", "a.ipynb", cells, "ab" * 32),),
        (SubmissionProblem("b.ipynb", "a symbolic link", "+bob", "lab"),),
    )


def test_csv_cells_that_a_spreadsheet_would_run_are_escaped(tmp_path):
    for text in ("=1+1", "+1", "-1", "@SUM(A1)"):
        assert csv_safe(text) == "'" + text
    for text in ("\t=1", "\r=1"):  # and the cell a tab or a line break starts is text too
        assert csv_safe(text) == "'" + text[0] + "'" + text[1:]
    assert csv_safe("alice") == "alice" and csv_safe(-1) == -1
    csv_path, _ = write_gradebook(_report(), tmp_path)
    text = csv_path.read_text()
    assert "'@alice" in text and "'-2 is wrong" in text and "'+bob" in text


def test_a_keyed_manifest_needs_the_secret_and_catches_any_edit(tmp_path):
    write_gradebook(_report(), tmp_path, secret="s3cret")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["keyed"] is True and manifest["seal"].startswith("hmac-sha256:")
    assert verify_gradebook(tmp_path, "s3cret").ok
    with pytest.raises(ManifestError, match="sealed with the grading secret"):
        verify_gradebook(tmp_path, "mlinfra-release")
    assert not verify_gradebook(tmp_path, "another").ok
    # rewriting the manifest to match an edited CSV breaks the seal
    csv_path = tmp_path / "gradebook.csv"
    csv_path.write_text(csv_path.read_text().replace(",0,2,", ",2,2,"))
    import hashlib

    manifest["gradebook"]["gradebook.csv"] = hashlib.sha256(csv_path.read_bytes()).hexdigest()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    result = verify_gradebook(tmp_path, "s3cret")
    assert [p for p in result.problems if "does not match its seal" in p], result.problems
    # a downgrade to an unkeyed manifest is reported to a verifier who holds the secret
    manifest.update(keyed=False)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert any("only checksummed" in p for p in verify_gradebook(tmp_path, "s3cret").problems)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")], "no temporary left"


def test_the_command_line_defaults_are_the_budgets_defaults():
    assert DEFAULT_MEMORY_GIB * (1 << 30) == DEFAULT_MEMORY_LIMIT
    assert DEFAULT_MAX_MB * 10**6 == DEFAULT_MAX_BYTES
    assert CLI_MAX_CELLS == DEFAULT_MAX_CELLS


def test_hard_links_and_special_files_are_reported_never_skipped(tmp_path):
    from mlinfra_lab.grading import load_source_labs
    from mlinfra_lab.grading.submissions import find_submissions

    labs = load_source_labs(WARMUP)
    carol = _write(
        release_node(labs["00_warmup"].notebook, "00_warmup"),
        tmp_path / "carol" / "00_warmup.ipynb",
    )
    (tmp_path / "bob").mkdir()
    os.link(carol, tmp_path / "bob" / "00_warmup.ipynb")  # bob's path to carol's file
    os.mkfifo(tmp_path / "dan.ipynb")  # would block a plain open()
    subs, problems = find_submissions([tmp_path, carol], labs)  # carol's path named twice
    assert [(s.student, s.notes) for s in subs] == [
        ("bob", (f"disputed: {carol} is a hard link to this same file",))
    ]
    assert sorted(p.message.split(" (")[0] for p in problems) == [
        "a FIFO, not a regular file: not read",
        f"the same file as {tmp_path / 'bob' / '00_warmup.ipynb'}",
    ]
