"""Every notebook's set-up cell is the one rendered from _config.yml (issues 11 and 31).

The cell installs a pinned release: the wheel of ``mlinfra_lab.__version__``, attached to the
GitHub release ``v<version>`` of `repository.url` in _config.yml (the one place to change
the repository, where the launch buttons read it too); book/_ext/setup_cells.py renders
the cell. These tests fail when a notebook's cell was edited by hand, or the URL or the
version changed without `python book/_ext/setup_cells.py --write`, and prove that --write
and --check do their job on a copy of a notebook (cell id, metadata and every other cell
kept). tests/test_colab_install.py builds that wheel and checks its file name.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
import yaml

pytestmark = pytest.mark.foundation

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*ROOT.glob("book/*.ipynb"), *ROOT.glob("labs/*.ipynb")])
SPEC = re.compile(
    r'"mlinfra-lab\[course\] @ (?P<url>https://[^"]+)/releases/download/v(?P<tag>[^/"]+)/'
    r'(?P<wheel>[^/"]+\.whl)"'
)


def _load_generator():
    spec = importlib.util.spec_from_file_location("setup_cells", ROOT / "book/_ext/setup_cells.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _setup_source(path: Path) -> str:
    cell = gen.setup_cell(json.loads(path.read_text()))
    assert cell is not None, f"{path.name}: no code cell starts with '# Set-up'"
    return "".join(cell["source"])


def _version() -> str:
    import mlinfra_lab

    return mlinfra_lab.__version__


def test_rendered_cell_installs_this_versions_release_from_the_configured_repository() -> None:
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    text = gen.render()
    compile(text, "set-up cell", "exec")
    first = text.splitlines()[0]
    assert first.startswith("# Set-up") and "generated" in first and gen.COMMAND in first
    match = SPEC.search(text)
    assert match, f"no `mlinfra-lab[course] @ URL/releases/download/vX/WHEEL` in:\n{text}"
    assert match["url"] == repo["url"].rstrip("/")
    assert match["tag"] == _version(), "the cell must install the release of __version__"
    assert match["wheel"] == f"mlinfra_lab-{_version()}-py3-none-any.whl"
    assert "git+" not in text and "@main" not in text, "a branch is not a pinned release"
    assert 'find_spec("mlinfra_lab")' in text and "runtime.describe()" in text


def test_the_version_is_written_once_and_pyproject_reads_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "mlinfra_lab.__version__"
    }
    assert gen.project() == ("mlinfra-lab", _version())


def test_the_readme_and_the_cell_say_where_the_package_is_published() -> None:
    """GitHub releases, not PyPI: neither sends a reader to a plain `pip install mlinfra-lab`."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "not on PyPI" in readme and "/releases/download/v<version>/" in readme
    assert not re.search(r"pip install \S*mlinfra-lab(\[[a-z,]+\])?\S*`", readme), (
        "README: the package is not on PyPI; name the release wheel's URL"
    )
    text = gen.render()
    assert "GitHub release" in text and "not on PyPI" in text


def test_the_url_and_the_version_each_come_from_one_file(tmp_path: Path) -> None:
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "mlinfra_lab").mkdir()
    init = tmp_path / "mlinfra_lab" / "__init__.py"
    shutil.copy2(ROOT / "mlinfra_lab" / "__init__.py", init)
    config = tmp_path / "_config.yml"
    config.write_text("repository:\n  url: https://github.com/someone/fork/\n")
    assert gen.release_url(config) == (
        f"https://github.com/someone/fork/releases/download/v{_version()}/"
        f"mlinfra_lab-{_version()}-py3-none-any.whl"
    )
    init.write_text(init.read_text().replace(f'"{_version()}"', '"9.8.7"', 1))
    assert gen.install_spec(config) == (
        "mlinfra-lab[course] @ https://github.com/someone/fork/releases/download/v9.8.7/"
        "mlinfra_lab-9.8.7-py3-none-any.whl"
    )
    init.write_text('"""No version here."""\n')
    with pytest.raises(gen.SetupCellError, match="no `__version__ = "):
        gen.render(config)
    (tmp_path / "pyproject.toml").unlink()
    with pytest.raises(gen.SetupCellError, match="pyproject.toml: cannot read"):
        gen.render(config)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_setup_cell_is_the_generated_one(path: Path) -> None:
    source = _setup_source(path)
    match = SPEC.search(source)
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")
    assert match, (
        f"{path.name}: the set-up cell installs no released mlinfra-lab[course] wheel; "
        f"run `{gen.COMMAND}`"
    )
    assert match["url"] == url, (
        f"{path.name}: the set-up cell installs from {match['url']}, _config.yml's repository.url "
        f"is {url}; run `{gen.COMMAND}`"
    )
    assert source == gen.render(), f"{path.name}: run `{gen.COMMAND}`"


def test_write_then_check_on_a_copy(tmp_path: Path) -> None:
    path = tmp_path / "nb.ipynb"
    shutil.copy2(NOTEBOOKS[0], path)
    before = json.loads(path.read_text())
    cell = gen.setup_cell(before)
    cell["source"] = ["# Set-up: edited by hand\n", "print('hi')"]
    path.write_text(json.dumps(before, indent=1, ensure_ascii=False) + "\n")

    assert gen.main(["--check", str(path)]) == 1
    assert gen.main(["--write", str(path)]) == 0
    assert gen.main(["--check", str(path)]) == 0
    after = json.loads(path.read_text())
    new = gen.setup_cell(after)
    assert "".join(new["source"]) == gen.render()
    assert (new["id"], new["metadata"]) == (cell["id"], cell["metadata"])
    cell["source"] = gen.render().splitlines(keepends=True)  # all --write may change
    assert path.read_text() == json.dumps(before, indent=1, ensure_ascii=False) + "\n", (
        "--write must change the set-up cell's source only, in the file's own format"
    )
    mtime = path.stat().st_mtime_ns
    assert gen.write([path], gen.render()) == [] and path.stat().st_mtime_ns == mtime


def test_a_non_https_url_is_refused_with_the_fix(tmp_path: Path) -> None:
    config = tmp_path / "_config.yml"
    config.write_text("repository:\n  url: git@github.com:me/mlinfra\n")
    with pytest.raises(gen.SetupCellError, match="https URL"):
        gen.render(config)


def test_a_release_workflow_builds_the_wheel_the_cell_downloads_on_a_tag() -> None:
    workflow = yaml.safe_load((ROOT / ".github/workflows/release.yml").read_text())
    trigger = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert trigger["push"]["tags"] == ["v*"], "the release runs on a version tag"
    steps = [s.get("run", "") for job in workflow["jobs"].values() for s in job["steps"]]
    assert any(".ci/release" in run for run in steps), "the workflow builds with .ci/release"
    upload = next(run for run in steps if "gh release upload" in run)
    assert "_build/dist/*" in upload, "it attaches what .ci/release writes (_build/dist)"
    assert workflow["permissions"]["contents"] == "write"


def test_release_refuses_a_tag_that_is_not_the_version() -> None:
    out = subprocess.run(
        ["bash", str(ROOT / ".ci/release"), "v0.0.0-not-this"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 1
    assert f"does not name the package's version {_version()}" in out.stderr, out.stderr
