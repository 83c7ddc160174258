"""NCCL's point-to-point path (sendrecv, alltoall): its protocols by size, and across domains its
proxy threads, whose latency a send pays on both sides and whose serial step each peer costs."""

import dataclasses

import numpy as np
import pytest
from conftest import run_cli

from commodel.comm.calls import run
from commodel.comm.collectives import P2P_LL_THRESHOLD, candidates, library_algorithms, pair_time
from commodel.comm.fabric import fabric_of
from commodel.comm.initiation import nccl_net_p2p, path_of
from commodel.hardware import cluster
from commodel.report.collective_table import nccl_tests_table


def test_nccl_runs_point_to_point_in_ll_up_to_its_threshold_per_peer_and_simple_above_never_ll128():
    sizes = [8, P2P_LL_THRESHOLD, P2P_LL_THRESHOLD + 8, 2**20, 2**30]
    sendrecv = run("sendrecv", cluster("dgx-h100", 2), sizes)
    assert list(sendrecv.protocol) == ["ll", "ll", "simple", "simple", "simple"]
    # alltoall: the threshold is per peer, a sixteenth of the buffer on 16 GPUs
    alltoall = run("alltoall", cluster("dgx-h100", 2), [16 * P2P_LL_THRESHOLD, 16 * (P2P_LL_THRESHOLD + 8)])
    assert list(alltoall.protocol) == ["ll", "simple"]
    fab = fabric_of(cluster("dgx-h100", 2))
    for op in ("sendrecv", "alltoall"):
        assert {p for _, p in candidates(op, fab, library_algorithms(op, "nccl"))} == {"ll", "simple"}


def test_where_ll_would_win_above_the_threshold_the_table_names_nccls_p2p_knob_not_a_tuner_plugin():
    """LL's lower latency wins just above 16 KiB inside a node; NCCL still runs Simple there, and the
    note names the setting that moves it (a tuner plugin never sees point-to-point operations)."""
    table = run("sendrecv", cluster("dgx-h100", 1), [2 * P2P_LL_THRESHOLD])
    assert table.protocol[0] == "simple"
    assert table.fastest[0] == "direct/ll" and table.fastest_time_s[0] < table.time_s[0]
    note = nccl_tests_table(table, "dgx-h100").splitlines()[-1]
    assert "NCCL_P2P_LL_THRESHOLD" in note and "tuner plugin" not in note


def test_a_send_across_nodes_waits_on_both_ranks_proxies():
    path = path_of(cluster("dgx-h100", 2))
    latency, step = nccl_net_p2p(path)
    slower = dataclasses.replace(path, proxy_poll=path.proxy_poll + 1e-6)
    latency_slow, step_slow = nccl_net_p2p(slower)
    assert latency_slow - latency == pytest.approx(
        2e-6
    )  # the sender's proxy picks it up, the receiver's sees it land
    assert step_slow - step == pytest.approx(1e-6)


@pytest.mark.parametrize("field", ["p2p_net_latency_s", "net_latency_s"])
def test_a_small_send_across_nodes_moves_with_the_proxy_and_plugin_latency_and_inside_a_node_does_not(field):
    """The net plugin's latency (what `calibrate nccl-tests` fits on small multi-domain calls) adds to
    the proxy path's as it adds to every other step across domains."""
    fab = fabric_of(cluster("dgx-h100", 2))
    later = dataclasses.replace(fab, **{field: getattr(fab, field) + 5e-6})
    across = [pair_time("sendrecv", "direct", "ll", 8, 16, 2, f)[0] for f in (fab, later)]
    inside = [pair_time("sendrecv", "direct", "ll", 8, 8, 1, f)[0] for f in (fab, later)]
    assert float(across[1] - across[0]) == pytest.approx(5e-6)
    assert float(inside[1]) == float(inside[0])
    # the proxy path is slower than a hop over NVLink
    assert float(across[0]) > float(inside[0]) + 5e-6


@pytest.mark.parametrize("nodes", [2, 16, 128, 100_000])
def test_an_all_to_all_across_domains_costs_every_rank_a_proxy_step_per_peer_each_way(nodes):
    c = cluster("dgx-h100", nodes)
    fab = fabric_of(c)
    ranks = 8 * nodes
    table = run("alltoall", c, [2**20])
    assert table.time_s[0] >= 2 * (ranks - 8) * fab.proxy_op_s
    if nodes == 100_000:  # 800,000 peers of 1.3 bytes each: seconds, not microseconds
        assert table.time_s[0] > 1.0


def test_an_all_to_all_grows_with_its_peers_where_the_bytes_do_not():
    times = [float(run("alltoall", cluster("dgx-h100", n), [2**20]).time_s[0]) for n in (2, 16, 128)]
    assert times[0] < times[1] < times[2]
    assert times[2] / times[1] > 5  # 1,016 peers across nodes against 120: the proxies bind, not the NICs


def test_inside_one_nvlink_domain_an_all_to_all_pays_no_proxy():
    c = cluster("gb200-nvl72", 18)  # one rack: 72 GPUs that reach each other over NVLink
    fab = fabric_of(c)
    table = run("alltoall", c, [2**20])
    assert table.time_s[0] < 2 * 71 * fab.proxy_op_s
    assert table.time_s[0] * 4 < run("alltoall", cluster("gb200-nvl72", 36), [2**20]).time_s[0]


def test_forcing_ll128_on_a_point_to_point_op_is_refused_naming_the_op(capsys, monkeypatch):
    code, out = run_cli(
        ["collective", "sendrecv", "--nodes", "2", "--protocol", "ll128"], capsys, monkeypatch
    )
    assert code == 2
    assert "not available for sendrecv" in out.err + out.out
    assert "Traceback" not in out.err + out.out
    assert np.isfinite(run("sendrecv", cluster("dgx-h100", 2), [2**30], protocol="ll").time_s[0])
