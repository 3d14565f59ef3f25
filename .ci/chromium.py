"""Print the path of a Chromium for the browser test, fetching Playwright's own if need be.

Contract: prints one path on stdout and exits 0, or prints the one-line fix on stderr and
exits 1. Looks, in order, at $MLINFRA_CHROMIUM, /usr/bin/chromium (Debian's package), a
`chromium` on PATH, and Playwright's own download; when none exists it runs
`python -m playwright install chromium` once and looks again.

Design decisions:
- Debian's Chromium comes first: it is what CI installs (.ci/run) and needs no download;
  Playwright's build is the fallback for machines where apt is not at hand.
- Playwright's install needs its own download host; where it is unreachable the install
  fails, and the message names the one fix that works everywhere here: apt-get install.
- Progress of the install goes to stderr: stdout carries only the path, for the Makefile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

DEBIAN = Path("/usr/bin/chromium")
FIX = ("browser test: no Chromium found and Playwright could not download its own; "
       "fix: apt-get install chromium (or set MLINFRA_CHROMIUM=/path/to/chromium)")


def playwright_chromium() -> Path | None:
    """Playwright's own Chromium when it is installed, else None."""
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            path = Path(pw.chromium.executable_path)
    except Exception:  # no playwright, or its driver cannot start
        return None
    return path if path.exists() else None


def find_chromium() -> Path | None:
    """The first Chromium found (see the module docstring), without installing anything."""
    on_path = shutil.which("chromium")
    for candidate in (DEBIAN, Path(on_path) if on_path else None):
        if candidate is not None and candidate.exists():
            return candidate
    return playwright_chromium()


def main() -> int:
    chosen = os.environ.get("MLINFRA_CHROMIUM")
    if chosen:
        if Path(chosen).exists():
            print(chosen)
            return 0
        print(f"browser test: MLINFRA_CHROMIUM={chosen} does not exist; "
              "fix: apt-get install chromium (or point MLINFRA_CHROMIUM at a Chromium)",
              file=sys.stderr)
        return 1
    found = find_chromium()
    if found is None:
        print("browser test: no Chromium at /usr/bin/chromium or on PATH; "
              "trying `python -m playwright install chromium`", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "playwright", "install", "chromium"],
                       stdout=sys.stderr, stderr=sys.stderr, check=False)
        found = playwright_chromium()
    if found is None:
        print(FIX, file=sys.stderr)
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
