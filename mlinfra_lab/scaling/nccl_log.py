"""Read an ``NCCL_DEBUG=INFO`` log and say which transport NCCL chose between ranks.

Contract: `parse_nccl_log(text)` returns an `NcclTransport`: how many channel connections
went over each transport (P2P, SHM, NET/IB, NET/Socket, ...), the network plugin NCCL
reported, the ranks and nodes of the communicator, and whether a slow fallback was taken.

Design decisions:
- Only lines NCCL has printed for years are used: ``Channel XX/Y : a[b] -> c[d] [send|receive] via
  TRANSPORT/...`` for each connection, ``Using network NAME`` and ``comm ... nRanks N nNodes
  M``. Anything else is ignored, so a log interleaved with training output still parses.
- "Slow" means traffic that should ride NVLink or RDMA went elsewhere: any connection over
  ``NET/Socket`` (TCP), or over ``SHM`` (host memory) on a node whose peers could use P2P.

Caveats: NCCL's log wording changes between versions; a log with no channel lines (one rank,
or NCCL_DEBUG below INFO) yields no transports and a verdict that says so.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["NcclTransport", "parse_nccl_log"]

_CHANNEL = re.compile(r"Channel \d+/\d+ : \d+\[[^\]]*\] -> \d+\[[^\]]*\](?: \[\w+\])? via (\S+)")
_NETWORK = re.compile(r"Using network (\S+)")
_COMM = re.compile(r"nranks (\d+)(?: nNodes (\d+))?", re.IGNORECASE)
_VERSION = re.compile(r"NCCL version (\S+)")


@dataclass(frozen=True)
class NcclTransport:
    """What an NCCL log says about the transports in use."""

    transports: dict[str, int] = field(default_factory=dict)  # e.g. {"P2P": 24, "NET/IB": 8}
    network: str | None = None  # "IB", "Socket", a plugin name, or None
    nranks: int | None = None
    nnodes: int | None = None
    version: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The parsed fields plus `slow` and `verdict`, as the CLI and result files store them."""
        return {**asdict(self), "slow": self.slow, "verdict": self.verdict}

    @property
    def slow(self) -> bool:
        """True when some connection fell back to TCP sockets or host shared memory."""
        return any(t in ("NET/Socket", "SHM") for t in self.transports)

    @property
    def verdict(self) -> str:
        if not self.transports:
            if self.nranks == 1:
                return "one rank: NCCL opened no connections between ranks (no transport used)"
            return "no channel lines found: run with NCCL_DEBUG=INFO and more than one rank"
        used = ", ".join(f"{t} x{n}" for t, n in sorted(self.transports.items()))
        if "NET/Socket" in self.transports:
            return f"SLOW: TCP sockets between ranks ({used}); expected NET/IB (RDMA) or P2P"
        if "SHM" in self.transports:
            return f"SLOW: host shared memory instead of P2P/NVLink ({used})"
        return f"fast transports only ({used})"


def _family(via: str) -> str:
    parts = via.split("/")
    return "/".join(parts[:2]) if parts[0] == "NET" and len(parts) > 1 else parts[0]


def parse_nccl_log(text: str) -> NcclTransport:
    """Parse the text of an ``NCCL_DEBUG=INFO`` log (only lines containing ``NCCL``)."""
    counts: Counter[str] = Counter()
    network = version = None
    nranks = nnodes = None
    for line in text.splitlines():
        if "NCCL" not in line:
            continue
        if m := _CHANNEL.search(line):
            counts[_family(m.group(1))] += 1
        elif m := _NETWORK.search(line):
            network = m.group(1)
        elif m := _VERSION.search(line):
            version = version or m.group(1)
        if m := _COMM.search(line):
            nranks = int(m.group(1))
            nnodes = int(m.group(2)) if m.group(2) else nnodes
    return NcclTransport(dict(counts), network, nranks, nnodes, version)
