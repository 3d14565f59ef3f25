"""The all-reduce on a two-level cluster: fast links inside a node, a slower network between.

Contract: a `Cluster` has `gpus_per_node` GPUs per node and two `Level`s, the NVLink/NVSwitch
domain inside a node and the network between nodes, each with a per-step latency `alpha`
(seconds) and an all-reduce bus bandwidth `busbw` (bytes/s, as nccl-tests reports it).
`Cluster.allreduce(nbytes, p, algorithm)` returns an `AllReduceCost`: the seconds an
all-reduce of `nbytes` on `p` GPUs takes, split into a fixed cost and a latency and a
bandwidth term per level. `h100_cluster(nics_per_node)` is a cluster of H100 nodes whose
parameters come from published sources (`H100_SOURCES`); a DGX H100 has eight NICs.

Design decisions:
- Bus bandwidth, not link speed: nccl-tests' busbw is ``algbw * 2(n-1)/n``, what a ring
  all-reduce sustains per GPU whatever n is, so a level's busbw plugs straight into
  ``2(n-1)/n * nbytes / busbw``: the number nccl-tests prints is the parameter, protocol
  overhead included.
- The network level's bus bandwidth is the node's, not one GPU's: NCCL spreads a ring's
  channels (or a tree's) over all the NICs of a node, so an all-reduce between nodes runs at
  the NICs' aggregate, each close to its line rate. One NIC per GPU, as a DGX H100 has, is
  why the node boundary costs such a node little; one or two NICs per node make it a cliff.
- Latency as in NCCL's own tuning model: a fixed cost per collective plus one hop latency
  per step, NVLink hops inside a node and network hops between nodes. A ring of p GPUs on N
  nodes makes 2(p-1) steps, 2(N-1) of them across the network; NCCL's tree makes a chain
  inside each node and a binary tree between nodes: 2((g-1) + ceil(log2 N)) steps, charged
  here at the ring's per-hop latencies (NCCL's table gives the tree a per-chunk latency
  instead).
- Three algorithms: "ring" (one ring through every GPU: its bandwidth is the slower level's),
  "tree" (NCCL's: logarithmic latency between nodes, ``2 nbytes / busbw``), "hierarchical"
  (reduce-scatter inside the node, all-reduce of each GPU's 1/g shard between nodes, then
  all-gather inside: both levels' bandwidth terms, one after the other). "auto" takes the
  faster of ring and tree for each message, as NCCL's tuner picks by its own cost model.

Caveats: no protocol choice (LL, LL128, Simple) and no in-network reduction (NVLink SHARP,
SHARP on InfiniBand), which raise bus bandwidth above these; the tree's bandwidth is not
capped as NCCL caps it; congestion from other jobs is absent. The model explains where time
goes; a measured nccl-tests sweep on your cluster replaces its parameters.

References (the numbers themselves, with their sources, are in `H100_SOURCES`):
nccl-tests' PERFORMANCE.md (busbw); NCCL's src/graph/tuning.cc (hop latencies, the ring and
tree latency formulas); NCCL maintainers' answers in the nccl-tests issue tracker on H100
NVLink bus bandwidth and on bus bandwidth between nodes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from mlinfra_lab.errors import MlinfraError

__all__ = [
    "ALGORITHMS",
    "H100_SOURCES",
    "AllReduceCost",
    "Cluster",
    "Level",
    "TopologyError",
    "h100_cluster",
]

ALGORITHMS = ("ring", "tree", "hierarchical", "auto")


class TopologyError(MlinfraError, ValueError):
    """A cluster or a world size the two-level model cannot describe."""


@dataclass(frozen=True)
class Level:
    """One level of the interconnect: a per-step latency and an all-reduce bus bandwidth."""

    name: str  # "NVLink/NVSwitch", "4 x 400 Gb/s NIC", ...
    alpha: float  # seconds per step of a collective on this level (one hop)
    busbw: float  # bytes/s: nccl-tests' busbw of a large all-reduce that this level limits

    def __post_init__(self) -> None:
        if self.alpha < 0 or self.busbw <= 0:
            raise TopologyError(
                f"level {self.name!r}: alpha must be >= 0 and busbw > 0 "
                f"(got alpha={self.alpha}, busbw={self.busbw})"
            )


@dataclass(frozen=True)
class AllReduceCost:
    """Seconds of one all-reduce, term by term (add them up with `total`)."""

    fixed: float  # per-collective cost (launch, synchronisation)
    intra_latency: float  # hops inside a node
    inter_latency: float  # hops across the network
    intra_bandwidth: float  # bytes over NVLink
    inter_bandwidth: float  # bytes over the network
    algorithm: str  # the algorithm these terms are for ("auto" resolved)

    @property
    def latency(self) -> float:
        return self.fixed + self.intra_latency + self.inter_latency

    @property
    def total(self) -> float:
        return self.latency + self.intra_bandwidth + self.inter_bandwidth

    def __add__(self, other: AllReduceCost) -> AllReduceCost:
        return AllReduceCost(
            fixed=self.fixed + other.fixed,
            intra_latency=self.intra_latency + other.intra_latency,
            inter_latency=self.inter_latency + other.inter_latency,
            intra_bandwidth=self.intra_bandwidth + other.intra_bandwidth,
            inter_bandwidth=self.inter_bandwidth + other.inter_bandwidth,
            algorithm=self.algorithm if self.algorithm == other.algorithm else "mixed",
        )

    def scaled(self, k: float) -> AllReduceCost:
        """The cost of `k` such all-reduces (`k` buckets of one size)."""
        return AllReduceCost(
            fixed=self.fixed * k,
            intra_latency=self.intra_latency * k,
            inter_latency=self.inter_latency * k,
            intra_bandwidth=self.intra_bandwidth * k,
            inter_bandwidth=self.inter_bandwidth * k,
            algorithm=self.algorithm,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"latency": self.latency, "total": self.total}


@dataclass(frozen=True)
class Cluster:
    """Nodes of `gpus_per_node` GPUs: `intra` links them inside a node, `inter` joins nodes."""

    name: str
    gpus_per_node: int
    intra: Level  # NVLink/NVSwitch inside a node
    inter: Level  # the network; busbw is the node's NICs together
    fixed: float = 0.0  # seconds per collective whatever its size (NCCL's base latency)

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or int(self.gpus_per_node) != self.gpus_per_node:
            raise TopologyError(
                f"gpus_per_node must be a positive integer, got {self.gpus_per_node!r}"
            )
        if self.fixed < 0:
            raise TopologyError(f"the fixed cost per collective must be >= 0, got {self.fixed}")

    def nodes(self, p: int) -> int:
        """Nodes that `p` GPUs fill: one up to a node's worth, then whole nodes only."""
        if p < 1 or int(p) != p:
            raise TopologyError(f"world size p must be a positive integer, got {p!r}")
        g = self.gpus_per_node
        if p > g and p % g:
            raise TopologyError(
                f"{p} GPUs do not fill whole nodes of {g}: use a multiple of {g} "
                "(the model assumes every node contributes all its GPUs)"
            )
        return max(1, p // g)

    def allreduce(self, nbytes: float, p: int, algorithm: str = "auto") -> AllReduceCost:
        """The cost of an all-reduce of `nbytes` on `p` GPUs, term by term."""
        if nbytes < 0:
            raise TopologyError(f"nbytes must be >= 0, got {nbytes}")
        if algorithm not in ALGORITHMS:
            raise TopologyError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        n_nodes = self.nodes(p)
        if p == 1:
            return AllReduceCost(0.0, 0.0, 0.0, 0.0, 0.0, algorithm)
        if algorithm == "auto":
            ring, tree = self._ring(nbytes, p, n_nodes), self._tree(nbytes, p, n_nodes)
            return ring if ring.total <= tree.total else tree
        if algorithm == "hierarchical" and n_nodes > 1:
            return self._hierarchical(nbytes, n_nodes)
        if algorithm == "tree":
            return self._tree(nbytes, p, n_nodes)
        return self._ring(nbytes, p, n_nodes)  # one node: hierarchical is a ring

    def _ring(self, nbytes: float, p: int, n_nodes: int) -> AllReduceCost:
        inter_steps = 2 * (n_nodes - 1)
        intra_steps = 2 * (p - 1) - inter_steps
        moved = 2 * (p - 1) / p * nbytes
        if n_nodes == 1 or self.intra.busbw <= self.inter.busbw:  # NVLink limits the ring
            intra_bw, inter_bw = moved / self.intra.busbw, 0.0
        else:  # every channel of the ring crosses the network once per node
            intra_bw, inter_bw = 0.0, moved / self.inter.busbw
        return AllReduceCost(
            self.fixed,
            intra_steps * self.intra.alpha,
            inter_steps * self.inter.alpha,
            intra_bw,
            inter_bw,
            "ring",
        )

    def _tree(self, nbytes: float, p: int, n_nodes: int) -> AllReduceCost:
        chain = p // n_nodes - 1  # hops of the chain inside a node
        depth = math.ceil(math.log2(n_nodes)) if n_nodes > 1 else 0
        if n_nodes == 1 or self.intra.busbw <= self.inter.busbw:
            intra_bw, inter_bw = 2 * nbytes / self.intra.busbw, 0.0
        else:
            intra_bw, inter_bw = 0.0, 2 * nbytes / self.inter.busbw
        return AllReduceCost(
            self.fixed,
            2 * chain * self.intra.alpha,
            2 * depth * self.inter.alpha,
            intra_bw,
            inter_bw,
            "tree",
        )

    def _hierarchical(self, nbytes: float, n_nodes: int) -> AllReduceCost:
        g = self.gpus_per_node
        # reduce-scatter + all-gather inside the node: (g-1)/g * nbytes each, over NVLink.
        intra_bw = 2 * (g - 1) / g * nbytes / self.intra.busbw
        # each GPU all-reduces its 1/g shard across nodes; the node's g GPUs share its NICs:
        # 2(N-1)/N * (nbytes/g) / (busbw/g) = 2(N-1)/N * nbytes / busbw.
        inter_bw = 2 * (n_nodes - 1) / n_nodes * nbytes / self.inter.busbw
        return AllReduceCost(
            3 * self.fixed,  # three collectives
            2 * (g - 1) * self.intra.alpha,
            2 * (n_nodes - 1) * self.inter.alpha,
            intra_bw,
            inter_bw,
            "hierarchical",
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# Published numbers the H100 cluster is built from (bibliography keys in book/references.bib).
H100_SOURCES: dict[str, str] = {
    "nvlink_busbw": "370 GB/s: NCCL's ring all-reduce busbw on 8 H100 over NVLink/NVSwitch "
    "(450 GB/s line rate less about 20% protocol overhead), NCCL maintainer in nccl-tests "
    "issue #212 (nccltestsissue212)",
    "nic_busbw": "48.8 GB/s per 400 Gb/s NIC: 97.6% of the 50 GB/s line rate, the efficiency "
    "of NCCL maintainers' 12.2 GB/s on one 100 Gb/s NIC in nccl-tests issue #29, where "
    "busbw between nodes is the node's NICs together (nccltestsissue29)",
    "alpha": "3.4 us per NVLink hop, 9.6 us per network hop, 8.4 us per collective: the ring "
    "Simple-protocol latencies of NCCL's tuning model, src/graph/tuning.cc (nccltuning); "
    "right for buckets of megabytes, pessimistic for small messages, which NCCL sends with its "
    "low-latency protocols (LL, LL128) at a fraction of these per-hop costs",
    "nics": "a DGX H100 has eight 400 Gb/s ConnectX-7 NICs for its compute fabric, one per "
    "GPU (dgxbasepod)",
}

_NVLINK_BUSBW = 370e9
_NIC_BUSBW = 400e9 / 8 * 12.2 / 12.5  # a 400 Gb/s NIC at the efficiency nccl-tests #29 shows
_NVLINK_ALPHA, _NET_ALPHA, _FIXED = 3.4e-6, 9.6e-6, 8.4e-6


def h100_cluster(nics_per_node: int = 8, gpus_per_node: int = 8) -> Cluster:
    """H100 nodes (NVLink/NVSwitch inside) with `nics_per_node` 400 Gb/s NICs each.

    Eight NICs is a DGX H100; fewer is a cluster whose network is thinner than its nodes.
    Every parameter is cited in `H100_SOURCES`.
    """
    if nics_per_node < 1 or int(nics_per_node) != nics_per_node:
        raise TopologyError(f"nics_per_node must be a positive integer, got {nics_per_node!r}")
    return Cluster(
        name=f"H100 nodes, {nics_per_node} x 400 Gb/s NIC" + ("s" if nics_per_node > 1 else ""),
        gpus_per_node=gpus_per_node,
        intra=Level("NVLink/NVSwitch", _NVLINK_ALPHA, _NVLINK_BUSBW),
        inter=Level(f"{nics_per_node} x 400 Gb/s NIC", _NET_ALPHA, nics_per_node * _NIC_BUSBW),
        fixed=_FIXED,
    )
