"""Every lab's forbid lists name functions that exist: a refactor of the package that
removes or renames a forbidden function fails here, in seconds, instead of in
`mlinfra-lab validate` (which stops the whole lab's validation at that grader)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlinfra_lab.grading import forbid

pytestmark = pytest.mark.grading

LABS = sorted((Path(__file__).resolve().parents[1] / "labs").glob("*.ipynb"))
ENTRIES = [
    pytest.param(name, id=f"{lab.stem}:{cell.get('id')}:{name.rsplit('.', 1)[-1]}")
    for lab in LABS
    for cell in json.loads(lab.read_text())["cells"]
    for name in cell.get("metadata", {}).get("forbid", [])
]


def test_the_labs_forbid_something():
    assert LABS and ENTRIES


@pytest.mark.parametrize("name", ENTRIES)
def test_forbid_entry_resolves_to_functions(name):
    assert forbid.forbidden_codes(name)


@pytest.mark.parametrize("name", ENTRIES)
def test_an_entry_compiled_from_source_is_the_code_an_import_makes(name):
    """Where the kernel has not imported an entry's module, the guard watches the code
    compiled from its source, by content (`code_key`): it must be the code the import
    makes, or a student importing the module inside the grader would not be caught."""
    compiled = forbid.source_codes(name)
    if compiled is None:  # a re-export or an assignment: the guard imports it
        return
    imported = forbid.forbidden_codes(name)
    assert sorted(map(str, map(forbid.code_key, (c for _, c in compiled)))) == sorted(
        map(str, map(forbid.code_key, imported))
    )


def test_an_entry_for_a_removed_function_is_refused_with_the_path():
    missing = "mlinfra_lab.attention._flash_kernels._fwd_inner_v2"
    with pytest.raises(forbid.MarkerError, match="_fwd_inner_v2' does not resolve"):
        forbid.forbidden_codes(missing)
