"""`mlinfra_lab.grading`'s public API (issue 30): the instructor's whole journey is
re-exported, and the package still imports where the ``grading`` extra is not installed
(a student's ``pip install mlinfra-lab``: the command line checks the extra before it loads
a grading command, but ``import mlinfra_lab.grading`` must not fail on its own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import mlinfra_lab.grading as grading

pytestmark = pytest.mark.grading

ROOT = Path(__file__).resolve().parents[1]

# what the `grading` extra brings (pyproject.toml), their own dependencies, and matplotlib
# (the `course` extra's, used by the class summary): none may be imported by the package
ABSENT = ("nbval", "pytest", "_pytest", "nbclient", "ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "matplotlib")  # fmt: skip

PROBE = """
import importlib.abc, json, sys
ABSENT = set(sys.argv[1].split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Refuse())
import mlinfra_lab.grading as g
missing = [n for n in g.__all__ if not hasattr(g, n)]
try:
    import nbclient  # the refusal works: this must fail
    refused = False
except ModuleNotFoundError:
    refused = True
loaded = sorted(ABSENT & set(sys.modules))
print(json.dumps({"missing": missing, "loaded": loaded, "refused": refused}))
"""


def test_the_journey_is_re_exported() -> None:
    for name in (
        "GradebookDB",
        "BookSession",
        "write_feedback",
        "release_feedback",
        "write_export",
        "write_summary",
        "late_penalty",
        "grade_submissions",
        "release_dir",
        "validate_labs",
        "verify_gradebook",
    ):
        assert name in grading.__all__, name
        assert getattr(grading, name).__module__.startswith("mlinfra_lab.grading."), name
    assert len(set(grading.__all__)) == len(grading.__all__)
    public = {n for n in vars(grading) if not n.startswith("_")}
    submodules = {n for n in public if type(getattr(grading, n)).__name__ == "module"}
    assert public - submodules == set(grading.__all__)  # __all__ lists every re-export


def test_the_extra_is_what_the_probe_refuses() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {r.split(">")[0].split("=")[0].strip() for r in extra["optional-dependencies"]["grading"]}  # fmt: skip
    assert names <= set(ABSENT)


def test_the_package_imports_without_the_grading_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(ABSENT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"missing": [], "loaded": [], "refused": True}
