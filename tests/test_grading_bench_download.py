"""``mlinfra-lab bench grading --from-download canvas`` (issue 42): the class packed under
Canvas's own file names, collected and graded end to end; each student graded once, the
latest upload taken."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest

from mlinfra_lab import cli, results
from mlinfra_lab.grading import bench_download
from mlinfra_lab.grading.lms_names import notebook_key, parse_lms_path

pytestmark = pytest.mark.grading


def _pack(tmp_path: Path, students: int, drafted: int) -> bench_download.CanvasDownload:
    finals, drafts = {}, {}
    for k in range(students):
        finals[f"s{k}"] = tmp_path / f"s{k}.ipynb"
        finals[f"s{k}"].write_bytes(b'{"final": %d}' % k)
        if k < drafted:
            drafts[f"s{k}"] = tmp_path / f"s{k}-draft.ipynb"
            drafts[f"s{k}"].write_bytes(b'{"draft": %d}' % k)
    return bench_download.pack_canvas(
        finals, drafts, tmp_path / "submissions.zip", tmp_path / "roster.csv", seed=3
    )


def test_the_zip_names_are_canvas_s_and_cover_every_case(tmp_path: Path) -> None:
    download = _pack(tmp_path, students=3, drafted=2)
    naming = download.naming()
    assert all(naming[case] for case in naming), naming  # each case, both resubmission kinds
    with zipfile.ZipFile(download.zip) as archive:
        names = archive.namelist()
        assert archive.read(download.students[0].entries[-1]).startswith(b'{"final"')
    roster = {row["SIS Login ID"]: row["ID"] for row in csv.DictReader(download.roster.open())}
    for s in download.students:
        assert roster[s.student] == s.user_id
        for entry in s.entries:
            assert entry in names
            parsed = parse_lms_path((entry,), "canvas")
            assert parsed is not None and parsed.user_id == s.user_id
            assert parsed.late == (s.case == "late" and entry == s.entries[-1])  # drafts on time
            assert notebook_key(parsed.original)[0] == "00_warmup"
        uploads = [parse_lms_path((e,), "canvas").upload for e in s.entries]  # type: ignore[union-attr]
        assert uploads == sorted(set(uploads))  # the final is the latest upload
    assert sum(name.endswith(".pdf") for name in names) == 1  # a report: collect skips it
    again = _pack(tmp_path, students=3, drafted=2)
    assert again.zip.read_bytes() == download.zip.read_bytes()  # seeded: the same bytes


def test_a_draft_taken_for_its_final_stops_the_benchmark(tmp_path: Path) -> None:
    download = _pack(tmp_path, students=2, drafted=2)
    report = {
        "taken": [{"student": s.student, "source": s.entries[0]} for s in download.students],
        "set_aside": [{"source": s.entries[-1]} for s in download.students],
        "refused": [],
        "skipped": [],
    }
    (tmp_path / "collect.json").write_text(json.dumps(report))
    with pytest.raises(bench_download.CollectMismatch, match="set aside 2 of 2 drafts"):
        bench_download.check_collected(tmp_path / "collect.json", download)
    for t, s in zip(report["taken"], download.students, strict=True):
        t["source"] = s.entries[-1]
    report["set_aside"] = [{"source": s.entries[0]} for s in download.students]
    (tmp_path / "collect.json").write_text(json.dumps(report))
    assert bench_download.check_collected(tmp_path / "collect.json", download)["collected"] == 2


def test_a_small_class_is_collected_from_canvas_graded_once_each(tmp_path: Path) -> None:
    """Three students (the fewest that carry every naming case), two of them resubmitted."""
    out, keep = tmp_path / "result.json", tmp_path / "keep"
    argv = ["bench", "grading", "--students", "3", "--jobs", "1", "--no-judge"]
    argv += ["--from-download", "canvas", "--keep", str(keep), "--out", str(out)]
    assert cli.main(argv) == 0  # collect's choices and every total are checked inside
    record = json.loads(out.read_text())
    r, d = record["results"], record["results"]["download"]
    assert r["submissions_graded"] == r["feedback_reports"] == r["canvas_rows"] == 3
    assert d["collected"] == 3 and d["resubmitted"] == d["set_aside"] == 2
    assert d["skipped_not_notebooks"] == 1
    assert all(d["naming"].values()) and d["resubmitted_with_draft_total_differing"] >= 1
    assert set(r["phases_seconds"]) == {"collect", "grade"}
    assert r["seconds_total"] == pytest.approx(sum(r["phases_seconds"].values()))
    assert record["command"].startswith("mlinfra-lab collect submissions.zip --lab 00_warmup")
    (run,) = keep.glob("bench-grading-*")
    with open(run / "gradebook" / "gradebook.csv", newline="", encoding="utf-8") as fh:
        rows = [(row["student"], row["exercise"]) for row in csv.DictReader(fh)]
    assert len(rows) == len(set(rows))  # each student's exercise once
    assert {s for s, _ in rows} == {f"student{k:03d}" for k in range(3)}
    taken = {t["student"]: t["source"] for t in json.loads((run / "collect.json").read_text())["taken"]}  # fmt: skip
    with zipfile.ZipFile(run / "submissions.zip") as archive:
        latest: dict[str, tuple[int, str]] = {}
        for name in archive.namelist():
            parsed = parse_lms_path((name,), "canvas")
            if parsed is not None and name.endswith(".ipynb"):
                latest[parsed.user_id] = max(latest.get(parsed.user_id, (-1, "")), (parsed.upload, name))  # fmt: skip
    roster = {row["ID"]: row["SIS Login ID"] for row in csv.DictReader((run / "canvas-gradebook.csv").open())}  # fmt: skip
    assert taken == {roster[uid]: name for uid, (_, name) in latest.items()}  # the latest won


def test_the_committed_canvas_run_graded_200_and_records_its_phases() -> None:
    (path,) = results.committed("cpu-grading-2026-12-08.json")
    record = json.loads(path.read_text())
    r, d = record["results"], record["results"]["download"]
    assert record["config"]["from_download"] == "canvas" and record["config"]["judge"] is True
    assert record["config"]["jobs"] == 2 and record["config"]["sandbox"] == "bwrap"
    assert r["submissions_graded"] == d["collected"] == r["feedback_reports"] == r["canvas_rows"] == 200  # fmt: skip
    assert d["set_aside"] == d["resubmitted"] == 20 and all(d["naming"].values())
    assert r["seconds_total"] == pytest.approx(sum(r["phases_seconds"].values()))
    assert r["seconds_per_submission"] == pytest.approx(r["seconds_total"] / 200)
    assert len(r["load_average_before"]) == len(r["load_average_after"]) == 3
