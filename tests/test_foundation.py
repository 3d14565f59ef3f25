"""The course's foundation: runtime detection, the command line, and the book's sources.

These tests guard the conventions every chapter relies on: notebooks committed with their
outputs cleared and a Colab set-up cell first, a table of contents whose every entry exists,
the Triton interpreter switch, and a command line whose every command answers `--help`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from mlinfra_lab import runtime
from mlinfra_lab.cli import build_parser, main

pytestmark = pytest.mark.foundation

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*ROOT.glob("book/*.ipynb"), *ROOT.glob("labs/*.ipynb")])


def test_describe_reports_device_and_versions() -> None:
    info = runtime.describe()
    assert info.device in ("cpu", "cuda")
    assert info.torch and info.python
    assert (info.capability is None) == (info.device == "cpu")
    text = str(info)
    assert info.torch in text and info.device in text


def test_describe_without_a_gpu_device_file_skips_importing_torch_and_says_the_same() -> None:
    """Every set-up cell calls describe(): where no GPU device file exists it must not pay
    torch's import (about 2 s per notebook, per graded submission), and must say exactly
    what torch itself would say."""
    probe = (
        "import json, sys\n"
        "from mlinfra_lab import runtime\n"
        "fast = str(runtime.describe()); imported = 'torch' in sys.modules\n"
        "import torch\n"
        "print(json.dumps([fast, imported, str(runtime.describe())]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    fast, imported, slow = json.loads(done.stdout.splitlines()[-1])
    assert fast == slow
    if runtime._no_gpu_device_file():
        assert not imported, "describe() imported torch on a machine without a GPU device file"
    else:
        assert imported


def test_describe_without_triton_says_which_parts_need_linux() -> None:
    info = dataclasses.replace(runtime.describe(), triton=None)
    assert "chapter 1 and lab 1" in str(info) and "Linux" in str(info)


def test_sizes_returns_a_copy_per_device_and_rejects_unknown_topics() -> None:
    cpu = runtime.sizes("attention", "cpu")
    gpu = runtime.sizes("attention", "gpu")
    assert cpu["seq"] < gpu["seq"], "the CPU preset must be the smaller one"
    cpu["seq"] = -1
    assert runtime.sizes("attention", "cpu")["seq"] != -1, "sizes() must return a fresh dict"
    with pytest.raises(runtime.UnknownTopicError, match="known topics"):
        runtime.sizes("no-such-topic")
    with pytest.raises(ValueError, match="cpu' or 'gpu"):
        runtime.sizes("attention", "tpu")


def test_half_dtype_is_bfloat16_only_where_the_gpu_computes_in_it() -> None:
    """bfloat16 from Ampere on; float16 on Turing (Colab's T4: bf16 emulated, SDPA's fused
    kernels refuse it) and without a GPU (the Triton interpreter has no bfloat16)."""
    import torch

    assert runtime.half_dtype((7, 5)) == torch.float16
    assert runtime.half_dtype((8, 0)) == runtime.half_dtype((9, 0)) == torch.bfloat16
    if not runtime.on_gpu():
        assert runtime.half_dtype() == torch.float16


def _fresh_python(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return out.stdout.strip()


def test_triton_interpreter_switch_on_cpu_and_user_value_wins() -> None:
    code = (
        "import os; from mlinfra_lab import runtime; on = runtime.ensure_triton_mode(); "
        "print(on, os.environ.get('TRITON_INTERPRET'))"
    )
    if runtime.on_gpu():
        assert _fresh_python(code) == "False None"
    else:
        assert _fresh_python(code) == "True 1"
    assert _fresh_python(code, TRITON_INTERPRET="0") == "False 0"


def test_triton_imported_too_early_is_a_clear_error() -> None:
    if runtime.on_gpu():
        pytest.skip("on a GPU the interpreter is not needed, so importing triton first is fine")
    code = (
        "import triton\nfrom mlinfra_lab import runtime\n"
        "try:\n    runtime.ensure_triton_mode()\n"
        "except runtime.TritonAlreadyImportedError as e:\n    print('raised:', e)\n"
    )
    assert "Restart the kernel" in _fresh_python(code)


def test_every_command_answers_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"info", "bench"} <= set(commands)
    for name, sub in commands.items():
        help_text = sub.format_help()
        assert name in help_text and len(help_text) > 40, f"`mlinfra-lab {name} --help` is empty"


def test_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["torch"] and info["device"] in ("cpu", "cuda")


def test_console_script_is_installed() -> None:
    out = subprocess.run(
        [Path(sys.executable).with_name("mlinfra-lab"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "usage: mlinfra-lab" in out.stdout


def test_toc_entries_exist_and_every_notebook_is_in_the_toc() -> None:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    entries = [c for p in toc["parts"] for c in p["chapters"]]
    sections = [s for c in entries for s in c.get("sections", [])]
    files = [toc["root"]] + [c["file"] for c in [*entries, *sections]]
    # The book shows the student edition of each lab (book/labs/, tests/test_student_edition.py).
    published = [*ROOT.glob("book/*.ipynb"), *ROOT.glob("book/labs/*.ipynb")]
    found = {str(p.relative_to(ROOT).with_suffix("")) for p in published}
    for entry in files:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), entry
    assert found <= set(files), f"notebooks missing from _toc.yml: {sorted(found - set(files))}"
    chapters = [c["file"] for c in entries if c["file"].startswith("book/0")]
    assert all(s["file"].startswith("book/appendix_") for s in sections), sections
    labs = [f for f in files if f.startswith("book/labs/")]
    assert len(chapters) == 5 and len(labs) >= 5


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_is_committed_clean_with_setup_cell_first(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        assert cell.get("id"), f"{path.name}: every cell needs an id (graders restore by id)"
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: commit notebooks with outputs cleared"
            assert cell.execution_count is None, f"{path.name}: clear execution counts"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert 'find_spec("mlinfra_lab")' in first_code.source, (
        f"{path.name}: the first code cell must be the Colab set-up cell"
    )
    titles = [c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("# ")]
    assert len(titles) == 1, f"{path.name}: exactly one '# ' title per notebook"


def test_no_launch_button_points_at_a_placeholder_hub() -> None:
    """A JupyterHub or Binder button appears only where a real one is configured."""
    launch = yaml.safe_load((ROOT / "_config.yml").read_text())["launch_buttons"]
    for key in ("jupyterhub_url", "binderhub_url"):
        url = launch.get(key) or ""
        assert not url or (url.startswith("https://") and ".example." not in url), (
            f"_config.yml: launch_buttons.{key} is {url!r}: leave it empty (no button) or name "
            f"your institution's hub"
        )


def test_every_page_names_the_licences_of_the_text_and_the_code() -> None:
    """The book's footer names CC BY 4.0 (LICENSE-BOOK) and MIT (LICENSE); both files exist."""
    footer = yaml.safe_load((ROOT / "_config.yml").read_text())["html"]["extra_footer"]
    assert "CC BY 4.0" in footer and "LICENSE-BOOK" in footer
    assert "MIT License" in footer and "(LICENSE)" in footer
    assert "Attribution 4.0 International" in (ROOT / "LICENSE-BOOK").read_text()
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in ci and "make test" in readme and "make book" in readme
    # and then proves a student's set-up: a fresh venv, pip without this machine's config
    assert "bash .ci/fresh-venv.sh" in ci
    fresh = (ROOT / ".ci" / "fresh-venv.sh").read_text()
    assert "PIP_CONFIG_FILE=/dev/null" in fresh and "PIP_INDEX_URL=https://pypi.org/simple" in fresh
    assert "make --no-print-directory setup" in fresh and "book/05_staleness.ipynb" in fresh


def test_readme_first_screen_names_the_system_packages_make_test_checks() -> None:
    """Every program `make check-system` looks for is named, with its package, near the top."""
    readme = (ROOT / "README.md").read_text()
    first_screen = readme[: readme.index("## ", readme.index("make test"))]
    for package in ("bubblewrap", "chromium", "postgresql"):
        assert package in first_screen, f"README's first screen does not name {package}"
    makefile = (ROOT / "Makefile").read_text()
    check = makefile[makefile.index("check-system:") :]
    for program in ("bwrap", "chromium", "initdb"):
        assert program in check, f"make check-system does not look for {program}"
    assert len(readme.encode()) < 8000, "README is for a newcomer: keep it short"


def test_the_grading_commands_check_their_extra_from_the_installed_metadata() -> None:
    """`mlinfra-lab grade` without `[grading]` says what to install (tests/test_colab_install.py
    runs it in a venv without the extra); here the extra is installed, so nothing is missing."""
    import importlib.metadata

    import tomllib

    from mlinfra_lab import cli

    assert {cli.COMMANDS[c][0] for c in ("release", "grade", "validate")} == set(cli.EXTRAS)
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["grading"]
    installed = [r for r in importlib.metadata.requires("mlinfra-lab") if 'extra == "grading"' in r]
    assert len(installed) == len(extra), "reinstall the package (pip install -e .): stale metadata"
    assert cli.missing_extra("grading") == []
    err = cli.MissingExtraError("grading", ["nbval", "ipykernel"])
    assert str(err).endswith(
        '(missing: ipykernel, nbval); install it with: pip install "mlinfra-lab[grading]"'
    )
