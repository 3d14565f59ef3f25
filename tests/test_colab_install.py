"""The Colab path: the built wheel, installed with ``[course]``, runs a chapter and a lab;
installed with no extra, it imports and keeps the grader's dependencies out.

Colab has torch, Jupyter and the scientific stack preinstalled, and nothing of this
repository: its set-up cell pip-installs ``mlinfra-lab[course]``, and every later cell must
import and read only what that install brought. This test replays it in a fresh virtual
environment outside the checkout:

1. build the wheel from a copy of the package sources (nothing is written in the checkout);
2. create a virtual environment in tmp_path that sees torch (``TORCH_CPU_PIN``, by default
   the CPU build on this machine's disk; installed once for both venvs, `torch_site`), and
   install ipykernel and nbclient, as Colab has them;
3. ``pip install "<wheel>[course]"``: the course's other dependencies come from the index;
4. copy one chapter and one lab into a temporary folder and execute them there with nbclient
   in that environment, then check that the kernel imported ``mlinfra_lab`` from the venv.

The wheel's file name is the one the notebooks' set-up cell downloads from the release
(book/_ext/setup_cells.py). A second venv gets the wheel with no extra, as ``pip install
mlinfra-lab`` gives a student: ``import mlinfra_lab`` works, nbval, nbclient, ipykernel and
pytest are not installed, and ``mlinfra-lab grade`` says to install ``mlinfra-lab[grading]``
(and works once it is).

Chapter 4 imports the most dependencies (SQLAlchemy, Alembic, fsspec, networkx, matplotlib,
ipywidgets) and plots a committed benchmark result, so it also proves the results ship in the
wheel; lab 1 runs a Triton kernel (the interpreter on a CPU). Both take seconds; the
installs take most of the test's two to three minutes on a 2-core machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ["book/04_tracking.ipynb", "labs/01_fused_attention.ipynb"]
TORCH = os.environ.get("TORCH_CPU_PIN", "torch==2.13.0")
GRADER_DEPENDENCIES = ("nbval", "nbclient", "ipykernel", "pytest")
PROBE = (
    "import json, sys, mlinfra_lab, torch\n"
    "print('PROBE', json.dumps([mlinfra_lab.__file__, sys.executable, torch.__version__]))"
)

# Runs inside the fresh venv: execute each notebook in the folder given, print one JSON line.
RUNNER = """
import json, sys, time
from pathlib import Path
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

work, probe, report = Path(sys.argv[1]), sys.argv[2], {}
for path in sorted(work.glob("*.ipynb")):
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(probe))
    start, error = time.time(), None
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(work)}}).execute()
    except CellExecutionError as exc:
        error = str(exc)
    text = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    report[path.name] = {"seconds": round(time.time() - start, 1), "error": error,
                         "stdout": "".join(t if isinstance(t, str) else "".join(t) for t in text)}
print(json.dumps(report))
"""


def _clean_env(venv: Path) -> dict[str, str]:
    """The caller's environment less anything that points into the checkout or another venv."""
    drop = {
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "VIRTUAL_ENV",
        "JUPYTER_PATH",
        "TRITON_INTERPRET",
    }
    env = {k: v for k, v in os.environ.items() if k not in drop and str(ROOT) not in v}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if str(ROOT) not in p]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    # No byte-compiling at install: torch alone has thousands of modules the notebooks never import.
    env |= {
        "PIP_NO_INPUT": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_COMPILE": "1",
        "VIRTUAL_ENV": str(venv),
    }
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (
        f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out.stdout


def _copy_sources(dest: Path) -> None:
    """What building the wheel reads: pyproject.toml, the readme, the package, mapped folders."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    meta = project["project"]
    files = ["pyproject.toml", meta["readme"], *meta.get("license-files", [])]
    folders = ["mlinfra_lab", *project["tool"]["setuptools"].get("package-dir", {}).values()]
    for name in files:
        shutil.copy2(ROOT / name, dest / name)
    for name in folders:
        shutil.copytree(
            ROOT / name,
            dest / name,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
        )


def _expected_wheel_files() -> set[str]:
    """Every module of the package and every committed result, as wheel paths."""
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "mlinfra_lab").rglob("*.py")}
    results = {
        f"mlinfra_lab/_results/{p.name}"
        for p in (ROOT / "benchmarks" / "results").iterdir()
        if p.is_file()
    }
    return modules | results


@pytest.mark.foundation
def test_pyproject_lists_every_sub_package() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "mlinfra_lab").rglob("__init__.py")
    }
    assert found <= listed, (
        f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
    )


@pytest.mark.foundation
def test_requirements_txt_lists_the_course_extra() -> None:
    def names(lines: list[str]) -> set[str]:
        found = (
            re.match(r"\s*([A-Za-z0-9_.-]+)", line)
            for line in lines
            if not line.lstrip().startswith("#")
        )
        return {m[1].lower().replace("_", "-") for m in found if m}

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = names(project["dependencies"] + project["optional-dependencies"]["course"])
    listed = names((ROOT / "requirements.txt").read_text().splitlines())
    assert wanted <= listed, (
        f"add {sorted(wanted - listed)} to requirements.txt (the course extra has them)"
    )


def _setup_cells():
    spec = importlib.util.spec_from_file_location("setup_cells", ROOT / "book/_ext/setup_cells.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def torch_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``TORCH`` installed once (``pip --target``) for both venvs: Colab's preinstalled torch.

    Each venv reads it through a ``.pth`` file (`_venv_with_torch`), so pip there sees torch
    and its dependencies as installed, as on Colab, and the gigabyte is unpacked once, not
    once per venv (minutes on a 2-core machine)."""
    site = tmp_path_factory.mktemp("torch-site")
    env = _clean_env(site / "no-venv")
    _run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(site), TORCH], site, env, 900
    )
    return site


def _venv_with_torch(venv: Path, torch_site: Path, env: dict[str, str]) -> str:
    """A fresh venv at `venv` that sees `torch_site`; returns its python."""
    _run([sys.executable, "-m", "venv", str(venv)], venv.parent, env, 300)
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    (site_packages / "preinstalled-torch.pth").write_text(f"{torch_site}\n")
    return str(venv / "bin" / "python")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the sources (nothing is written in the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist = tmp / "src", tmp / "dist"
    for d in (src, dist):
        d.mkdir()
    _copy_sources(src)
    env = _clean_env(tmp / "no-venv")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(src), "-w", str(dist)],
        tmp,
        env,
        600,
    )
    (built,) = dist.glob("mlinfra_lab-*.whl")
    return built


@pytest.mark.install
def test_wheel_holds_the_package_and_has_the_name_the_setup_cell_downloads(wheel: Path) -> None:
    missing = _expected_wheel_files() - set(zipfile.ZipFile(wheel).namelist())
    assert not missing, (
        f"the wheel lacks {sorted(missing)[:10]}: check pyproject's packages and package-data"
    )
    cells = _setup_cells()
    assert wheel.name == cells.wheel_name(*cells.project()), (
        f"built {wheel.name}; the set-up cell downloads {cells.release_url()}"
    )
    assert cells.release_url().endswith(f"/{wheel.name}")


@pytest.mark.install
def test_wheel_ships_both_licences_and_py_typed(wheel: Path) -> None:
    """LICENSE (MIT, the code), LICENSE-BOOK (CC BY 4.0, the book's text) and the PEP 561
    marker: a user of the wheel gets the terms and the annotations with the package."""
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    for licence in ("LICENSE", "LICENSE-BOOK"):
        assert f"{info}/licenses/{licence}" in names, (
            f"the wheel lacks {licence}: list it in pyproject's [project] license-files"
        )
    assert "mlinfra_lab/py.typed" in names, "the wheel lacks py.typed: check package-data"
    assert "License-Expression: MIT" in archive.read(f"{info}/METADATA").decode()
    book = archive.read(f"{info}/licenses/LICENSE-BOOK").decode()
    assert "Attribution 4.0 International" in book


@pytest.mark.install
def test_wheel_registers_no_pytest_plugin(wheel: Path) -> None:
    """The quarantine plugin is opt-in (`-p mlinfra_lab.ci.pytest_plugin`): an install of the
    wheel adds no pytest11 entry point, so no one else's pytest run loads it."""
    archive = zipfile.ZipFile(wheel)
    (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = archive.read(entry_points).decode()
    assert "[console_scripts]" in text and "pytest11" not in text, text


@pytest.mark.install
@pytest.mark.timeout(900)
def test_wheel_without_extras_imports_and_sends_instructors_to_the_grading_extra(
    wheel: Path, torch_site: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    env = _clean_env(venv)
    python = _venv_with_torch(venv, torch_site, env)
    cli = str(venv / "bin" / "mlinfra-lab")
    _run([python, "-m", "pip", "install", "-q", str(wheel)], tmp_path, env, 900)

    probe = (
        "import importlib.metadata as md, json, mlinfra_lab\n"
        "from mlinfra_lab import runtime\n"
        "def have(name):\n"
        "    try:\n        return md.version(name)\n"
        "    except md.PackageNotFoundError:\n        return None\n"
        f"print(json.dumps([mlinfra_lab.__file__, str(runtime.describe()), "
        f"{{n: have(n) for n in {GRADER_DEPENDENCIES!r}}}]))"
    )
    module, described, grader = json.loads(_run([python, "-c", probe], tmp_path, env, 300))
    assert Path(module).is_relative_to(venv) and "torch" in described
    installed = {name: version for name, version in grader.items() if version}
    assert not installed, f"`pip install mlinfra-lab` (no extra) installed {installed}"
    assert "usage: mlinfra-lab" in _run([cli, "--help"], tmp_path, env, 120)

    for argv in (["grade", "--help"], ["validate", "labs"]):
        out = subprocess.run(
            [cli, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 2, (argv, out.stdout, out.stderr)
        assert out.stderr.count("\n") == 1 and 'pip install "mlinfra-lab[grading]"' in out.stderr
        assert all(name in out.stderr for name in GRADER_DEPENDENCIES), out.stderr

    _run([python, "-m", "pip", "install", "-q", f"{wheel}[grading]"], tmp_path, env, 900)
    assert "--source" in _run([cli, "grade", "--help"], tmp_path, env, 120)


@pytest.mark.install
@pytest.mark.timeout(1500)
def test_wheel_with_course_extra_runs_a_chapter_and_a_lab_outside_the_checkout(
    wheel: Path, torch_site: Path, tmp_path: Path
) -> None:
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    env = _clean_env(venv)
    python = _venv_with_torch(venv, torch_site, env)
    _run([python, "-m", "pip", "install", "-q", "ipykernel", "nbclient"], tmp_path, env, 900)
    _run([python, "-m", "pip", "install", "-q", f"{wheel}[course]"], tmp_path, env, 900)

    for name in NOTEBOOKS:
        shutil.copy2(ROOT / name, work / Path(name).name)
    (tmp_path / "runner.py").write_text(RUNNER)
    report = json.loads(
        _run([python, str(tmp_path / "runner.py"), str(work), PROBE], work, env, 1200).splitlines()[
            -1
        ]
    )

    assert sorted(report) == sorted(Path(n).name for n in NOTEBOOKS)
    for name, rep in report.items():
        assert rep["error"] is None, (
            f"{name} failed from the installed wheel:\n{rep['error'][-4000:]}"
        )
        probe = next(line for line in rep["stdout"].splitlines() if line.startswith("PROBE "))
        module, kernel_python, torch_version = json.loads(probe.removeprefix("PROBE "))
        assert Path(module).is_relative_to(venv), (
            f"{name}: mlinfra_lab came from {module}, not the venv"
        )
        assert Path(kernel_python).parent == venv / "bin", f"{name}: kernel ran {kernel_python}"
        assert "==" not in TORCH or torch_version.startswith(TORCH.split("==")[1]), (
            f"installing [course] replaced the preinstalled torch ({TORCH}) with {torch_version}"
        )
    assert "no committed result found" not in report["04_tracking.ipynb"]["stdout"], (
        "chapter 4 found no committed benchmark result: benchmarks/results/ is not in the wheel"
    )
    print({name: rep["seconds"] for name, rep in report.items()})
