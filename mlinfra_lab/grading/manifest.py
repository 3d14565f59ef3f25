"""The gradebook's manifest: what was graded, by hash, sealed with the grading secret.

Contract: `write_files(out_dir, files, report, secret)` writes each file of `files` (name ->
bytes) into `out_dir` atomically, then ``manifest.json``: the SHA-256 of each of those files,
of every submission file as it was graded (and of those read but not graded), and of the
source labs, plus a seal over all of it. `verify_gradebook(out_dir, secret)` recomputes
everything and returns a `Verification`: ``problems`` (an edited or missing gradebook file,
a manifest that does not match its seal) make it fail; ``notes`` (a submission or source
lab changed or gone since grading) do not, since both may move on after grading.

Design decisions:
- The seal is HMAC-SHA256 of the manifest's canonical JSON (sorted keys, no spaces), keyed
  by SHA-256 of a fixed context string and the grading secret, so nobody without the
  secret can rewrite the gradebook and its manifest together. With the public default
  secret there is no key: the seal is a plain SHA-256 and the manifest says
  ``"keyed": false``; it then detects accidents (an edit in a spreadsheet, a truncated
  copy), not someone who rewrites the manifest too. The command says so.
- A manifest that claims ``"keyed": false`` while the verifier holds a secret is a problem:
  it is how a rewritten manifest would downgrade itself.
- Each file goes through a temporary file in the same folder, ``fsync`` and ``os.replace``:
  a reader sees the old file or the new one, never half of one. The manifest is written
  last, so a run stopped between files leaves a gradebook that `verify_gradebook` reports.
- What leaves the gradebook folder's commands is sealed too: the exports, the feedback
  reports under ``feedback/`` and the summary are added to the manifest after they are
  written (`seal_outputs`), as relative paths of plain components that pass through no
  link. The manifest covers the files of the latest command that wrote them; reports
  released into the students' folders are outside it.
- The grading kernels never get the secret: they get per-exercise seeds derived
  from it (`secret.seed_table`), from which the key cannot be computed, so code graded in
  the same run cannot re-seal a gradebook it rewrote. Keeping that code away from the
  gradebook folder is still the sandbox's job.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import GradingError
from .secret import DEFAULT_SECRET

if TYPE_CHECKING:
    from .grade import GradeReport

__all__ = [
    "MANIFEST_NAME",
    "ManifestError",
    "Verification",
    "atomic_write",
    "seal_outputs",
    "verify_gradebook",
    "write_files",
]

MANIFEST_NAME = "manifest.json"
_CONTEXT = b"mlinfra gradebook manifest v1\0"


class ManifestError(GradingError):
    """The manifest cannot be checked as asked (a keyed manifest and no secret given)."""


@dataclass
class Verification:
    """What `verify_gradebook` found."""

    keyed: bool = False  # the manifest is sealed with a key (a non-default secret)
    problems: list[str] = field(default_factory=list)  # edited/missing gradebook files
    notes: list[str] = field(default_factory=list)  # submissions/sources changed since

    @property
    def ok(self) -> bool:
        return not self.problems


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str | None:
    """SHA-256 of regular file `path` (a link is not followed), or None if there is none."""
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError:
        return None
    digest = hashlib.sha256()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return digest.hexdigest()


def _seal(body: dict, secret: str) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    if secret == DEFAULT_SECRET:
        return "sha256:" + _sha256(canonical)
    key = hashlib.sha256(_CONTEXT + secret.encode("utf-8")).digest()
    return "hmac-sha256:" + hmac.new(key, canonical, hashlib.sha256).hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` by `data` at once: a temporary file beside it, fsync, os.replace."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a gradebook is read by others too
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable; not every file system lets a folder be opened
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)


def _body(files: dict[str, bytes], report: GradeReport, secret: str) -> dict:
    graded = [
        {
            "path": os.path.abspath(r.submission),
            "student": r.student,
            "lab": r.lab,
            "sha256": r.sha256,
            "graded": True,
        }
        for r in report.results
    ]
    refused = [
        {
            "path": os.path.abspath(p.path),
            "student": p.student,
            "lab": p.lab,
            "sha256": p.sha256,
            "graded": False,
        }
        for p in report.problems
        if p.sha256
    ]
    return {
        "format": 1,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "keyed": secret != DEFAULT_SECRET,
        "gradebook": {name: _sha256(data) for name, data in files.items()},
        "submissions": graded + refused,
        "source_labs": [
            {"lab": lab, "path": os.path.abspath(path), "sha256": digest}
            for lab, path, digest in report.sources
        ],
    }


def write_files(out_dir: Path, files: dict[str, bytes], report: GradeReport, secret: str) -> Path:
    """Write `files` into `out_dir` atomically, then their sealed manifest; its path."""
    body = _body(files, report, secret)
    for name, data in files.items():
        atomic_write(out_dir / name, data)
    manifest = {**body, "seal": _seal(body, secret)}
    path = out_dir / MANIFEST_NAME
    atomic_write(path, (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))
    return path


def _changed(entries: list, kind: str) -> list[str]:
    notes = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        now = _file_sha256(Path(entry["path"]))
        if now is None:
            notes.append(f"{kind} {entry['path']} is no longer there (or is not a regular file)")
        elif now != entry.get("sha256"):
            notes.append(f"{kind} {entry['path']} changed since it was graded")
    return notes


def _is_output(name: str) -> bool:
    """True for what `seal_outputs` adds: exports, the summary, feedback reports."""
    return "/" in name or name.startswith(("export-", "summary."))


def _unsealed_outputs(out: Path, files: dict) -> list[str]:
    """Notes on exports, summaries and feedback reports in `out` the manifest does not list."""
    found = [p for p in out.glob("export-*.csv")] + [p for p in out.glob("summary.*")]
    feedback = out / "feedback"
    if feedback.is_dir() and not feedback.is_symlink():
        found += [p for p in feedback.glob("*/*") if p.suffix in (".md", ".html")]
    return [
        f"{p}: not sealed (written before the gradebook last changed); write it again with "
        "the flag that makes it (--export, --summary, --feedback) to seal it"
        for p in sorted(found)
        if p.relative_to(out).as_posix() not in files
    ]


def verify_gradebook(
    out_dir: Path | str,
    secret: str,
    filled_in: frozenset[str] = frozenset(),
    *,
    records_only: bool = False,
) -> Verification:
    """Check the gradebook in `out_dir` against its manifest (see the module docstring);
    raises `ManifestError` if the manifest is keyed and `secret` is the public default.
    Files named in `filled_in` may differ from the manifest (``manual.csv`` when the
    instructor filled in that very sheet and merges it: it is input, not a result).
    `records_only` leaves out the exports, summary and feedback (a command that changes the
    gradebook checks the record it builds on; ``--verify`` checks everything)."""
    out = Path(out_dir)
    result = Verification()
    path = out / MANIFEST_NAME
    text = _read_text(path)
    if text is None:
        result.problems.append(
            f"{path}: no manifest (a missing or non-regular file), so nothing can be checked"
        )
        return result
    try:
        manifest = json.loads(text)
        body = {k: v for k, v in manifest.items() if k != "seal"}
        seal = manifest["seal"]
        files = body["gradebook"]
        if not isinstance(files, dict):
            raise TypeError("gradebook is not a mapping")
    except (ValueError, KeyError, TypeError, AttributeError):
        result.problems.append(f"{path}: not a manifest this tool wrote (it was edited)")
        return result
    result.keyed = body.get("keyed") is True
    if result.keyed and secret == DEFAULT_SECRET:
        raise ManifestError(
            f"{path} is sealed with the grading secret: give it (--secret S "
            "or $MLINFRA_GRADE_SECRET) to verify this gradebook"
        )
    if not result.keyed and secret != DEFAULT_SECRET:
        result.problems.append(
            f"{path}: only checksummed, not keyed, although you gave a "
            "secret: it was graded with the public default secret, or "
            "the manifest was rewritten"
        )
    elif not hmac.compare_digest(str(seal), _seal(body, secret)):
        result.problems.append(
            f"{path}: does not match its seal: edited after grading"
            + (", or the secret is not the one it was graded with" if result.keyed else "")
        )
    for name, digest in files.items():
        if not _inside(out, name):
            result.problems.append(
                f"{path}: names a file outside the gradebook folder (it was edited)"
            )
            continue
        if records_only and _is_output(name):
            continue
        now = _file_sha256(out / name)
        if now is None:
            result.problems.append(f"{out / name}: missing (or not a regular file)")
        elif now != digest and name not in filled_in:
            result.problems.append(
                f"{out / name}: edited after grading (its SHA-256 is not the manifest's)"
            )
    if not records_only:
        result.notes += _unsealed_outputs(out, files)
    result.notes += _changed(body.get("submissions", []), "submission")
    result.notes += _changed(body.get("source_labs", []), "source lab")
    return result


def _inside(out: Path, name: object) -> bool:
    """True when `name` is a relative path of plain components inside `out`, through no
    symbolic link (``export-canvas.csv``, ``feedback/ann/00_warmup.md``)."""
    if not isinstance(name, str) or not name or "\\" in name or name.startswith("/"):
        return False
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    return not any((out.joinpath(*parts[:k])).is_symlink() for k in range(1, len(parts)))


def seal_outputs(out_dir: Path | str, secret: str, paths: Iterable[Path]) -> Path:
    """Add the SHA-256 of each file of `paths` (inside `out_dir`: exports, feedback, the
    summary) to the manifest the gradebook was just written with, and seal it again, so
    ``--verify`` catches an edit of them too. Raises `ManifestError` when the manifest
    does not verify now (it is then left as it is)."""
    out = Path(out_dir)
    check = verify_gradebook(out, secret, records_only=True)
    if not check.ok:
        raise ManifestError(
            f"{out}: not sealing the outputs, the gradebook fails verification: "
            + "; ".join(check.problems)
        )
    manifest = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
    body = {k: v for k, v in manifest.items() if k != "seal"}
    root = out.resolve()
    for p in paths:
        name = Path(p).resolve().relative_to(root).as_posix()
        digest = _file_sha256(out / name)
        if digest is not None and _inside(out, name):
            body["gradebook"][name] = digest
    path = out / MANIFEST_NAME
    atomic_write(path, (json.dumps({**body, "seal": _seal(body, secret)}, indent=2) + "\n").encode("utf-8"))  # fmt: skip
    return path


def _read_text(path: Path) -> str | None:
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(64 << 20)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return ""
