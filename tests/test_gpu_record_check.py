"""The release-time check of the README against the newest GPU notebook record, on fixtures.

`mlinfra_lab.ci.gpu_record_check` runs at release (`make release-check`), not on every
change: these tests give it a made-up checkout (two notebooks, records, a README) and
check each problem it must find, and that a faithful README passes.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from mlinfra_lab.ci.gpu_record_check import NOT_RUN_MARKER, gpu_record_problems, main
from mlinfra_lab.ci.notebook_record import source_fingerprint

pytestmark = pytest.mark.foundation

NOTEBOOKS = ("book/01_a.ipynb", "labs/01_b.ipynb")


def _checkout(root: Path, *, date: str = "2026-01-02", passed: bool = True) -> dict:
    for i, name in enumerate(NOTEBOOKS):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x = {i}")])
        nbformat.write(nb, root / name)
    entries = [
        {
            "notebook": name,
            "cells": 1,
            "seconds": 12.4,
            "slowest_cell_seconds": 3.2,
            "source_fingerprint": source_fingerprint(root / name),
        }
        for name in NOTEBOOKS
    ]
    record = {
        "date": date,
        "all_passed": passed,
        "device": {"device_name": "NVIDIA H100"},
        "cell_timeout_s": 60,
        "notebooks": entries,
    }
    results = root / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"h100-notebooks-{date}.json").write_text(json.dumps(record))
    rows = "\n".join(f"| `{e['notebook']}` | 1 | passed | 12 | 3 |" for e in entries)
    (root / "README.md").write_text(f"# Course\n\nRecord `h100-notebooks-{date}.json`:\n\n{rows}\n")
    return record


def test_a_readme_that_shows_the_newest_record_passes(tmp_path: Path, capsys) -> None:
    _checkout(tmp_path)
    assert gpu_record_problems(tmp_path) == []
    assert main([str(tmp_path)]) == 0
    assert "h100-notebooks-2026-01-02.json" in capsys.readouterr().out


def test_a_notebook_changed_since_the_record_must_be_named_in_the_not_run_note(
    tmp_path: Path,
) -> None:
    _checkout(tmp_path)
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 9")]),
        tmp_path / NOTEBOOKS[1],
    )
    (problem,) = gpu_record_problems(tmp_path)
    assert "changed since" in problem and NOTEBOOKS[1] in problem
    readme = tmp_path / "README.md"
    text = readme.read_text()
    readme.write_text(text + f"\n{NOT_RUN_MARKER}: `{NOTEBOOKS[0]}` (edited).\n")
    (problem,) = gpu_record_problems(tmp_path)
    assert "leaves out" in problem and NOTEBOOKS[1] in problem
    readme.write_text(text + f"\n{NOT_RUN_MARKER}: `{NOTEBOOKS[1]}` (edited).\n")
    assert gpu_record_problems(tmp_path) == []


def test_a_not_run_note_with_nothing_changed_is_a_problem(tmp_path: Path) -> None:
    _checkout(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text() + f"\n{NOT_RUN_MARKER}: `{NOTEBOOKS[0]}`.\n")
    (problem,) = gpu_record_problems(tmp_path)
    assert "drop README's not-run note" in problem


def test_the_newest_record_by_its_date_is_the_one_the_readme_must_show(tmp_path: Path) -> None:
    _checkout(tmp_path, date="2026-01-02")
    old_readme = (tmp_path / "README.md").read_text()
    _checkout(tmp_path, date="2026-03-04")
    (tmp_path / "README.md").write_text(old_readme)
    problems = gpu_record_problems(tmp_path)
    assert problems == [
        "README does not cite the newest GPU record, h100-notebooks-2026-03-04.json"
    ]


def test_a_missing_row_a_failed_run_and_a_gone_notebook_are_each_reported(tmp_path: Path) -> None:
    record = _checkout(tmp_path, passed=False)
    readme = tmp_path / "README.md"
    readme.write_text(
        readme.read_text().replace("| `labs/01_b.ipynb` | 1 |", "| `labs/01_b.ipynb` | 2 |")
    )
    (tmp_path / NOTEBOOKS[0]).unlink()
    problems = gpu_record_problems(tmp_path)
    assert any("not every notebook passed" in p for p in problems)
    assert any("table lacks" in p and "labs/01_b.ipynb" in p for p in problems)
    assert any("gone" in p and NOTEBOOKS[0] in p for p in problems)
    assert record["notebooks"][0]["notebook"] == NOTEBOOKS[0]


def test_no_record_at_all_says_how_to_make_one(tmp_path: Path, capsys) -> None:
    (tmp_path / "README.md").write_text("# Course\n")
    assert gpu_record_problems(tmp_path) == [
        "no GPU notebook record: run `make test-gpu` on a GPU and commit it"
    ]
    assert main([str(tmp_path)]) == 1
    assert "make test-gpu" in capsys.readouterr().err


def test_the_release_workflow_runs_it_and_make_test_does_not() -> None:
    root = Path(__file__).resolve().parents[1]
    import yaml

    workflow = yaml.safe_load((root / ".github/workflows/release.yml").read_text())
    steps = [s.get("run", "") for job in workflow["jobs"].values() for s in job["steps"]]
    assert any("make release-check" in run for run in steps)
    makefile = (root / "Makefile").read_text()
    target = makefile[makefile.index("\nrelease-check:") :].split("\n\n")[0]
    assert "mlinfra_lab.ci.gpu_record_check" in target
    stages = makefile[makefile.index("\ntest-stages:") :].split("\n\n")[0]
    assert "release-check" not in stages
