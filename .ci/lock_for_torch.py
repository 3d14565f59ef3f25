"""Print the lock file to install on top of the torch build just installed.

Contract: ``python .ci/lock_for_torch.py requirements.lock`` writes the lock to stdout less
every pin that the installed torch pins itself to another version, each named on stderr.
The Makefile installs torch first, then this output (`make setup`).

Why: requirements.lock is the CPU environment (torch's CPU build, which pins nothing, with
the triton the course was tested on). PyPI's Linux torch is a CUDA build that pins its own
triton (torch 2.13.0: triton==3.7.1), so where pip gets torch from PyPI (no PyTorch CPU
index: `make setup TORCH_INDEX=`), installing the lock as written is a resolution conflict.
There the torch build's pin wins: it is the triton that build was released with.

Runs in the fresh venv before anything but torch is installed: the standard library, and
pip's own copy of `packaging` to evaluate a pin's environment marker.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;,]+)\s*(;(.*))?$")
_LOCK = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _applies(marker: str | None) -> bool:
    """Whether a requirement's marker holds here; an extra's requirement never does."""
    if not marker:
        return True
    if "extra" in marker:
        return False
    try:
        from packaging.markers import Marker
    except ImportError:  # not installed yet: pip always carries a copy
        from pip._vendor.packaging.markers import Marker
    return Marker(marker).evaluate()


def torch_pins() -> dict[str, str]:
    """{name: version} that the installed torch requires exactly, here."""
    pins = {}
    for req in importlib.metadata.requires("torch") or []:
        match = _PIN.match(req.strip())
        if match and _applies(match[4]):
            pins[_norm(match[1])] = match[2]
    return pins


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python .ci/lock_for_torch.py requirements.lock", file=sys.stderr)
        return 2
    torch = importlib.metadata.version("torch")
    pins = torch_pins()
    for line in Path(argv[0]).read_text().splitlines():
        match = _LOCK.match(line.strip())
        if match and _norm(match[1]) in pins and pins[_norm(match[1])] != match[2]:
            print(
                f"{argv[0]}: {match[1]}=={match[2]} (the CPU environment's) yields to torch "
                f"{torch}'s own pin {match[1]}=={pins[_norm(match[1])]}",
                file=sys.stderr,
            )
            continue
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
