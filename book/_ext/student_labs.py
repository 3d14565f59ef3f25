"""The book's student edition of the labs: `labs/` (instructor source) released into `book/labs/`.

Contract: `write_student_labs(src, out)` writes into `out` exactly what `mlinfra-lab release
src out` writes (solutions stubbed, hidden tests and wrong answers removed, outputs
cleared), plus the notebook metadata ``mystnb: {execution_mode: "off"}``, and removes
notebooks of `out` that no lab of `src` produces; `stale_student_labs(src, out)` lists
what differs from such a fresh release (empty when `out` is up to date). Command line:

    python book/_ext/student_labs.py labs book/labs            # make release-labs
    python book/_ext/student_labs.py --check labs book/labs    # exit 1 when stale

Design decisions:
- The book builds its lab pages from these files, never from `labs/`: no solution or
  hidden test can reach `_build/html` (pages, `_sources`, downloads, search index).
- `book/labs/` is committed, like a lock file: the public repository serves the student
  notebooks at a stable path, which is what the Colab and JupyterHub launch buttons
  (`repository.url` + page path) open. A test compares it with a fresh release.
- ``execution_mode: "off"`` (myst-nb's per-notebook override of `execute_notebooks:
  force`): the pages show the exercises with their stubs, not a wall of
  `NotImplementedError` tracebacks, and a stub never fails the build.
- The release itself is `mlinfra_lab.grading.release.release_dir`, the function behind
  `mlinfra-lab release`: one definition of what a student gets.
- Without `src` (a public copy of the course holds no `labs/`), `--check` has nothing to
  compare and passes, saying so: `book/labs/` is then published as committed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["NO_EXECUTE", "released_labs", "stale_student_labs", "write_student_labs"]

NO_EXECUTE = {"execution_mode": "off"}  # myst-nb reads notebook metadata key "mystnb"
FIX = "run `make release-labs` (book/labs/ is the student edition of labs/) and commit book/labs/"


def released_labs(src: Path | str) -> dict[str, Any]:
    """File name -> the student notebook (a dict) of every lab of `src`, as the book shows it."""
    from mlinfra_lab.grading.release import release_dir

    with tempfile.TemporaryDirectory(prefix="mlinfra-release-") as tmp:
        written = release_dir(src, tmp)
        notebooks = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in written}
    for nb in notebooks.values():
        nb["metadata"]["mystnb"] = dict(NO_EXECUTE)
    return notebooks


def _dumps(nb: dict[str, Any]) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_student_labs(src: Path | str, out: Path | str) -> list[Path]:
    """Write the student edition of every lab of `src` into `out`; return the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fresh = released_labs(src)
    for old in out.glob("*.ipynb"):
        if old.name not in fresh:
            old.unlink()  # a lab renamed or removed in the source
    written = []
    for name, nb in sorted(fresh.items()):
        (out / name).write_text(_dumps(nb), encoding="utf-8")
        written.append(out / name)
    return written


def stale_student_labs(src: Path | str, out: Path | str) -> list[str]:
    """What differs between `out` and a fresh student edition of `src` (empty: up to date)."""
    out = Path(out)
    fresh = released_labs(src)
    have = {p.name for p in out.glob("*.ipynb")} if out.is_dir() else set()
    problems = [f"{out / name}: missing" for name in sorted(set(fresh) - have)]
    problems += [f"{out / name}: no lab {name} in {src}" for name in sorted(have - set(fresh))]
    for name in sorted(have & set(fresh)):
        committed = json.loads((out / name).read_text(encoding="utf-8"))
        if committed != fresh[name]:
            problems.append(f"{out / name}: differs from the release of {Path(src) / name}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="folder of instructor labs (labs)")
    parser.add_argument("out", type=Path, help="folder of the book's student labs (book/labs)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when OUT differs from a fresh release")
    args = parser.parse_args(argv)
    if args.check:
        if not args.src.is_dir():
            print(f"student labs: no {args.src}/ here (a public copy): "
                  f"{args.out}/ is published as committed")
            return 0
        problems = stale_student_labs(args.src, args.out)
        for problem in problems:
            print(f"stale student edition: {problem}", file=sys.stderr)
        if problems:
            print(f"fix: {FIX}", file=sys.stderr)
            return 1
        print(f"student labs: {args.out}/ is the release of {args.src}/")
        return 0
    for path in write_student_labs(args.src, args.out):
        print(f"released {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
