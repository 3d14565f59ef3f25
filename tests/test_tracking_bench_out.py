"""`mlinfra-lab bench tracking --out`: a FILE like every bench target, or a folder (issue 16)."""

import json

import pytest

from mlinfra_lab.tracking.bench import save

pytestmark = pytest.mark.tracking
RESULT = {"date": "2026-12-04T06:00:00+00:00", "systems": {}}


def test_out_names_the_file_or_the_folder(tmp_path):
    path = save(RESULT, tmp_path / "sub" / "cpu-tracking-mine.json")
    assert path == tmp_path / "sub" / "cpu-tracking-mine.json"
    assert json.loads(path.read_text())["date"] == RESULT["date"]
    assert save(RESULT, tmp_path / "dir") == tmp_path / "dir" / "cpu-tracking-2026-12-04.json"
