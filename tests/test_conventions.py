"""The package's house conventions, checked on its source so a new module cannot drift.

- Every exception class `mlinfra_lab` defines is an `MlinfraError`, and ``mlinfra-lab``
  prints one as a single line with exit status 2 (`mlinfra_lab.errors`).

These tests read the source with `ast` or run a fresh interpreter: they import no chapter.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from mlinfra_lab import cli
from mlinfra_lab.errors import MlinfraError

pytestmark = pytest.mark.foundation

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mlinfra_lab"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "_results" not in p.parts)
BUILTIN_EXCEPTIONS = {
    name for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
    and not issubclass(obj, Warning)
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _base_names(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]


def _exceptions_outside_the_convention(sources: dict[str, str]) -> list[str]:
    """Classes (``module.Name(bases)``) of `sources` (module -> code) built on a built-in
    exception that do not reach `MlinfraError` through their bases (matched by name)."""
    classes = [
        (module, node.name, _base_names(node))
        for module, code in sources.items()
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.ClassDef)
    ]
    conforming = {"MlinfraError"}
    while True:  # a fixed point: subclasses of subclasses of MlinfraError
        more = {name for _, name, bases in classes if conforming & set(bases)} - conforming
        if not more:
            break
        conforming |= more
    return [
        f"{module}.{name}({', '.join(bases)})"
        for module, name, bases in classes
        if set(bases) & BUILTIN_EXCEPTIONS and name not in conforming
    ]


def test_every_exception_class_is_an_mlinfra_error() -> None:
    sources = {_module_name(p): p.read_text() for p in SOURCES}
    offenders = _exceptions_outside_the_convention(sources)
    assert not offenders, (
        "subclass MlinfraError (and the built-in category) in: " + "; ".join(offenders)
    )


def test_the_exception_check_catches_a_stray_class() -> None:
    source = (
        "class MlinfraError(Exception): pass\n"
        "class Ok(MlinfraError, ValueError): pass\n"
        "class Deeper(Ok, KeyError): pass\n"
        "class Stray(ValueError): pass\n"
        "class Nested(Ok): pass\n"
        "def f():\n    class Local(RuntimeError): pass\n"
        "class Note(UserWarning): pass\n"
    )
    assert _exceptions_outside_the_convention({"m": source}) == [
        "m.Stray(ValueError)", "m.Local(RuntimeError)"
    ]


def test_cli_prints_a_chapter_error_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-lab.ipynb"
    assert cli.main(["release", str(missing), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("mlinfra-lab release: error: ") and str(missing) in err


def test_one_line_joins_lines_and_drops_keyerror_quotes() -> None:
    assert cli._one_line(MlinfraError("bad filter\n  a >> 1\n    ^\n")) == "bad filter | a >> 1 | ^"

    class Missing(MlinfraError, KeyError):
        pass

    assert cli._one_line(Missing("no topic 'x'; known topics: a, b")) == (
        "no topic 'x'; known topics: a, b"
    )
