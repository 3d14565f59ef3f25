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


def test_load_latest_picks_by_recorded_date_and_needed_system(tmp_path):
    from mlinfra_lab.tracking.bench import load_latest

    server = {"date": "2026-12-04T08:00:00+00:00", "systems": {"mlinfra": {}, "served": {}}}
    newer = {"date": "2026-12-05T16:00:00+00:00", "systems": {"mlinfra": {}, "mlflow": {}}}
    save(server, tmp_path / "cpu-tracking-server-2026-12-04.json")  # sorts last by name
    save(newer, tmp_path / "cpu-tracking-2026-12-05.json")
    path, res = load_latest(tmp_path)
    assert path.name == "cpu-tracking-2026-12-05.json" and res == newer
    assert load_latest(tmp_path, needs="served")[0].name == "cpu-tracking-server-2026-12-04.json"
    assert load_latest(tmp_path, needs="mlflow_server") is None
