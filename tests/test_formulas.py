"""Hand-computed textbook values on a toy fabric with round numbers (see conftest.make_fabric)."""

import numpy as np
import pytest
from conftest import make_fabric

from commodel.comm.collectives import collective_time
from commodel.comm.p2p import BASE_LATENCY_S, hockney, loggp

US = 1e-6
N = 1e8  # bytes
B = 100e9  # bytes/s per GPU inside the node
SIMPLE_BASE = BASE_LATENCY_S["simple"]


def t(op, algo, fab, p=8, nodes=1, n=N, protocol="simple"):
    return float(collective_time(op, algo, protocol, n, p, nodes, fab))


def test_hockney_and_loggp():
    assert hockney(1000, 1e-6, 1e9) == pytest.approx(2e-6)
    # LogGP: L + 2o + (n-1)G for one message; k messages add (k-1) max(g, (n-1)G).
    assert loggp(101, 1e-6, 0.5e-6, 0, 1e-9) == pytest.approx(2.1e-6)
    assert loggp(101, 1e-6, 0.5e-6, 3e-6, 1e-9, messages=3) == pytest.approx(2.1e-6 + 2 * 3e-6)


def test_ring_allreduce_is_thakur(toy):
    # 2(p-1) alpha + 2 n (p-1)/p / B
    assert t("allreduce", "ring", toy) == pytest.approx(SIMPLE_BASE + 14 * US + 2 * N * 7 / 8 / B)


def test_ring_allgather_and_broadcast(toy):
    assert t("allgather", "ring", toy) == pytest.approx(SIMPLE_BASE + 7 * US + N * 7 / 8 / B)
    assert t("broadcast", "ring", toy) == pytest.approx(SIMPLE_BASE + 7 * US + N / B)


def test_recursive_doubling_allreduce(toy):
    gamma = 1 / toy.reduce_Bps
    assert t("allreduce", "recursive-doubling", toy) == pytest.approx(
        SIMPLE_BASE + 3 * (US + N / B + N * gamma)
    )


def test_rabenseifner_allreduce(toy):
    gamma = 1 / toy.reduce_Bps
    expected = SIMPLE_BASE + 2 * 3 * US + 2 * N * 7 / 8 / B + N * 7 / 8 * gamma
    assert t("allreduce", "halving-doubling", toy) == pytest.approx(expected)


def test_recursive_doubling_non_power_of_two_adds_two_steps(toy):
    # p = 6: floor(lg 6) = 2 doubling steps over the 4-rank core, plus MPICH's pre/post steps.
    gamma = 1 / toy.reduce_Bps
    core = 2 * (US + N / B + N * gamma)
    assert t("allreduce", "recursive-doubling", toy, p=6) == pytest.approx(
        SIMPLE_BASE + core + 2 * (US + N / B)
    )


def test_bruck_allgather_and_alltoall(toy):
    assert t("allgather", "bruck", toy) == pytest.approx(SIMPLE_BASE + 3 * US + N * 7 / 8 / B)
    # alltoall: each of lg p steps sends the p/2 blocks whose index has that bit set.
    assert t("alltoall", "bruck", toy) == pytest.approx(SIMPLE_BASE + 3 * (US + N / 2 / B))


def test_pairwise_and_direct_alltoall(toy):
    assert t("alltoall", "pairwise", toy) == pytest.approx(SIMPLE_BASE + 7 * (US + N / 8 / B))
    assert t("alltoall", "direct", toy) == pytest.approx(SIMPLE_BASE + US + 7 * N / 8 / B)


def test_sendrecv_is_hockney(toy):
    assert t("sendrecv", "direct", toy, p=2) == pytest.approx(SIMPLE_BASE + US + N / B)


def test_multi_node_ring_is_bounded_by_the_node_nics():
    # 2 NICs of 25 GB/s per node: a ring's bus bandwidth is the node's NIC bandwidth, 50 GB/s.
    fab = make_fabric(nics_per_node=2)
    expected = SIMPLE_BASE + 28 * US + 2 * 10 * US + 2 * N * 15 / 16 / 50e9
    assert t("allreduce", "ring", fab, p=16, nodes=2) == pytest.approx(expected)


def test_hierarchical_pipelines_its_stages():
    fab = make_fabric(nics_per_node=2)  # node network 50 GB/s is the slow stage
    latency = 2 * 1 * 10 * US + 2 * 7 * US
    bandwidth = max(2 * N * (1 / 2) / 50e9, 2 * N * 7 / 8 / B)
    assert t("allreduce", "hierarchical", fab, p=16, nodes=2) == pytest.approx(
        SIMPLE_BASE + latency + bandwidth
    )


def test_tree_allreduce_two_nodes():
    fab = make_fabric()
    latency = 2 * (7 * US + 1 * 10 * US)
    bandwidth = max(2 * N / B, 2 * N * (1 / 2) / 200e9)
    assert t("allreduce", "tree", fab, p=16, nodes=2) == pytest.approx(SIMPLE_BASE + latency + bandwidth)


def test_nvls_allreduce_moves_n_one_plus_one_over_p():
    fab = make_fabric(nvls_Bps=300e9)
    assert t("allreduce", "nvls", fab) == pytest.approx(SIMPLE_BASE + 25 * US + N * (1 + 1 / 8) / 300e9)


@pytest.mark.parametrize(("op", "factor"), [("allreduce", 1 / 4), ("allgather", 1 / 3)])
def test_ll_protocol_bandwidth_factor(toy, op, factor):
    base = BASE_LATENCY_S["ll"]
    steps = 14 if op == "allreduce" else 7
    traffic = 2 * 7 / 8 if op == "allreduce" else 7 / 8
    assert t(op, "ring", toy, protocol="ll") == pytest.approx(base + steps * US + traffic * N / (B * factor))


def test_one_rank_costs_nothing(toy):
    for algo in ("ring", "tree", "recursive-doubling", "halving-doubling"):
        assert t("allreduce", algo, toy, p=1) == 0.0


def test_unavailable_algorithms_are_infinite(toy):
    assert np.isinf(t("allreduce", "nvls", toy))  # toy has no in-switch reduction
    assert np.isinf(t("allreduce", "hierarchical", toy))  # needs more than one node
