"""``mlinfra-lab bench grading`` (issue 30): listed with the other targets, its flags, the
program it times, a small class graded and checked, and the committed result's fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlinfra_lab import cli, results
from mlinfra_lab.grading import bench

pytestmark = pytest.mark.grading


def test_the_target_table_names_grading_and_its_module() -> None:
    assert cli.BENCH_TARGETS["grading"] == ("mlinfra_lab.grading.cli", bench.BENCH_HELP)
    assert cli._modules_for(["bench", "grading", "--students", "3"]) == {"mlinfra_lab.grading.cli"}


def test_bench_help_lists_grading(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--help"])
    assert exit_.value.code == 0
    listed = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert "grading grade a generated class of 200 warm-up submissions" in listed


def test_bench_grading_help_gives_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "grading", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--students", "--jobs", "--seed", "--no-judge", "--keep", "--out FILE"):
        assert flag in text
    assert bench.BENCH_HELP in " ".join(text.split())


def test_it_times_the_installed_command() -> None:
    python, script = bench.grade_program()
    text = Path(script).read_text()
    assert Path(script).name == "mlinfra-lab" and "mlinfra_lab.cli" in text


def test_a_small_class_is_graded_checked_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    argv = ["bench", "grading", "--students", "3", "--jobs", "1", "--seed", "1"]
    assert cli.main([*argv, "--no-judge", "--out", str(out)]) == 0  # totals checked inside
    record = json.loads(out.read_text())
    r = record["results"]
    assert r["submissions_graded"] == r["feedback_reports"] == r["canvas_rows"] == 3
    assert sum(r["answers"].values()) == 3 * 3  # three exercises a student
    assert record["config"]["students"] == 3 and record["config"]["judge"] is False
    assert record["command"].endswith("--jobs 1 --feedback --export canvas --summary --no-judge")


def test_a_wrong_total_stops_the_benchmark(tmp_path: Path) -> None:
    gb = tmp_path / "gradebook"
    gb.mkdir()
    (gb / "gradebook.csv").write_text(
        "student,lab,exercise,points,max,message,comment\nstudent000,00_warmup,a,2,2,,\n"
    )
    with pytest.raises(bench.BenchError, match="1 students scored other than"):
        bench._check(gb, {"student000": 7.0})


def test_the_committed_result_has_the_cost_per_submission() -> None:
    path = sorted(results.committed("cpu-grading-*.json"))[-1]  # the newest
    record = json.loads(path.read_text())
    r = record["results"]
    assert record["benchmark"] == "grading-class" and record["config"]["students"] == 200
    assert r["submissions_graded"] == r["feedback_reports"] == r["canvas_rows"] == 200
    assert r["seconds_per_submission"] == pytest.approx(r["seconds_total"] / 200)


def test_grade_flags_max_procs_and_disk_limit_reach_the_config() -> None:
    from mlinfra_lab.grading import budgets
    from mlinfra_lab.grading import cli as grading_cli
    from mlinfra_lab.grading.execute import ExecutionConfig

    assert grading_cli.DEFAULT_MAX_PROCS == budgets.DEFAULT_MAX_PROCS
    assert grading_cli.DEFAULT_DISK_GIB * (1 << 30) == budgets.DEFAULT_DISK_LIMIT
    parser = cli.build_parser({"mlinfra_lab.grading.cli"})
    argv = ["grade", "x.ipynb", "--source", "labs", "--out", "o", "--memory-limit", "2"]
    args = parser.parse_args([*argv, "--max-procs", "64", "--disk-limit", "0.25"])
    config = grading_cli._budgets(args, ExecutionConfig())
    assert config.max_procs == 64 and config.disk_limit == 1 << 28
    args = parser.parse_args([*argv, "--max-procs", "0", "--disk-limit", "0"])
    config = grading_cli._budgets(args, ExecutionConfig())
    assert config.max_procs is None and config.disk_limit is None
