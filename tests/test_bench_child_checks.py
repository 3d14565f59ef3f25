"""The GPU experiments' safety net: each configuration's check runs in a child process with
a time limit (`benchmarks/experiments/child_checks.py`), so a kernel that waits forever on a
wrong mbarrier phase costs that configuration, not the device call. Checked here with
children that pass, fail, crash and hang."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))

from child_checks import check_in_children  # noqa: E402 (a script folder, not a package)


def test_a_hang_or_a_crash_fails_only_its_own_configuration(tmp_path, capsys):
    child = tmp_path / "child.py"
    child.write_text(
        textwrap.dedent(
            """
            import json, sys, time
            name = sys.argv[2]
            if name == "hang":
                time.sleep(60)
            if name == "crash":
                raise SystemExit("boom: illegal memory access")
            print("compiling...")
            print(json.dumps({"ok": name == "good", "max_err": 0.5}))
            """
        )
    )
    checks, good = check_in_children(str(child), ["good", "bad", "hang", "crash"], limit=3)
    assert good == ["good"]
    by = {c["config"]: c for c in checks}
    assert by["good"] == {"ok": True, "max_err": 0.5, "config": "good"}
    assert by["bad"]["ok"] is False and "error" not in by["bad"]
    assert by["hang"] == {"ok": False, "error": "no answer in 3 s (hung)", "config": "hang"}
    assert by["crash"]["ok"] is False and "illegal memory access" in by["crash"]["error"]
    assert capsys.readouterr().out.count('"config"') == 4  # one progress line each


def test_children_run_in_parallel_and_keep_their_order(tmp_path):
    """With ``jobs=4``, four children are alive at once: each marks its start and waits for the
    other three marks, which it sees only if they run side by side (in turn, the first would
    give up). The entries come back in the order the names were given."""
    child = tmp_path / "child.py"
    child.write_text(
        textwrap.dedent(
            f"""
            import json, pathlib, sys, time
            marks = pathlib.Path({str(tmp_path)!r})
            (marks / ("started-" + sys.argv[2])).touch()
            for _ in range(200):
                if len(list(marks.glob("started-*"))) == 4:
                    break
                time.sleep(0.05)
            together = len(list(marks.glob("started-*"))) == 4
            print(json.dumps({{"ok": together and sys.argv[2] != "b"}}))
            """
        )
    )
    checks, good = check_in_children(str(child), ["a", "b", "c", "d"], limit=60, jobs=4)
    assert [c["config"] for c in checks] == ["a", "b", "c", "d"]
    assert good == ["a", "c", "d"]
