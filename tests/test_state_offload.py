"""--offload optimizer|weights: model states in CPU memory, priced by the host link."""

import pytest
from conftest import model_step

from commodel.errors import CommodelError
from commodel.hardware.cluster import Cluster
from commodel.pricing.run import train

JOB = dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=8, global_batch=512, sequence_parallel=True)


def test_optimizer_offload_moves_the_optimizer_state_and_streams_it_once_each_way():
    kept, moved = train(**JOB), train(**JOB, offload="optimizer")
    assert not kept["fits"] and moved["fits"]  # the optimizer's 12 B per parameter make room
    optimizer = kept["memory_optimizer_bytes"]
    assert moved["memory_optimizer_bytes"] == 0 and moved["offloaded_state_bytes"] == optimizer
    assert moved["memory_per_gpu_bytes"] == pytest.approx(kept["memory_per_gpu_bytes"] - optimizer)
    from commodel.hardware import cluster

    host = cluster("dgx-h100").host_offload_Bps
    assert moved["breakdown"]["offload"] == pytest.approx(optimizer / host)
    assert moved["step_time_s"] == pytest.approx(model_step(**JOB)["step_time_s"] + optimizer / host)


def test_weight_offload_keeps_two_layers_and_hides_behind_a_faster_host_link(monkeypatch):
    kept, moved = train(**JOB), train(**JOB, offload="weights")
    assert moved["memory_weights_bytes"] == pytest.approx(kept["memory_weights_bytes"] * 2 / 80)
    assert moved["offload_needed_Bps"] > 0 and moved["breakdown"]["offload"] > 0
    # The same job with a host link at the bandwidth it asks for exposes only the write-back.
    need = moved["offload_needed_Bps"]
    monkeypatch.setattr(Cluster, "host_offload_Bps", property(lambda self: need * 1.001))
    fast = train(**JOB, offload="weights")
    assert fast["breakdown"]["offload"] == pytest.approx(
        kept["memory_weights_bytes"] / (need * 1.001), rel=1e-6
    )
    exposed = []
    for share in (4, 2):
        monkeypatch.setattr(Cluster, "host_offload_Bps", property(lambda self, s=share: need / s))
        exposed.append(train(**JOB, offload="weights")["breakdown"]["offload"])
    assert exposed[0] > exposed[1] > fast["breakdown"]["offload"]


def test_under_zero3_only_the_shard_moves_and_the_gathered_copies_stay():
    """ZeRO-3 rebuilds each layer (and holds the root's tables) in HBM by all-gathers: offloading the
    weights moves the shard, and the gathered copies stay beside its two resident layers (they
    vanished with it, a 405B job on 16 GPUs holding 1.1 GiB of weights for two gathered 3.2 B-parameter
    layers and the 4.2 B-parameter tables)."""
    job = dict(model="llama3-8b", system="dgx-h100", gpus=16, zero=3, recompute="full", global_batch=64)
    kept, moved = train(**job), train(**job, offload="weights")
    gathered = kept["memory_weights_bytes"] - moved["offloaded_state_bytes"]
    assert gathered > 0.5 * kept["memory_weights_bytes"]  # two layers and the tables against a 16th
    shard = moved["offloaded_state_bytes"]
    assert moved["memory_weights_bytes"] == pytest.approx(gathered + shard * 2 / 32)


def test_states_that_overflow_cpu_memory_do_not_fit(monkeypatch):
    assert train(**JOB, offload="optimizer,weights")["fits"]
    small = train(**JOB, offload="optimizer,weights")["offloaded_state_bytes"] / 2
    monkeypatch.setattr(Cluster, "host_memory_per_gpu", property(lambda self: small))
    assert not train(**JOB, offload="optimizer,weights")["fits"]


def test_offload_needs_host_memory_and_known_states():
    with pytest.raises(CommodelError, match="needs host memory, which a40-pcie-8"):
        train(model="llama3-8b", system="a40-pcie-8", gpus=8, offload="optimizer")
    with pytest.raises(CommodelError, match="did you mean 'weights'"):
        train(model="llama3-8b", system="dgx-h100", gpus=8, offload="weight")


def test_the_table_says_what_offload_costs(capsys, monkeypatch):
    from commodel.cli import main

    argv = ["commodel", "train", "--model", "llama3-70b", "--system", "dgx-h100", "--gpus", "64", "--tp", "8",
            "--global-batch", "512", "--sequence-parallel", "--offload", "optimizer,weights"]  # fmt: skip
    monkeypatch.setattr("sys.argv", argv)
    main()
    out = capsys.readouterr().out
    assert "of optimizer and weights in CPU memory" in out and "the weights' fetches hide at" in out
