"""Artifact validation: the files a run must leave behind exist and match their JSON schemas.

Contract: ``validate_artifacts(run_dir, schema)`` checks that every file named in `schema`
exists in `run_dir`, that each JSON file matches its JSON Schema, and that the files listed
in ``manifest.json`` have the size and SHA-256 recorded there; it returns an
`ArtifactReport` or raises `ArtifactError` naming the file, the line and the field.

Design decisions:
- `schema` maps a file name to a JSON Schema (draft 2020-12), or to ``None`` for a binary
  file that must only exist (the checkpoint). ``TRAIN_TINY_ARTIFACTS`` is the one for
  ``train_tiny``; a project adds its own beside it.
- This is the fourth CI tier: a change that trains fine but writes a metrics file the
  dashboard cannot read, or a manifest whose hashes lie, is caught before anyone trains at
  full scale on it.
- Of several schema violations the most relevant one is reported (``best_match``), with
  its line in the file: one clear message, fix it, run again.

References: JSON Schema 2020-12; python-jsonschema ``best_match``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlinfra_lab.ci.jsonfile import line_of, load_json
from mlinfra_lab.errors import MlinfraError

__all__ = [
    "MANIFEST_SCHEMA",
    "METRICS_SCHEMA",
    "TRAIN_TINY_ARTIFACTS",
    "ArtifactError",
    "ArtifactReport",
    "validate_artifacts",
]

_NUMBER = {"type": "number"}
METRICS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "train_tiny metrics.json",
    "type": "object",
    "required": ["run", "config", "seeds", "steps", "losses", "final_loss", "environment"],
    "properties": {
        "run": {"type": "string"},
        "config": {"type": "object", "required": ["seed", "steps", "examples"]},
        "seeds": {
            "type": "object",
            "additionalProperties": {"type": ["integer", "null"]},
        },
        "steps": {"type": "integer", "minimum": 1},
        "losses": {"type": "array", "items": _NUMBER, "minItems": 1},
        "final_loss": _NUMBER,
        "environment": {"type": "object", "required": ["python", "torch"]},
    },
}
MANIFEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "artifact manifest.json",
    "type": "object",
    "required": ["run", "files"],
    "properties": {
        "run": {"type": "string"},
        "files": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["path", "bytes", "sha256"],
                "properties": {
                    "path": {"type": "string"},
                    "bytes": {"type": "integer", "minimum": 0},
                    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                },
            },
        },
    },
}
# What train_tiny must leave in its out_dir (None: must exist, not JSON).
TRAIN_TINY_ARTIFACTS: dict[str, dict[str, Any] | None] = {
    "checkpoint.pt": None,
    "metrics.json": METRICS_SCHEMA,
    "manifest.json": MANIFEST_SCHEMA,
}


class ArtifactError(MlinfraError, ValueError):
    """A run's artifact is missing or invalid; the message names the file and the line."""


@dataclass(frozen=True)
class ArtifactReport:
    """The files that were checked."""

    run_dir: Path
    files: tuple[str, ...]  # every file checked, in schema order
    manifest_entries: int  # files whose size and hash matched the manifest


def _check_schema(path: Path, schema: dict[str, Any]) -> tuple[Any, str]:
    """The parsed document and its text, or `ArtifactError` at the most relevant violation."""
    import jsonschema

    doc, text = load_json(path, what="artifact", error=ArtifactError)
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is not None:
        where = "$" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
        )
        raise ArtifactError(
            f"{path}:{line_of(text, list(error.absolute_path))}: schema violation at "
            f"{where}: {error.message}"
        )
    return doc, text


def _check_manifest(run_dir: Path, manifest: dict[str, Any], text: str) -> int:
    for i, item in enumerate(manifest["files"]):
        line = line_of(text, ["files", i])
        target = run_dir / item["path"]
        where = f"{run_dir / 'manifest.json'}:{line}"
        if not target.is_file():
            raise ArtifactError(f"{where}: lists {item['path']!r}, which is not in {run_dir}")
        data = target.read_bytes()
        if len(data) != item["bytes"] or hashlib.sha256(data).hexdigest() != item["sha256"]:
            raise ArtifactError(
                f"{where}: {item['path']!r} does not match its recorded size/sha256 "
                "(changed after the manifest was written?)"
            )
    return len(manifest["files"])


def validate_artifacts(
    run_dir: str | Path, schema: dict[str, dict[str, Any] | None] | None = None
) -> ArtifactReport:
    """Check the files of `run_dir` against `schema` (default: ``TRAIN_TINY_ARTIFACTS``)."""
    run_dir = Path(run_dir)
    schema = TRAIN_TINY_ARTIFACTS if schema is None else schema
    if not run_dir.is_dir():
        raise ArtifactError(f"{run_dir}: no such run directory")
    entries = 0
    for name, file_schema in schema.items():
        path = run_dir / name
        if not path.is_file():
            raise ArtifactError(f"{path}: expected artifact is missing")
        if file_schema is not None:
            doc, text = _check_schema(path, file_schema)
            if name == "manifest.json":
                entries = _check_manifest(run_dir, doc, text)
    return ArtifactReport(run_dir, tuple(schema), entries)
