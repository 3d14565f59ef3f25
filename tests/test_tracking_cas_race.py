"""The small content-addressed store of Lab 4's garbage-collection exercise: its operations and races.

The lab's graders trust `CasStore` to behave like an object store (paged listings, a delete
conditional on the generation, a rewrite that makes a new generation) and `schedule` to
place a writer's step exactly before a collector's operation. These tests pin each of those,
and show that a race is a schedule: run twice, it does the same thing.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from pathlib import Path

import pytest

from mlinfra_lab.tracking.cas_race import TARGET_FORMS, BlobEntry, CasStore, spell

pytestmark = pytest.mark.tracking


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_every_operation_ticks_the_clock_once() -> None:
    store = CasStore(page_size=2, now=100)
    assert store.clock() == 101
    store.put(b"a")
    store.commit("r", spell(_digest(b"a"), "sha256"))
    store.list_blobs()
    store.list_refs()
    assert store.clock() == 106
    assert store.operations == 4  # only the collector's operations are counted


def test_listing_is_paged_in_digest_order() -> None:
    store = CasStore(page_size=2)
    digests = sorted(store.put(f"blob {k}".encode(), at=10 + k) for k in range(5))
    pages, after = [], ""
    while page := store.list_blobs(after):
        pages.append(page)
        after = page[-1].digest
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [e.digest for p in pages for e in p] == digests
    assert all(isinstance(e, BlobEntry) and e.generation == 1 for p in pages for e in p)


def test_a_rewrite_is_a_new_generation_written_now() -> None:
    store = CasStore(now=500)
    digest = store.put(b"bytes", at=7)
    assert store.entry(digest) == BlobEntry(digest, 1, 7)
    assert store.put(b"bytes") == digest
    assert store.entry(digest) == BlobEntry(digest, 2, 501)


def test_a_conditional_delete_refuses_a_blob_rewritten_since_the_listing() -> None:
    store = CasStore()
    digest = store.put(b"bytes", at=1)
    (listed,) = store.list_blobs()
    store.put(b"bytes")  # a de-duplicated upload rewrites it
    assert store.delete_blob(digest, if_generation=listed.generation) is False
    assert store.has(digest)
    assert store.delete_blob(digest) is True
    assert not store.has(digest)
    assert store.delete_blob(digest) is False  # gone already


def test_references_are_kept_as_their_clients_spelled_them() -> None:
    digest = _digest(b"weights")
    store = CasStore()
    for form in TARGET_FORMS:
        store.commit(form, spell(digest, form))
    assert store.list_refs() == {
        "sha256": f"sha256:{digest}",
        "SHA256": f"sha256:{digest.upper()}",
        "path": f"blobs/{digest[:2]}/{digest}",
    }
    store.drop("path")
    assert set(store.references()) == {"sha256", "SHA256"}
    with pytest.raises(ValueError, match="unknown target form"):
        spell(digest, "md5")
    with pytest.raises(ValueError, match="not a sha256 digest"):
        spell(digest.upper(), "sha256")


def test_schedule_runs_an_action_just_before_the_collectors_operation() -> None:
    store = CasStore()
    seen: list[str] = []
    store.schedule(1, lambda: seen.append(f"before op 1, {store.operations} done"))
    store.schedule(9, lambda: seen.append("never reached"))
    store.clock()
    assert seen == []
    store.list_refs()
    assert seen == ["before op 1, 1 done"]
    store.run_pending()
    assert seen == ["before op 1, 1 done", "never reached"]
    with pytest.raises(ValueError, match="already run"):
        store.schedule(0, lambda: None)


def test_a_race_is_a_schedule_replayed_exactly() -> None:
    """The same race twice: the same log, line for line (no threads, no wall clock)."""

    def race() -> list[str]:
        store = CasStore(page_size=1)
        old = store.put(b"garbage", at=1)
        store.schedule(2, lambda: store.put(b"garbage"))
        store.schedule(3, lambda: store.commit("upload", spell(old, "path")))
        store.clock()
        listed = store.list_blobs()
        store.list_refs()
        store.delete_blob(old, if_generation=listed[0].generation)
        store.run_pending()
        assert store.has(old)  # the conditional delete lost to the rewrite
        return store.log

    assert race() == race()


def test_page_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="page_size"):
        CasStore(page_size=0)


# -- Lab 4's exercise 4: its graders, run here on the solution and on mutations of it ------
# `validate` runs the lab's two wrong-answer cells as whole notebooks; these mutations are
# the other plausible mistakes, proved caught by the same grader cells (hidden tests
# included) in a few tenths of a second, without a kernel.
LAB = Path(__file__).resolve().parents[1] / "labs" / "04_tracking.ipynb"
GC_CELLS = ("gc-setup", "gc-solution", "gc-grade-at-rest", "gc-grade-races")
CLOCK_FIRST = "    start = clock()\n"
MUTATIONS = {
    "no grace period": [
        (
            "blob.digest in referenced or blob.written_at > start - grace",
            "blob.digest in referenced",
        )
    ],
    "unconditional delete": [
        ("delete_blob(blob.digest, if_generation=blob.generation)", "delete_blob(blob.digest)")
    ],
    "clock read after the references and the listing": [
        (CLOCK_FIRST, ""),
        ("    deleted = []\n", CLOCK_FIRST + "    deleted = []\n"),
    ],
    "case-sensitive targets": [("target[7:].lower()", "target[7:]")],
    "only the first page": [
        ("    while page := list_blobs(after):", "    for page in [list_blobs(after)]:")
    ],
}


def _gc_cells() -> dict[str, str]:
    cells = {c.get("id"): "".join(c["source"]) for c in json.loads(LAB.read_text())["cells"]}
    return {cid: cells[cid] for cid in GC_CELLS}


def _run_graders(solution: str) -> list[str]:
    """The failures of the exercise's graders (hidden tests included) with `solution`."""
    cells, failures, ns = _gc_cells(), [], {}
    cells["gc-solution"] = solution
    for cid in GC_CELLS:
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(cells[cid], cid, "exec"), ns)
            except Exception as err:  # noqa: BLE001 - a failing cell, as nbval would report it
                failures.append(f"{cid}: {type(err).__name__}: {err}")
    return failures


def test_the_labs_gc_solution_passes_its_graders() -> None:
    assert _run_graders(_gc_cells()["gc-solution"]) == []


@pytest.mark.parametrize("mistake", sorted(MUTATIONS))
def test_each_plausible_gc_mistake_fails_a_grader(mistake: str) -> None:
    solution = _gc_cells()["gc-solution"]
    for old, new in MUTATIONS[mistake]:
        assert solution.count(old) == 1, f"the mutation {mistake!r} no longer applies: {old!r}"
        solution = solution.replace(old, new)
    failures = _run_graders(solution)
    assert any(f.startswith("gc-grade-") for f in failures), f"{mistake}: no grader failed"
