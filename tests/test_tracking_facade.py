"""The store is a facade: no SQL of its own, under 300 lines; the cache says by its return value
(an open file) what it kept, not by a file name."""

from __future__ import annotations

import ast
import hashlib
import io
from pathlib import Path

import pytest

from mlinfra_lab.tracking.cache import ArtifactCache

pytestmark = pytest.mark.tracking

STORE = Path(__file__).resolve().parents[1] / "mlinfra_lab" / "tracking" / "store.py"
SQL_BUILDERS = {"select", "insert", "update", "delete", "text", "func", "union_all", "exists"}


def test_the_store_builds_and_runs_no_sql() -> None:
    tree = ast.parse(STORE.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in {"execute", "exec_driver_sql", "scalar", "insert", "update"}:
                found.append(f"line {node.lineno}: .{node.func.attr}(...)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in SQL_BUILDERS:
                found.append(f"line {node.lineno}: {node.func.id}(...)")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            names = {a.name for a in node.names} - {"Connection"}
            if names:
                found.append(f"line {node.lineno}: imports {sorted(names)} from {node.module}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "S":  # the schema's tables
                found.append(f"line {node.lineno}: S.{node.attr}")
    assert not found, f"store.py must leave SQL to its modules: {found}"


def test_the_store_stays_a_facade_under_300_lines() -> None:
    n = len(STORE.read_text().splitlines())
    assert n < 300, f"store.py has {n} lines: move what is not a check or a call to its module"


def test_a_blob_larger_than_the_cache_comes_as_an_unnamed_open_file(tmp_path: Path) -> None:
    big, small = b"x" * 100, b"y" * 5
    cache = ArtifactCache(tmp_path / "c", 10)
    sha_big, sha_small = hashlib.sha256(big).hexdigest(), hashlib.sha256(small).hexdigest()
    with cache.open(sha_big, lambda: io.BytesIO(big)) as f:
        assert not list((tmp_path / "c").iterdir()), "nothing kept, not even a temporary name"
        assert f.read() == big
    assert sha_big not in cache and cache.bytes_cached == 0
    for _ in range(2):
        with cache.open(sha_small, lambda: io.BytesIO(small)) as f:
            assert f.read() == small
    assert sha_small in cache and (cache.hits, cache.misses) == (1, 2)
    assert [p.name for p in (tmp_path / "c").iterdir()] == [sha_small]
