"""How `mlinfra_lab`'s modules depend on one another: no import cycle, no private name
borrowed across sub-packages.

The graph is read from the source with `ast` (nothing is imported): ``import`` and
``from ... import`` statements anywhere in a module (inside functions and under ``if
TYPE_CHECKING:`` too: a lazy or a type-only import is still a dependency), and module names
written as strings, which is how ``importlib.import_module`` loads them (`mlinfra_lab.cli`'s
command tables, `mlinfra_lab.tracking`'s PEP 562 exports). A cycle of lazy or type-only
imports runs, but it ties the modules together so that none can be read, tested or moved
alone.

A name is private when it starts with one underscore (``_forward``; a private module such
as ``_checks`` counts too). A module may use the private names of its own sub-package
(``attention.tiles`` calls ``flash._forward``); outside it, they are off limits.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.foundation

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "mlinfra_lab"

# Import edges (importer, imported) that close a known cycle, each with its reason. The test
# fails on any other cycle, and on an entry here whose edge is gone (delete the entry then).
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}

# Private names used outside their sub-package: (user, owner module, name) -> reason.
KNOWN_PRIVATE_USES: dict[tuple[str, str, str], str] = {}


@dataclass
class Module:
    """What one module's source says about its dependencies."""

    name: str
    is_package: bool
    imports: set[str] = field(default_factory=set)
    private_uses: set[tuple[str, str]] = field(default_factory=set)  # (owner module, name)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _subpackage(module: str) -> str:
    """``mlinfra_lab.attention.flash`` -> ``mlinfra_lab.attention``; a top-level module is
    its own (``mlinfra_lab.cli``)."""
    return ".".join(module.split(".")[:2])


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    base = base if module.is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def analyse(sources: dict[str, tuple[str, bool]]) -> dict[str, Module]:
    """`sources`: module name -> (code, is a package ``__init__``). Only edges to modules of
    `sources` are kept."""
    names = set(sources)
    root = min(names, key=len)  # the package itself
    modules = {name: Module(name, is_pkg) for name, (_, is_pkg) in sources.items()}
    for name, (code, _) in sources.items():
        module, tree = modules[name], ast.parse(code)
        aliases: dict[str, str] = {}  # local name -> a module of the package
        strings = {
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in names:
                        module.imports.add(alias.name)
                        aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in names:  # a sub-module
                        module.imports.add(full)
                        aliases[alias.asname or alias.name] = full
                    elif base in names:
                        module.imports.add(base)
                        if _is_private(alias.name):
                            module.private_uses.add((base, alias.name))
            elif isinstance(node, ast.Constant) and node.value in names:
                module.imports.add(node.value)  # loaded by name (importlib.import_module)
            elif isinstance(node, ast.JoinedStr) and node.values:
                head = node.values[0]  # f"mlinfra_lab.x.{name}": any x.NAME of the strings
                if isinstance(head, ast.Constant) and str(head.value).startswith(f"{root}."):
                    module.imports |= {f"{head.value}{s}" for s in strings} & names
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _is_private(node.attr)
            ):
                module.private_uses.add((aliases[node.value.id], node.attr))
        for target in module.imports:  # a private module (``_checks``) is a private name
            parent, _, last = target.rpartition(".")
            if _is_private(last):
                module.private_uses.add((parent, last))
        module.imports.discard(name)
    return modules


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _package_sources() -> dict[str, tuple[str, bool]]:
    sources = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        is_pkg = parts[-1] == "__init__"
        sources[".".join(parts[:-1] if is_pkg else parts)] = (path.read_text(), is_pkg)
    return sources


@pytest.fixture(scope="module")
def package() -> dict[str, Module]:
    return analyse(_package_sources())


def _edges(modules: dict[str, Module]) -> set[tuple[str, str]]:
    return {(m.name, target) for m in modules.values() for target in m.imports}


def test_no_import_cycle(package: dict[str, Module]) -> None:
    edges = _edges(package)
    gone = sorted(set(KNOWN_CYCLE_EDGES) - edges)
    assert not gone, f"these known cycle edges are gone: delete them from KNOWN_CYCLE_EDGES: {gone}"
    found = cycles(edges - set(KNOWN_CYCLE_EDGES))
    assert not found, f"import cycles (each a set of modules that import one another): {found}"


def test_no_private_name_used_outside_its_subpackage(package: dict[str, Module]) -> None:
    uses = {
        (m.name, owner, name)
        for m in package.values()
        for owner, name in m.private_uses
        if _subpackage(owner) != _subpackage(m.name)
    }
    gone = sorted(set(KNOWN_PRIVATE_USES) - uses)
    assert not gone, f"delete these from KNOWN_PRIVATE_USES: {gone}"
    new = sorted(uses - set(KNOWN_PRIVATE_USES))
    assert not new, (
        f"private names used outside their sub-package (make them public, or move the code): {new}"
    )


def test_the_checks_see_every_kind_of_import() -> None:
    """Each way of importing, on a made-up package: the analysis must find the cycle and the
    borrowed private names it hides."""
    sources = {
        "p": ("", True),
        "p.a": ("__all__ = ['x']\n", True),
        "p.a.x": ("def f():\n    from ..b import y\n    return y._hidden\n", False),
        "p.a._priv": ("", False),
        "p.b": ("", True),
        "p.b.y": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.a\n", False),
        "p.b.z": ("import importlib\nM = importlib.import_module('p.b.w')\n", False),
        "p.b.w": ("from p.a import _priv\nfrom p.b.z import M\n", False),
        "p.c": (
            "from importlib import import_module\nT = {'n': 'v'}\n"
            "def g(k):\n    return import_module(f'p.c.{T[k]}')\n",
            True,
        ),
        "p.c.v": ("import p.c\n", False),
    }
    modules = analyse(sources)
    assert modules["p.a.x"].imports == {"p.b.y"}  # relative, inside a function
    assert modules["p.b.y"].imports == {"p.a"}  # under TYPE_CHECKING
    assert cycles(_edges(modules)) == [["p.b.w", "p.b.z"], ["p.c", "p.c.v"]]
    assert ("p.b.y", "_hidden") in modules["p.a.x"].private_uses
    assert ("p.a", "_priv") in modules["p.b.w"].private_uses
