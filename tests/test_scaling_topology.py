"""The two-level cluster model: hand-computed cases, the node boundary, the worked example."""

from __future__ import annotations

import pytest

from mlinfra_lab.scaling import (
    Cluster,
    Level,
    StepModel,
    TopologyError,
    flat_ring_example,
    h100_cluster,
    ring_allreduce_time,
    worked_example,
)

pytestmark = pytest.mark.scaling

# A toy cluster with round numbers: 4 GPUs per node, 100 GB/s inside, 10 GB/s between nodes.
TOY = Cluster("toy", 4, Level("nvlink", 1e-6, 100e9), Level("net", 10e-6, 10e9), fixed=5e-6)


def test_one_node_ring_is_the_flat_ring_on_the_intra_level():
    cost = TOY.allreduce(1e9, 4, "ring")
    flat = ring_allreduce_time(1e9, 4, 1e-6, 1 / 100e9)
    assert cost.total == pytest.approx(5e-6 + flat)
    assert cost.inter_latency == cost.inter_bandwidth == 0.0
    assert TOY.allreduce(1e9, 1).total == 0.0  # one GPU sends nothing


def test_ring_across_nodes_pays_network_hops_and_network_bandwidth():
    # 16 GPUs on 4 nodes: 2*15 = 30 steps, 2*3 = 6 of them across the network.
    cost = TOY.allreduce(1e9, 16, "ring")
    assert cost.intra_latency == pytest.approx(24 * 1e-6)
    assert cost.inter_latency == pytest.approx(6 * 10e-6)
    assert cost.inter_bandwidth == pytest.approx(2 * 15 / 16 * 1e9 / 10e9)
    assert cost.intra_bandwidth == 0.0  # the network, the slower level, limits the ring


def test_hierarchical_adds_both_levels_bandwidth():
    # reduce-scatter + all-gather inside (2*3/4 of the bytes over NVLink), then the shards'
    # all-reduce between 4 nodes at the node's network busbw: 2*3/4 of the bytes again.
    cost = TOY.allreduce(1e9, 16, "hierarchical")
    assert cost.intra_bandwidth == pytest.approx(1.5 * 1e9 / 100e9)
    assert cost.inter_bandwidth == pytest.approx(1.5 * 1e9 / 10e9)
    assert cost.intra_latency == pytest.approx(6 * 1e-6)
    assert cost.inter_latency == pytest.approx(6 * 10e-6)
    assert cost.fixed == pytest.approx(3 * 5e-6)


def test_tree_latency_is_logarithmic_in_nodes_and_auto_takes_the_faster():
    big = Cluster("big", 8, Level("nvl", 1e-6, 100e9), Level("net", 10e-6, 50e9))
    tree = big.allreduce(8, 8 * 64, "tree")  # 64 nodes: log2 = 6 levels, up and down
    assert tree.inter_latency == pytest.approx(2 * 6 * 10e-6)
    assert tree.intra_latency == pytest.approx(2 * 7 * 1e-6)
    ring = big.allreduce(8, 8 * 64, "ring")
    assert ring.latency > tree.latency  # small message: the tree wins...
    assert big.allreduce(8, 512, "auto") == tree
    assert big.allreduce(10e9, 16, "auto") == big.allreduce(10e9, 16, "ring")  # ...not here


def test_more_nics_shrink_only_the_network_term():
    one, eight = h100_cluster(1), h100_cluster(8)
    assert eight.inter.busbw == pytest.approx(8 * one.inter.busbw)
    assert one.allreduce(1e9, 8).total == pytest.approx(eight.allreduce(1e9, 8).total)
    a, b = one.allreduce(1e9, 64, "hierarchical"), eight.allreduce(1e9, 64, "hierarchical")
    assert a.inter_bandwidth == pytest.approx(8 * b.inter_bandwidth)
    assert a.intra_bandwidth == pytest.approx(b.intra_bandwidth)
    # A DGX H100's eight NICs outrun its NVLink ring: there NVLink limits a ring of 64.
    assert eight.allreduce(1e9, 64, "ring").inter_bandwidth == 0.0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: TOY.allreduce(1e6, 6), "multiple of 4"),
        (lambda: TOY.allreduce(1e6, 0), "positive integer"),
        (lambda: TOY.allreduce(-1, 8), "nbytes"),
        (lambda: TOY.allreduce(1e6, 8, "butterfly"), "algorithm"),
        (lambda: Level("x", 1e-6, 0.0), "busbw"),
        (lambda: h100_cluster(0), "nics_per_node"),
    ],
)
def test_bad_input_is_refused_with_what_to_do(call, message):
    with pytest.raises(TopologyError, match=message):
        call()


def test_step_model_needs_exactly_one_interconnect():
    with pytest.raises(ValueError, match="either alpha and beta"):
        StepModel(compute_s=1, grad_bytes=1)
    with pytest.raises(ValueError, match="either alpha and beta"):
        StepModel(compute_s=1, grad_bytes=1, alpha=1e-6, beta=1e-9, cluster=TOY)
    with pytest.raises(ValueError, match="algorithm"):
        StepModel(compute_s=1, grad_bytes=1, alpha=0, beta=0, algorithm="auto")


def test_worked_example_reproduces_course_numbers_on_the_cluster():
    _, pred = worked_example()
    assert pred["8"].comm_share == pytest.approx(0.10, abs=0.02)
    assert pred["64"].comm_share == pytest.approx(0.60, abs=0.05)
    assert pred["64"].speedup == pytest.approx(2.0, abs=0.25)


def test_at_64_gpus_the_network_dominates_and_latency_does_not():
    model, _ = worked_example()
    inside = model.comm_terms(8)
    assert inside.inter_bandwidth == inside.inter_latency == 0.0  # 8 GPUs: one node
    terms = model.comm_terms(64)
    assert terms.inter_bandwidth > 0.6 * terms.total, terms
    assert terms.latency < 0.25 * terms.total, terms
    # The step's growth from 8 to 64 GPUs is the network's: without it, comm would shrink.
    assert terms.total - terms.inter_bandwidth < inside.total


def test_the_flat_ring_gets_the_same_numbers_from_its_latency_term():
    _, pred = flat_ring_example()
    assert pred["8"].comm_share == pytest.approx(0.10, abs=0.02)
    assert pred["64"].comm_share == pytest.approx(0.60, abs=0.05)
    model, _ = flat_ring_example()
    terms = model.comm_terms(64)
    assert terms.latency > 0.6 * terms.total, terms  # the wrong reason
