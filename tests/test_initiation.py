"""GPU-centric communication: the schemes' latencies follow their parts, the workloads follow their
driving inputs, and the studies' orderings hold."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from commodel.comm.initiation import SCHEMES, available, coordination_latency, handoff, path_of, put_latency
from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.workloads.hpc.stencil import Stencil, iteration_time, strong_efficiency, weak_efficiency
from commodel.workloads.model.catalog import model
from commodel.workloads.moe.dispatch import dispatch_combine

IB, SLINGSHOT = (path_of(cluster(s, 2)) for s in ("dgx-h100", "frontier-node"))


def test_every_gpu_driven_scheme_beats_the_host_path_on_small_messages_and_coordination():
    for path in (IB, SLINGSHOT):
        host = put_latency("host-driven", path)
        for scheme in ("kernel-triggered", "kernel-initiated"):
            if available(scheme, path):
                assert put_latency(scheme, path) < host
                assert coordination_latency(scheme, path) < coordination_latency("host-driven", path)
        # large messages: the same bytes on the same NIC, so the fixed gap fades
        big = 64 * 2**20
        assert (
            put_latency("host-driven", path, big)
            / min(put_latency(s, path, big) for s in SCHEMES if available(s, path))
            < 1.05
        )


def test_a_costlier_doorbell_narrows_gdakis_lead_over_the_proxy():
    def lead(path):
        return float(put_latency("proxy", path) - put_latency("kernel-initiated", path))

    slow = dataclasses.replace(IB, doorbell=IB.doorbell + 1e-6)
    assert 0 < lead(slow) < lead(IB)


def test_a_scheme_the_nic_lacks_is_an_error():
    with pytest.raises(CommodelError, match="GPU-initiated work requests"):
        put_latency("kernel-initiated", SLINGSHOT)
    with pytest.raises(CommodelError, match="triggered operations"):
        put_latency("kernel-triggered", dataclasses.replace(IB, triggered_ops=False))


def test_gicc_hides_the_exchange_behind_the_interior_and_a_deeper_halo_shrinks_its_gain():
    """Kernel-triggered, the exchange runs beside the interior sweep: never a slower iteration than
    host-driven MPI's; once the interior outlasts the exchange only the poll and the sweep's slowdown
    beside it stay exposed (a fifth of host-driven MPI's exposure at 512^3); a deeper halo (more bytes
    per face) leaves less to gain at the same subdomain."""
    c = cluster("frontier-node", 8)

    def times(n, halo=1):
        kernel = Stencil(halo=halo)
        return {s: iteration_time(s, c, n, 64, kernel) for s in ("kernel-triggered", "host-driven")}

    for n in (64, 128, 256, 512):
        for halo in (1, 4):
            t = times(n, halo)
            assert t["kernel-triggered"]["time_s"] < t["host-driven"]["time_s"]
    at_512 = times(512)
    assert at_512["kernel-triggered"]["comm_s"] < 0.2 * at_512["host-driven"]["comm_s"]

    def gain(n, halo):
        kernel = Stencil(halo=halo)
        return weak_efficiency("kernel-triggered", c, n, 64, kernel) - weak_efficiency(
            "host-driven", c, n, 64, kernel
        )

    assert gain(128, 1) > gain(128, 4) and gain(256, 1) > gain(256, 4)
    with pytest.raises(CommodelError, match="does not fit"):
        iteration_time("host-driven", c, 8, 64, Stencil(halo=4))


def test_moe_dispatch_binds_on_nvlink_in_a_node_and_the_network_beyond_and_proxies_issue_slowly():
    net = model("deepseek-v3")
    one = dispatch_combine("high-throughput", "kernel-initiated", net, cluster("dgx-h100", 1), 8, 4096)
    many = dispatch_combine("high-throughput", "kernel-initiated", net, cluster("dgx-h100", 8), 64, 4096)
    assert one["binding"] == "NVLink" and many["binding"] == "network"
    gpu = dispatch_combine("low-latency", "kernel-initiated", net, cluster("dgx-h100", 8), 64, 128)
    proxy = dispatch_combine("low-latency", "proxy", net, cluster("dgx-h100", 8), 64, 128)
    assert proxy["time_s"] > 2 * gpu["time_s"] and proxy["binding"] == "message issue"


def test_a_halo_deeper_than_half_the_subdomain_is_its_rows_problem_and_the_sweep_goes_on():
    """As a training layout that cannot run is its row's problem, not the table's: a sweep over
    subdomain sizes and halo depths meets impossible pairs and prices the rest."""
    from commodel.pricing.evaluator import evaluator

    frame = pd.DataFrame([{"system": "frontier-node", "scheme": "host-driven", "n": n, "gpus": 8, "halo": 4}
                          for n in (8, 64)])  # fmt: skip
    table = evaluator("halo")(frame)
    assert table.valid.tolist() == [False, True] and "does not fit" in table.problem[0]
    assert np.isnan(table.iteration_us[0]) and np.isfinite(table.iteration_us[1])


def test_inside_a_node_gpu_threads_store_over_nvlink_faster_than_any_network_put():
    node = path_of(cluster("dgx-h100"), "node")
    assert put_latency("kernel-initiated", node) < put_latency("host-driven", node)
    assert put_latency("kernel-initiated", node) < min(
        put_latency(s, IB) for s in SCHEMES if available(s, IB)
    )
    assert node.bandwidth > IB.bandwidth
    with pytest.raises(CommodelError, match="scope"):
        path_of(cluster("dgx-h100"), "rack")


def test_strong_scaling_loses_efficiency_as_subdomains_shrink_and_gicc_loses_less():
    c = cluster("frontier-node", 8)
    host = [strong_efficiency("host-driven", c, 512, g) for g in (8, 64)]
    gicc = [strong_efficiency("kernel-triggered", c, 512, g) for g in (8, 64)]
    assert host[0] > host[1] and gicc[0] > gicc[1]
    assert gicc[1] > host[1]


def test_gicc_removes_the_host_so_its_coordination_ignores_host_costs():
    slow_host = dataclasses.replace(
        SLINGSHOT, host_sync=SLINGSHOT.host_sync * 3, progress=SLINGSHOT.progress * 3
    )
    assert handoff("host-driven", slow_host) > handoff("host-driven", SLINGSHOT)
    assert handoff("kernel-triggered", slow_host) == handoff("kernel-triggered", SLINGSHOT)
    assert (
        handoff("kernel-triggered", SLINGSHOT)
        < handoff("stream-triggered", SLINGSHOT)
        < handoff("host-driven", SLINGSHOT)
    )


def test_nvshmems_put_falls_behind_gicc_by_its_proxy_and_its_shared_channel():
    maple = path_of(cluster("gh200-ib", 2))
    shared = put_latency("proxy", maple, 8, shared_queue=True) / put_latency("kernel-triggered", maple, 8)
    private = put_latency("proxy", maple, 8) / put_latency("kernel-triggered", maple, 8)
    assert shared > private > 1


def test_gicc_study_gains_follow_how_much_interior_hides_the_exchange():
    """Jacobi's interior outlasts its exchange: GICC's gain is the host cost, shrinking as the subdomain
    grows. Minimod on 64 GCDs exchanges more than its interior hides: a larger grid hides more and the
    gain grows. MPI spends more time communicating everywhere."""
    from commodel.studies.base import study_spec
    from commodel.studies.gicc import scaling_table

    table = scaling_table(study_spec("gicc").parameters)
    gain = table["kernel-triggered_efficiency_pct"] - table["host-driven_efficiency_pct"]
    jacobi, minimod = table.benchmark == "jacobi weak", table.benchmark == "minimod strong"
    assert (gain[jacobi].diff().dropna() < 0).all() and (gain[minimod].diff().dropna() > 0).all()
    assert (gain > 0).all() and (table.mpi_extra_comm_pct > 0).all()


def _with_host_costs(c, **costs):
    """Cluster ``c`` whose system states these host costs (seconds)."""
    initiation = c.system.initiation
    updated = initiation.model_copy(
        update={k: getattr(initiation, k).model_copy(update={"value": v}) for k, v in costs.items()}
    )
    return dataclasses.replace(c, system=c.system.model_copy(update={"initiation": updated}))


def test_gin_and_nvshmem_part_only_where_reserving_a_queue_slot_stops_being_small():
    """GIN GDAKI and NVSHMEM IBGDA differ by NVSHMEM's slot reservation per put: a microsecond
    against DeepEP calls bound by their bytes; a reservation ten times dearer would part them."""
    net = model("deepseek-v3")

    def gap(c):
        gin = dispatch_combine("low-latency", "kernel-initiated", net, c, 16, 128)["time_s"]
        nvshmem = dispatch_combine("low-latency", "kernel-initiated", net, c, 16, 128, shared_queue=True)[
            "time_s"
        ]
        return nvshmem / gin - 1

    c = cluster("dgx-h100", 2)
    assert 0 < gap(c) < 0.05 < gap(_with_host_costs(c, queue_lock=20e-6))


def test_the_proxy_round_trip_follows_its_host_thread():
    c = cluster("dgx-h100", 2)
    slow = _with_host_costs(c, proxy_poll=5e-6)
    extra = put_latency("proxy", path_of(c), 8) - put_latency("kernel-initiated", path_of(c), 8)
    assert (
        put_latency("proxy", path_of(slow), 8) - put_latency("kernel-initiated", path_of(slow), 8) > extra > 0
    )


def test_the_host_path_catches_up_later_when_its_fixed_cost_grows():
    """Where a GPU-driven put stops beating the host path: the host's fixed cost over the bytes it
    takes to hide it, so a dearer host call moves the crossover to larger messages."""
    from commodel.comm.initiation import host_competitive_above

    c = cluster("dgx-h100", 2)
    dear = _with_host_costs(c, host_call=4e-6)
    for scheme in ("kernel-triggered", "kernel-initiated"):
        assert host_competitive_above(scheme, path_of(dear)) > host_competitive_above(scheme, path_of(c)) > 0


def test_a_dispatch_job_prices_the_same_from_the_cli_and_a_one_row_sweep():
    """``commodel comm dispatch`` and the ``moe_dispatch`` evaluator read one declaration."""
    from typer.testing import CliRunner

    from commodel.cli import app
    from commodel.pricing.evaluator import evaluator

    given = {"system": "hgx-h800", "ep": 32, "mode": "high-throughput", "tokens": 4096}
    result = CliRunner().invoke(app, ["comm", "dispatch", "--system", "hgx-h800", "--ep", "32",
                                      "--mode", "high-throughput", "--tokens", "4096", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    cli = {r["call"]: r["time_us"] for r in json.loads(result.output)}
    row = evaluator("moe_dispatch")(pd.DataFrame([given])).iloc[0]
    assert (row.dispatch_us, row.combine_us) == pytest.approx((cli["dispatch"], cli["combine"]), rel=1e-12)


@pytest.mark.parametrize("mode", ["low-latency", "high-throughput"])
def test_more_tokens_never_dispatch_faster_and_shared_queues_never_help(mode):
    from commodel.pricing.dispatch import DispatchJob, price_dispatch

    counts = 2.0 ** np.arange(0, 14)
    for ep in (8, 16, 64):
        times = {}
        for shared in (False, True):
            frame = price_dispatch(DispatchJob(ep=ep, mode=mode, shared_queues=shared), counts)
            times[shared] = frame.pivot(index="tokens", columns="call", values="time_us")
            assert (times[shared].diff().dropna() >= 0).all().all(), (ep, shared)
        assert (times[True] >= times[False] - 1e-9).all().all()


def test_a_proxy_thread_issuing_every_low_latency_write_binds_where_gpu_warps_do_not():
    from commodel.pricing.dispatch import DispatchJob, price_dispatch

    gpu = price_dispatch(DispatchJob(ep=64, tokens=512)).set_index("call")
    proxy = price_dispatch(DispatchJob(ep=64, tokens=512, scheme="proxy")).set_index("call")
    assert (proxy.binding == "message issue").all() and (gpu.binding != "message issue").all()
    assert (proxy.time_us > 2 * gpu.time_us).all()


def test_deepeps_normal_kernels_reach_eight_nvlink_peers_even_in_a_rack_scale_domain():
    """In a GB200 NVL72 rack DeepEP's high-throughput kernels forward over NVLink to at most 8 GPUs
    and send the rest over RDMA, as training's flex dispatcher prices them; its low-latency kernels
    reach the whole domain."""
    from commodel.pricing.dispatch import DispatchJob, price_dispatch
    from commodel.workloads.moe.dispatch import DEEPEP_NVL_PEERS, exchange

    rack = cluster("gb200-nvl72", 16)  # 64 GPUs, an expert-parallel size that divides 256 experts
    net = model("deepseek-v3")
    ht = exchange("high-throughput", "kernel-initiated", net, rack, 64, 4096, 2.0)
    ll = exchange("low-latency", "kernel-initiated", net, rack, 64, 128, 2.0)
    assert ht["group_gpus"] == DEEPEP_NVL_PEERS and ht["binding"] == "network" and ll["group_gpus"] == 64
    frame = price_dispatch(DispatchJob(system="gb200-nvl72", ep=64, mode="high-throughput", tokens=4096))
    assert (frame.binding == "network").all() and (frame.network_us > 0).all()
