"""Attack: a notebook made to cost the grading process, not the sandbox.

A 17 MB file (under the 20 MB size budget) of about six million tiny JSON objects drove the
grading process to gigabytes and most of a minute in ``json.loads`` and nbformat's
validation, before any sandbox existed; a few such files add up across a batch. Now the
JSON's shape is checked in one bounded pass first (`json_budget`): the bomb is refused with
one row, never handed to a parser, and the honest neighbour is identified as before.

The proof does not time anything: ``json.loads`` is watched, and the bomb's text must never
reach it (it did on the old code: the first test failed there, stopped by the watch).
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from mlinfra_lab.grading import load_source_labs, release_node
from mlinfra_lab.grading.json_budget import json_too_complex
from mlinfra_lab.grading.submissions import find_submissions

pytestmark = pytest.mark.grading
WARMUP = Path(__file__).resolve().parents[1] / "labs" / "00_warmup.ipynb"
BOMB_OBJECTS = 5_700_000  # "{}," each: about 17 MB


class ParsedTheBomb(Exception):
    """Raised by the watch so the old code does not spend gigabytes proving the point."""


@pytest.fixture
def batch(tmp_path, monkeypatch):
    labs = load_source_labs(WARMUP)
    released = release_node(labs["00_warmup"].notebook, "00_warmup")
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "mallory").mkdir()
    (subs / "deep").mkdir()
    nbformat.write(released, str(subs / "alice" / "00_warmup.ipynb"))
    head = '{"nbformat": 4, "nbformat_minor": 5, "metadata": {"mlinfra": {"lab": "00_warmup"}, "x": ['  # fmt: skip
    (subs / "mallory" / "00_warmup.ipynb").write_text(
        head + "{}," * (BOMB_OBJECTS - 1) + '{}]}, "cells": []}'
    )
    (subs / "deep" / "00_warmup.ipynb").write_text(head + "[" * 150 + "]" * 150 + ']}, "cells": []}')  # fmt: skip
    parsed: list[int] = []
    loads = json.loads

    def watched(text, *args, **kwargs):
        if isinstance(text, str | bytes) and len(text) > 1_000_000:
            parsed.append(len(text))
            raise ParsedTheBomb(len(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", watched)
    found, problems = find_submissions([subs], labs)
    return found, problems, parsed


def test_the_bomb_costs_its_own_row_and_is_never_parsed(batch):
    found, problems, parsed = batch
    assert parsed == [], "the bomb's text reached json.loads"
    rows = {p.student: p.message for p in problems}
    assert "more than 500,000 values" in rows["mallory"] and "clear its outputs" in rows["mallory"]
    assert "nests more than 100 levels" in rows["deep"]
    assert [(s.student, s.lab) for s in found] == [("alice", "00_warmup")], "the neighbour"


def test_a_real_lab_is_far_inside_the_budget():
    text = WARMUP.read_text(encoding="utf-8")
    assert json_too_complex(text) is None
    assert json_too_complex(text, max_values=10) is not None
    assert json_too_complex('{"a": "[[[[,,,,{{{{"}', max_values=3, max_depth=1) is None
