"""Merging GPU notebook records: each notebook's newest run, one device only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlinfra_lab.ci.record_merge import RecordMergeError, main, merge_records

pytestmark = pytest.mark.ci

DEVICE = {
    "device_name": "GPU X",
    "torch": "2.11",
    "triton": "3.6",
    "cuda": "13.0",
    "python": "3.12",
}


def _record(date: str, entries: dict[str, bool], device: dict | None = None) -> dict:
    return {
        "date": date,
        "device": device or DEVICE,
        "cell_timeout_s": 60.0,
        "all_passed": all(entries.values()),
        "notebooks": [
            {"notebook": nb, "passed": ok, "cells": 3, "seconds": 1.0, "source_fingerprint": date}
            for nb, ok in entries.items()
        ],
    }


def test_each_notebook_keeps_its_newest_run_with_its_file_and_date():
    old = _record("2026-12-07T10:00:00Z", {"a.ipynb": False, "b.ipynb": True})
    new = _record("2026-12-08T10:00:00Z", {"a.ipynb": True})
    merged = merge_records([("new.json", new), ("old.json", old)])  # any order
    by_nb = {e["notebook"]: e for e in merged["notebooks"]}
    assert by_nb["a.ipynb"]["passed"] and by_nb["a.ipynb"]["record"] == "new.json"
    assert by_nb["b.ipynb"]["record"] == "old.json"
    assert by_nb["b.ipynb"]["date"] == "2026-12-07T10:00:00Z"
    assert merged["all_passed"] and merged["date"] == "2026-12-08T10:00:00Z"
    assert merged["merged_from"] == ["new.json", "old.json"]


def test_records_of_another_device_or_version_are_refused(tmp_path: Path, capsys):
    other = _record("2026-12-08T10:00:00Z", {"a.ipynb": True}, {**DEVICE, "torch": "2.12"})
    with pytest.raises(RecordMergeError, match=r"differ in \['torch'\]"):
        merge_records([("a.json", _record("2026-12-07T10:00:00Z", {})), ("b.json", other)])
    with pytest.raises(RecordMergeError, match="at least one"):
        merge_records([])
    paths = []
    for name, rec in (("a.json", _record("2026-12-07T10:00:00Z", {})), ("b.json", other)):
        (tmp_path / name).write_text(json.dumps(rec))
        paths.append(str(tmp_path / name))
    assert main([*paths, "--out", str(tmp_path / "m.json")]) == 2
    assert "differ in ['torch']" in capsys.readouterr().err
