"""Training across AMD and NVIDIA node groups: cross-vendor transfers, stage balancing, and bounds."""

import numpy as np
import pytest
from conftest import layouts
from hypothesis import given, settings
from hypothesis import strategies as st

from commodel.comm.cross_vendor import cross_vendor_time
from commodel.hardware import cluster
from commodel.workloads.model.catalog import model
from commodel.workloads.training.hetero import balanced_layers, hetero_train_step, node_groups

MIXED = "dgx-h100:1,mi300x-8:1"


def tokens_per_s(groups, x, transport="device-direct", nics=None, name="llama3-8b"):
    r = hetero_train_step(model(name), node_groups(groups), x, "bf16", "serial", "flash", transport, nics)
    return float(r["tokens_per_s"][0])


def test_device_direct_never_loses_to_cpu_forwarding_and_more_nics_narrow_the_gap():
    h100, mi300x = cluster("dgx-h100"), cluster("mi300x-8")
    size = 64 * 2**20
    direct = cross_vendor_time("device-direct", size, h100, mi300x, 8, [1, 2, 4, 8])
    forwarded = cross_vendor_time("cpu-forwarding", size, h100, mi300x, 8, [1, 2, 4, 8])
    assert np.all(forwarded > direct) and np.all(np.diff(direct) < 0)
    x = layouts(tp=1, pp=2, dp=8, global_batch=256, seq=4096)
    gaps = [
        1 - tokens_per_s(MIXED, x, "cpu-forwarding", n) / tokens_per_s(MIXED, x, "device-direct", n)
        for n in (1, 2, 4, 8)
    ]
    assert all(g > 0 for g in gaps) and np.all(np.diff(gaps) < 0)


def test_gloo_for_all_pays_each_nodes_gradient_reduction_on_the_host(monkeypatch):
    """The paper's first arm: the boundary as CPU-forwarding, and every node's gradients copied out,
    reduced by Gloo's ring over TCP streams and copied back. It costs the step what the ring over
    the host streams takes: FP32 gradients twice BF16's, and a faster host stream narrows it."""
    from commodel.comm import cross_vendor

    def extra(fp32=True):
        x = layouts(tp=1, pp=2, dp=8, global_batch=256, seq=4096, grad_reduce_in_fp32=fp32)

        def step(transport):
            r = hetero_train_step(
                model("llama3-8b"), node_groups(MIXED), x, "bf16", "serial", "flash", transport, 1
            )
            return float(r["step_time_s"][0])

        return step("gloo") - step("cpu-forwarding")

    fp32, bf16 = extra(True), extra(False)
    same_vendor = layouts(tp=1, pp=2, dp=8, global_batch=256, seq=4096)
    sends = {
        t: float(
            hetero_train_step(
                model("llama3-8b"),
                node_groups("dgx-h100:1,dgx-h100:1"),
                same_vendor,
                "bf16",
                "serial",
                "flash",
                t,
                1,
            )["pp_comm_s"][0]
        )
        for t in ("device-direct", "gloo")
    }
    assert sends["gloo"] > 5 * sends["device-direct"]  # Gloo for all: even one vendor's sends go by the host
    assert fp32 == pytest.approx(2 * bf16, rel=0.02) and bf16 > 0.5
    monkeypatch.setattr(cross_vendor, "HOST_STREAM_BPS", 2 * cross_vendor.HOST_STREAM_BPS)
    assert extra(True) < 0.6 * fp32
    h100 = cluster("dgx-h100")
    ring = [float(cross_vendor.host_allreduce_time(2**30, p, h100)) for p in (1, 2, 4, 8)]
    assert ring[0] == 0 and np.all(np.diff(ring) > 0)  # 2 (p - 1) / p of the bytes over one stream each


def test_gloos_ring_shares_each_process_stream_between_its_send_and_receive():
    """The host stream is one Gloo pair's one-way rate (measured); in a ring step a process sends and
    receives through its one I/O thread, which is what the same machine's two-rank allreduce shows:
    1.5 GB/s of algorithm bandwidth (benchmarks/measure_gloo.py, 256 MiB), not the one-way 2.6."""
    from commodel.comm.cross_vendor import HOST_STREAM_BPS, host_ring_s

    n = 256 * 2**20
    assert n / float(host_ring_s(n, 2, HOST_STREAM_BPS)) == pytest.approx(1.5e9, rel=0.25)
    ring = [float(host_ring_s(n, p, HOST_STREAM_BPS)) for p in (2, 4, 8, 16)]
    assert np.all(np.diff(ring) > 0) and ring[-1] < 2 * ring[0]  # 2 (p - 1) / p of the bytes: at most 2x


def test_a_transport_on_one_kind_of_node_is_said_to_change_nothing():
    from commodel.pricing.run import train

    job = {"model": "llama3-8b", "system": "dgx-h100", "global_batch": 64, "recompute": "full"}
    base, gloo = train(**job), train(**job, transport="gloo")
    assert gloo["step_time_s"] == base["step_time_s"]
    assert any("--transport gloo prices node groups" in note for note in gloo["notes"])
    assert not any("--transport" in note for note in base["notes"])


def test_balanced_stages_give_the_slower_gpus_fewer_layers():
    assert list(balanced_layers(32, np.array([1.0, 1.0]), np.zeros(2))) == [16, 16]
    layers = balanced_layers(32, np.array([1.0, 1.25]), np.zeros(2))
    assert layers.sum() == 32 and layers[0] > layers[1]
    # the logits on the last stage take layers from it
    assert balanced_layers(32, np.array([1.0, 1.0]), np.array([0.0, 4.0]))[1] < 16


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["llama3-8b", "qwen2-7b"]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2, 8]),
    st.sampled_from(["device-direct", "cpu-forwarding"]),
)
def test_a_mixed_cluster_never_beats_its_faster_homogeneous_counterpart(
    name, micro_batch, tp, nics, transport
):
    x = layouts(tp=tp, pp=2, dp=8 // tp, micro_batch=micro_batch, global_batch=64 * micro_batch, seq=4096)
    mixed = tokens_per_s(MIXED, x, transport, nics, name)
    nvidia = tokens_per_s("dgx-h100:1,dgx-h100:1", x, name=name)
    amd = tokens_per_s("mi300x-8:1,mi300x-8:1", x, name=name)
    assert min(nvidia, amd) * 0.9 < mixed <= max(nvidia, amd)


def test_node_groups_that_do_not_hold_the_pipeline_are_errors():
    from commodel.errors import CommodelError

    x = layouts(tp=1, pp=4, dp=8, global_batch=64, seq=4096)
    with pytest.raises(CommodelError, match="hold 2 pipeline stages"):
        tokens_per_s(MIXED, x)


def test_recompute_auto_is_refused_across_node_groups():
    """Fitting activations by recomputation or offload is priced for one kind of node: across node
    groups the job must say which recomputation it runs."""
    from commodel.errors import CommodelError
    from commodel.pricing.run import train

    job = {"model": "llama3-8b", "system": "mi300x-8:1,dgx-h100:1", "pp": 2, "global_batch": 64}
    assert train(**job, recompute="full")["fits"]
    with pytest.raises(CommodelError, match="recompute auto needs one kind of node"):
        train(**job, recompute="auto")


@pytest.mark.parametrize(
    "changes",
    [
        {"vpp": 2},
        {"schedule": "dualpipe"},
        {"last_stage_layers": 8},
        {"ends_as_layers": True},
        {"mtp_layers": 1},
    ],
    ids=lambda c: next(iter(c)),
)
def test_schedules_and_stage_splits_of_one_kind_of_node_are_refused_across_node_groups(changes):
    """Interleaving, DualPipe, stated first and last stages and multi-token prediction are priced for
    one kind of node; across node groups the layers per stage are given or balanced instead."""
    from commodel.errors import CommodelError

    x = layouts(tp=1, pp=2, dp=8, global_batch=256, seq=4096, **changes)
    with pytest.raises(CommodelError, match="across node groups"):
        tokens_per_s(MIXED, x)


def test_a_table_of_node_group_jobs_says_each_rows_problem_beside_one_that_does_not_fit():
    """Llama 3 70B on one H200 node and one MI325X node at pp 2: stated stage layers that do not add up
    to its 80 layers are that row's problem, and the row without them, which does not fit without
    recomputation, shows the memory it needs; neither stops the other (a problem text from a NaN
    memory once did)."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    jobs = pd.DataFrame([{"system": "hgx-h200:1,mi325x-8:1", "model": "llama3-70b", "pp": 2, "zero": 0,
                          "global_batch": 512, "seq": 4096, "stage_layers": layers} for layers in ("", "16,16")])  # fmt: skip
    table = evaluator("training")(jobs)
    assert table.problem[0].startswith("does not fit") and table.memory_per_gpu_bytes[0] > 141e9
    assert "sum to the model's 80 layers" in table.problem[1] and not table.valid.any()
