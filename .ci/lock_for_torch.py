"""Print the lock file to install on top of the torch build just installed.

Contract: ``python .ci/lock_for_torch.py requirements.lock`` writes the lock to stdout less
torch's own entry and less every entry that the installed torch pins itself to another
version, each named on stderr; it exits 1 when the installed torch is not the lock's version.
The Makefile installs torch first, then this output with ``pip install --require-hashes``
(`make setup`).

Why: requirements.lock is the CPU environment (torch's CPU build, which pins nothing, with
the triton the course was tested on), every entry hashed but torch's (installed by its own
step from PyTorch's CPU index: its files there are not PyPI's). So torch's line goes (pip's
hash-checking mode wants a hash on every line). PyPI's Linux torch is a CUDA build that pins
its own triton (torch 2.13.0: triton==3.7.1), so where pip gets torch from PyPI (no PyTorch
CPU index: `make setup TORCH_INDEX=`), installing the lock as written is a resolution
conflict. There the torch build's pin wins: it is the triton that build was released with,
installed by torch's step already. The lock's entry goes whole, its ``--hash`` lines with it:
they are the digests of the lock's version, and a version rewritten in place would keep
hashes no file of the new version has.

An entry is a requirement line and the indented lines after it (``\\`` continuations with
``--hash=``, uv's ``# via`` notes); other lines pass through.

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


def entries(text: str) -> list[list[str]]:
    """The file's lines grouped: an entry (a requirement line and its indented lines), or
    a line of its own (a comment, a blank)."""
    groups: list[list[str]] = []
    for line in text.splitlines():
        if groups and line[:1] in (" ", "\t") and _LOCK.match(groups[-1][0]):
            groups[-1].append(line)
        else:
            groups.append([line])
    return groups


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python .ci/lock_for_torch.py requirements.lock", file=sys.stderr)
        return 2
    torch = importlib.metadata.version("torch")
    pins = torch_pins()
    out = []
    for group in entries(Path(argv[0]).read_text()):
        match = _LOCK.match(group[0].strip())
        name = _norm(match[1]) if match else None
        if match and name == "torch":
            if match[2] != torch.split("+", 1)[0]:
                print(
                    f"{argv[0]} pins torch=={match[2]}, but torch {torch} is installed: "
                    f"install torch=={match[2]} (the Makefile's TORCH_CPU_PIN) or run "
                    f"`make lock` for torch {torch}",
                    file=sys.stderr,
                )
                return 1
            continue  # installed by its own step; no hash to check it against
        if match and name in pins and pins[name] != match[2]:
            print(
                f"{argv[0]}: {match[1]}=={match[2]} (the CPU environment's) yields to torch "
                f"{torch}'s own pin {match[1]}=={pins[name]}",
                file=sys.stderr,
            )
            continue
        out.extend(group)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
