"""Hand-computed values: textbook formulas on a toy fabric, and NCCL's own numbers from its tables."""

import dataclasses

import numpy as np
import pytest
from conftest import make_fabric

from commodel.comm import nccl, nccl_physical
from commodel.comm.calls import run
from commodel.comm.collectives import collective_time
from commodel.comm.fabric import fabric_of
from commodel.comm.graph import nvls_graph, ring_graph
from commodel.comm.p2p import BASE_LATENCY_S, hockney, loggp
from commodel.hardware import cluster

US = 1e-6
N = 1e8  # bytes
B = 100e9  # bytes/s per GPU inside the domain
SIMPLE_BASE = BASE_LATENCY_S["simple"]


def t(op, algo, fab, p=8, nodes=1, n=N, protocol="simple"):
    return float(collective_time(op, algo, protocol, n, p, nodes, fab))


def test_hockney_and_loggp():
    assert hockney(1000, 1e-6, 1e9) == pytest.approx(2e-6)
    # LogGP: L + 2o + (n-1)G for one message; k messages add (k-1) max(g, (n-1)G).
    assert loggp(101, 1e-6, 0.5e-6, 0, 1e-9) == pytest.approx(2.1e-6)
    assert loggp(101, 1e-6, 0.5e-6, 3e-6, 1e-9, messages=3) == pytest.approx(2.1e-6 + 2 * 3e-6)


def test_ring_allreduce_is_nccl_latency_plus_thakur_bandwidth(toy):
    # NCCL: base 8.4 us + 2(p-1) x 3.4 us (NVLink Simple ring step); bytes 2 n (p-1)/p / B.
    assert t("allreduce", "ring", toy) == pytest.approx(SIMPLE_BASE + 14 * 3.4 * US + 2 * N * 7 / 8 / B)


def test_ring_allgather_and_ll_protocol(toy):
    assert t("allgather", "ring", toy) == pytest.approx(SIMPLE_BASE + 7 * 3.4 * US + N * 7 / 8 / B)
    # LL: 8 useful bytes per 16 and the flag stores: 1/4 of the link for reductions, 1/3 for copies,
    # at most NCCL's LL cap (Hopper, one node: 141 GB/s); per-step latency 0.6 us.
    ll = 6.6 * US + 14 * 0.6 * US + 2 * N * 7 / 8 / (B / 4)
    assert t("allreduce", "ring", toy, protocol="ll") == pytest.approx(ll)


def test_tree_traffic_follows_nccls_double_binary_tree():
    # A domain sends n per byte of allreduce across 2 domains, 1.5 n across 3, 2 n from 4 on.
    assert [nccl_physical.tree_traffic(d) for d in (1, 2, 3, 4, 5, 16, 17)] == [0, 1, 1.5, 2, 2, 2, 2]
    # NCCL's ncclGetBtree for 4 ranks: 0 is the root with child 2; 2 has children 1 and 3.
    assert [nccl_physical.btree(4, r) for r in range(4)] == [(-1, -1, 2), (2, -1, -1), (0, 1, 3), (2, -1, -1)]


def test_tree_across_three_domains_beats_the_ring_bound():
    # 3 domains of 4 GPUs, 4 NICs of 25 GB/s each: ring busbw <= 100 GB/s; tree sends 1.5 n per domain,
    # so algbw = 100 / 1.5 GB/s and busbw = 2 (p-1)/p x that = 122 GB/s.
    fab = make_fabric(domain=4, nics_per_domain=4, link_Bps=400e9)  # the NVLink chain is not the bound
    tree = float(
        nccl_physical.bandwidth_time(
            "allreduce", "tree", "simple", np.array(N), np.array(12.0), np.array(3.0), fab
        )
    )
    ring = float(
        nccl_physical.bandwidth_time(
            "allreduce", "ring", "simple", np.array(N), np.array(12.0), np.array(3.0), fab
        )
    )
    assert tree == pytest.approx(1.5 * N / 100e9)
    assert ring == pytest.approx(2 * 11 / 12 * N / 100e9)


def test_nvls_allreduce_moves_n_one_plus_one_over_g():
    fab = make_fabric(nvls_Bps=300e9)
    bytes_s = float(
        nccl_physical.bandwidth_time(
            "allreduce", "nvls", "simple", np.array(N), np.array(8.0), np.array(1.0), fab
        )
    )
    assert bytes_s == pytest.approx(N * (1 + 1 / 8) / 300e9)


def test_nccl_latency_table_values():
    fab = fabric_of(cluster("dgx-h100", 2))
    p, one, two = np.array(8.0), np.array(1.0), np.array(2.0)
    # ring LL on one node: 6.6 + 14 x 0.6 = 15.0 us; tree Simple on two nodes of 8:
    # 8.4 + 2 (7 x 4.0 + 1 x 14.0) = 92.4 us; NVLS: the NVLink NVLS row alone, 25 us.
    assert float(nccl.latency("allreduce", "ring", "ll", p, one, fab)) == pytest.approx(15.0 * US)
    assert float(nccl.latency("allreduce", "tree", "simple", 2 * p, two, fab)) == pytest.approx(92.4 * US)
    assert float(nccl.latency("allreduce", "nvls", "simple", p, one, fab)) == pytest.approx(25.0 * US)


def test_nccl_search_on_dgx_h100():
    # H100: 18 NVLinks x 20.6 GB/s; ring speed 60 -> 6 channels, duplicated to 12 x 30 GB/s (360),
    # 24 run-time channels. NVLS: 8 channels at 50 GB/s intra, raised to 60 inter, 16 run-time channels.
    fab = fabric_of(cluster("dgx-h100"))
    ring = ring_graph(fab, np.array(8.0), np.array(1.0))
    assert (float(ring.channels), float(ring.bw_intra), float(ring.runtime)) == (12.0, 30.0, 24.0)
    nv = nvls_graph(fab, np.array(8.0), np.array(1.0))
    assert (float(nv.channels), float(nv.bw_intra), float(nv.bw_inter), float(nv.runtime)) == (8, 50, 60, 16)


def test_nccl_tuner_bus_bandwidths_on_dgx_h100():
    # NCCL's model: ring Simple busBw 360 GB/s; NVLS min(50 x 0.85 x 7/8 x 2, 60) x 8 = 480 GB/s.
    fab = fabric_of(cluster("dgx-h100"))
    n, p, one = np.array(2.0**34), np.array(8.0), np.array(1.0)
    for algo, bus in (("ring", 360.0), ("nvls", 480.0)):
        time = float(nccl.tuner_time("allreduce", algo, "simple", n, p, one, fab))
        latency = float(nccl.latency("allreduce", algo, "simple", p, one, fab))
        assert 2 * 7 / 8 * float(n) / (time - latency) / 1e9 == pytest.approx(bus)


def test_nccl_tuner_ring_plateau_and_tree_correction_across_two_nodes():
    # Ring Simple allreduce across nodes: latency x 1.4 (Ampere on) once each rank's share per
    # run-time channel reaches 64 B; tree: algBw x the correction of its log2(n / 64) bin.
    fab = fabric_of(cluster("dgx-h100", 2))
    p, N = np.array(16.0), np.array(2.0)
    lat = float(nccl.latency("allreduce", "ring", "simple", p, N, fab))
    ring = nccl.tuner_terms("allreduce", "ring", "simple", p, N, fab)
    threshold = 64 * float(ring_graph(fab, p / N, N).runtime) * 16
    for n, factor in ((threshold / 2, 1.0), (threshold, 1.4)):
        time = float(nccl.tuner_time("allreduce", "ring", "simple", np.array(n), p, N, fab))
        assert time == pytest.approx(factor * lat + n / float(ring.alg_Bps))
    tree = nccl.tuner_terms("allreduce", "tree", "simple", p, N, fab)
    n = 64.0 * 2**10
    time = float(nccl.tuner_time("allreduce", "tree", "simple", np.array(n), p, N, fab))
    correction = nccl.tables.TREE_CORRECTION[nccl.tables.PROTOCOLS.index("simple"), 10]
    assert correction < 1
    assert time == pytest.approx(float(tree.latency_s) + n / (float(tree.alg_Bps) * correction))


def test_auto_is_nccls_own_choice_on_dgx_h100():
    # NCCL picks ring LL for small messages and NVLS from a few MiB on an NVLS-capable H100 node.
    frame = run("allreduce", cluster("dgx-h100"), [1024, 2**26])
    assert list(zip(frame.algo, frame.protocol, strict=True)) == [("ring", "ll"), ("nvls", "simple")]


def test_small_messages_use_fewer_channels():
    # Ring Simple takes one channel per 32 KiB (512 threads x 64 B): 64 KiB -> 2 channels.
    used = nccl_physical.used_channels("ring", "simple", np.array(65536.0), np.array(8.0), np.array(24.0))
    assert np.floor(used) == 2


def test_nvls_chunk_regimes_shrink_with_size():
    # ops = channels x heads = 16 x 8; 128 KiB default, 64 KiB below 64 x ops x 128 KiB (1 GiB), ...
    sizes = np.array([2.0**31, 2.0**29, 2.0**25, 2.0**21])
    chunk = nccl_physical.chunk_bytes(
        "allreduce", "nvls", "simple", sizes, np.array(8.0), np.array(1.0), np.array(16.0)
    )
    assert list(chunk / 1024) == [128, 64, 32, 16]


def test_sendrecv_and_direct_alltoall(toy):
    assert t("sendrecv", "direct", toy, p=2) == pytest.approx(SIMPLE_BASE + 3.4 * US + N / B)
    assert t("alltoall", "direct", toy) == pytest.approx(SIMPLE_BASE + 3.4 * US + 7 * N / 8 / B)


def test_recursive_doubling_and_rabenseifner(toy):
    a = 3.4 * US
    gamma = 1 / toy.reduce_Bps
    assert t("allreduce", "recursive-doubling", toy) == pytest.approx(
        SIMPLE_BASE + 3 * (a + N / B + N * gamma)
    )
    expected = SIMPLE_BASE + 2 * 3 * a + 2 * N * 7 / 8 / B + N * 7 / 8 * gamma
    assert t("allreduce", "halving-doubling", toy) == pytest.approx(expected)


def test_bruck_allgather_and_alltoall(toy):
    a = 3.4 * US
    assert t("allgather", "bruck", toy) == pytest.approx(SIMPLE_BASE + 3 * a + N * 7 / 8 / B)
    assert t("alltoall", "bruck", toy) == pytest.approx(SIMPLE_BASE + 3 * (a + N / 2 / B))


def test_launch_is_max_of_kernel_and_host():
    fab = make_fabric(start_s=3 * US, host_s=24 * US)
    tiny = t("allreduce", "ring", fab, n=8, protocol="ll")
    assert tiny == pytest.approx(24 * US)  # host-bound: 8 launches per call from one process
    assert t("allreduce", "ring", fab) == pytest.approx(t("allreduce", "ring", make_fabric()) + 3 * US)


def test_one_rank_costs_nothing(toy):
    for algo in ("ring", "tree", "recursive-doubling", "halving-doubling"):
        assert t("allreduce", algo, toy, p=1) == 0.0


def test_unavailable_algorithms_are_infinite(toy):
    assert np.isinf(t("allreduce", "nvls", toy))  # toy has no in-switch reduction
    assert np.isinf(t("allreduce", "nvls-tree", toy, p=16, nodes=2))
    assert np.isinf(t("allreduce", "hierarchical", toy))  # needs more than one domain
    assert np.isinf(t("allreduce", "collnet-direct", toy, p=16, nodes=2))  # SHARP off by default


def test_off_rail_networks_pay_two_more_switch_hops_per_inter_node_step():
    fab = fabric_of(cluster("dgx-h100", 2))
    off = dataclasses.replace(fab, off_rail_s=2 * 0.6 * US)
    p, nodes = np.array(16.0), np.array(2.0)
    on_rail = float(nccl.latency("allreduce", "ring", "ll", p, nodes, fab))
    # ring allreduce over 2 nodes: 2 (N - 1) = 2 inter-node steps, each 1.2 us longer.
    assert float(nccl.latency("allreduce", "ring", "ll", p, nodes, off)) == pytest.approx(
        on_rail + 2 * 1.2 * US
    )
