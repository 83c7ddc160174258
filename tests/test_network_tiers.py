"""Pods and an oversubscribed core tier above them (ScaleOut.pod_gpus, .oversubscription)."""

import numpy as np
import pytest
from conftest import model_step

from commodel.comm.calls import run
from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.pricing.run import train

OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "sendrecv")


def _time(op, system, nodes, size, pod, ratio, algo="auto"):
    nodes = 2 if op == "sendrecv" else nodes  # one GPU on each of two nodes
    where = cluster(system, nodes, pod_gpus=pod, oversubscription=ratio)
    gpus = 2 if op == "sendrecv" else where.total_gpus
    return run(op, where, [size], gpus, algo=algo).time_s.iloc[0]


def test_an_oversubscribed_core_never_prices_a_call_faster_than_non_blocking():
    """Over random calls: time at 1:o is at least time at 1:1, and grows with o."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        op = str(rng.choice(OPS))
        system = str(rng.choice(["dgx-h100", "dgx-b200", "mi300x-8", "gb200-nvl72"]))
        nodes = int(rng.choice([2, 4, 8, 16, 36]))
        pod = cluster(system).full_domain * int(rng.choice([1, 2, 4]))
        size = float(2 ** rng.integers(10, 34))
        low, high = sorted(rng.uniform(1, 16, 2))
        times = [_time(op, system, nodes, size, pod, r) for r in (1.0, low, high)]
        assert times[0] <= times[1] * (1 + 1e-12) and times[1] <= times[2] * (1 + 1e-12), (
            op,
            system,
            nodes,
            pod,
        )


def test_rings_leave_a_pod_through_one_domain_and_all_to_alls_through_all():
    """A ring of 8 nodes in pods of 4 keeps its rate up to 1:4 (one of four domains sends out) and
    then loses P / o; an all-to-all sends 4/7 of its bytes out of the pod and slows from 1:1.75."""
    ring = {r: _time("allreduce", "dgx-h100", 8, 2**32, 32, r, algo="ring") for r in (1, 4, 8)}
    assert ring[4] == pytest.approx(ring[1], rel=1e-9) and ring[8] > 1.5 * ring[1]
    a2a = {r: _time("alltoall", "dgx-h100", 8, 2**32, 32, r) for r in (1, 1.75, 7)}
    assert a2a[1.75] == pytest.approx(a2a[1], rel=0.02) and a2a[7] == pytest.approx(4 * a2a[1], rel=0.05)
    # within one pod the core is never crossed
    assert _time("alltoall", "dgx-h100", 4, 2**32, 32, 7) == pytest.approx(
        _time("alltoall", "dgx-h100", 4, 2**32, 32, 1)
    )


def test_expert_parallelism_across_pods_pays_the_oversubscription():
    job = dict(model="deepseek-v3", system="dgx-h100", gpus=1024, tp=1, pp=16, ep=64, global_batch=4096)
    inside = {r: model_step(**job, pod_gpus=256, oversubscription=r)["breakdown"]["ep_comm"] for r in (1, 7)}
    across = {r: model_step(**job, pod_gpus=16, oversubscription=r)["breakdown"]["ep_comm"] for r in (1, 7)}
    assert inside[7] == pytest.approx(inside[1]) and across[7] > 1.5 * across[1]


def test_pods_are_whole_nodes_and_oversubscription_at_least_one():
    with pytest.raises(CommodelError, match="not whole 8-GPU scale-up domains"):
        cluster("dgx-h100", 4, pod_gpus=12)
    with pytest.raises(CommodelError, match="at least 1"):
        cluster("dgx-h100", 4, pod_gpus=16, oversubscription=0.5)
    with pytest.raises(CommodelError, match="oversubscription"):
        train(model="llama3-8b", system="dgx-h100", gpus=16, oversubscription=0.5)


def test_the_fabric_tiers_study_prices_the_core_only_where_experts_cross_pods():
    """studies/fabric-tiers: an oversubscribed core costs less (3 + 2/o switch ports per NIC) and
    slows most the designs whose expert all-to-all spans pods."""
    from commodel.explore.spec import load_spec
    from commodel.explore.sweep import evaluate_all
    from commodel.resources import resource_dir

    frame = evaluate_all(load_spec(resource_dir("studies") / "fabric-tiers" / "study.toml"))
    ib = frame[frame.fabric == "ib-ndr"].set_index(["ep", "pod_gpus", "oversubscription"])
    capex = ib.network_capex_usd.xs((64, 64))
    assert capex[7] < capex[4] < capex[2] < capex[1] == pytest.approx(2048 * 5 * 1200)
    days = ib.time_to_train_days
    inside = days[(64, 64, 7)] / days[(64, 64, 1)]  # EP 64 fills one 64-GPU pod: the stages cross
    across = days[(64, 32, 7)] / days[(64, 32, 1)]  # and the experts cross two 32-GPU pods too
    assert 1 <= inside < 1.2 < 1.5 < across
    assert (frame.fabric_tiers == 3).all()


def test_pipeline_stages_that_fill_a_pod_send_through_the_core():
    """Llama 3 405B, PP 16 over 2,048 H100: with one 128-GPU stage per pod every stage boundary sends
    all its GPUs through the core (1/o of their rate); with 1,024-GPU pods one boundary in eight
    crosses, and its 128 senders fit the core's 1024/7."""
    job = dict(model="llama3-405b", system="dgx-h100", gpus=2048, tp=8, pp=16, global_batch=1024,
               sequence_parallel=True)  # fmt: skip
    pp = {(pod, r): model_step(**job, pod_gpus=pod, oversubscription=r)["breakdown"]["pp_comm"]
          for pod in (128, 1024) for r in (1, 7)}  # fmt: skip
    assert pp[(128, 7)] == pytest.approx(7 * pp[(128, 1)], rel=0.01)
    assert pp[(1024, 7)] == pytest.approx(pp[(1024, 1)])


def test_racks_of_16_trays_are_domains_of_64_gpus():
    """GB200 NVL72 racks deployed with 16 of their 18 trays: 32 trays are two 64-GPU NVLink domains
    (the record's 72-GPU domain refuses them), priced across the scale-out network between racks."""
    with pytest.raises(CommodelError, match="do not fill whole 72-GPU scale-up domains"):
        run("allreduce", cluster("gb200-nvl72", 32), [2**30], 128)
    racks = cluster("gb200-nvl72", 32, trays_per_rack=16)
    assert racks.domain_gpus == 64
    two = run("allreduce", racks, [2**30], 128).iloc[0]
    one = run("allreduce", cluster("gb200-nvl72", 16), [2**30], 64).iloc[0]
    assert two.domains == 2 and two.busbw_GBps < one.busbw_GBps  # the racks meet over the NICs
    with pytest.raises(CommodelError, match="holds 1 to 18 trays"):
        cluster("gb200-nvl72", 32, trays_per_rack=19)
    with pytest.raises(CommodelError, match="one node"):
        cluster("dgx-h100", 2, trays_per_rack=4)
