"""ZeRO-3 as FSDP runs it (PyTorch FSDP2, Megatron-FSDP): per-layer gathers prefetched one layer
ahead, reduce-scatters behind the next layer's backward, the gathered layers and gradients held, and
``reshard_after_forward``."""

import dataclasses

import numpy as np
import pytest
from conftest import layouts, model_step

from commodel.hardware import cluster
from commodel.pricing.run import train
from commodel.workloads.model.catalog import model
from commodel.workloads.training.memory import FSDP_LAYERS_IN_FLIGHT, layer_parameters, memory_per_gpu
from commodel.workloads.training.step import train_step

#: Llama 3 8B on 32 H100s (4 nodes), FSDP, one 8K-token sequence per GPU: the torchtitan shape.
JOB = dict(model="llama3-8b", system="dgx-h100", gpus=32, global_batch=32, seq=8192, zero=3)


def _step(x, strategy="serial", dtype="bf16"):
    return train_step(model("llama3-8b"), cluster("dgx-h100", 4), x, dtype, strategy)


def test_resharding_after_forward_gathers_twice_and_holds_two_layers():
    """Freeing each layer after its forward costs a second gather per micro-batch (serial: all of it
    exposed) and saves holding every layer gathered from forward to backward."""
    on = layouts(**JOB)
    off = dataclasses.replace(on, reshard_after_forward=np.asarray(False))
    steps = {name: _step(x) for name, x in (("on", on), ("off", off))}
    assert steps["on"]["dp_comm_s"] > steps["off"]["dp_comm_s"]
    assert steps["on"]["step_time_s"] > steps["off"]["step_time_s"]
    mem_on, mem_off = memory_per_gpu(model("llama3-8b"), on), memory_per_gpu(model("llama3-8b"), off)
    layer = float(sum(layer_parameters(model("llama3-8b"), on)))
    extra = (model("llama3-8b").layers - FSDP_LAYERS_IN_FLIGHT) * layer * 2  # BF16, the other layers
    assert float(mem_off["weights"] - mem_on["weights"]) == pytest.approx(extra)
    assert float(mem_off["gradients"]) == float(mem_on["gradients"])


def test_the_root_and_first_layer_stay_exposed_behind_ideal_overlap():
    """With perfect overlap, ZeRO-3 still exposes its prefetch pipeline's two ends: the root module's
    gather at the forward's start and reduce-scatter at the backward's end (the embedding and output
    tables) and the first layer's, their share of the step's gather and reduce-scatter, no more than
    its communication. A larger vocabulary makes the root, and so the exposed ends, larger."""
    x = layouts(**JOB)
    ideal, serial = _step(x, "ideal"), _step(x, "serial")
    z3_serial = float(serial["dp_comm_s"])  # serial: every gather and reduce-scatter exposed (2G + R)
    assert 0 < float(ideal["dp_comm_s"]) < z3_serial
    net = model("llama3-8b")
    root = 2 * net.vocab * net.hidden  # untied embedding and output tables
    total = float(sum(layer_parameters(net, x))) * net.layers + root
    ends = (root + float(sum(layer_parameters(net, x)))) / total
    # the ends are (G + R) x ends, between a third and a half of the serial 2G + R times that share
    assert z3_serial * ends / 3 <= float(ideal["dp_comm_s"]) <= z3_serial * ends * (1 + 1e-9)
    wide = net.model_copy(update={"vocab": 4 * net.vocab})
    wide_ideal = train_step(wide, cluster("dgx-h100", 4), x, "bf16", "ideal")
    assert float(wide_ideal["dp_comm_s"]) > float(ideal["dp_comm_s"])


def test_fsdp_holds_the_root_gathered_from_forward_to_backward():
    """FSDP2 does not reshard its root module after the forward: the embedding and output tables stay
    gathered (BF16) and their gradients wait unsharded for the root's reduce-scatter."""
    x = layouts(**JOB)
    net = model("llama3-8b")
    wide = net.model_copy(update={"vocab": 2 * net.vocab})
    narrow_mem, wide_mem = memory_per_gpu(net, x), memory_per_gpu(wide, x)
    extra_root = 2 * net.vocab * net.hidden  # both tables gain vocab x hidden
    sharded = extra_root / 32  # the shards' own share, over 32 ranks
    assert float(wide_mem["weights"] - narrow_mem["weights"]) == pytest.approx(2 * (extra_root + sharded))
    assert float(wide_mem["gradients"] - narrow_mem["gradients"]) == pytest.approx(4 * (extra_root + sharded))


def test_fp8_gathers_hold_and_move_fewer_bytes():
    """Under FP8 with ``fp8_param_gather`` (torchao's float8 all-gather, Megatron's FP8 primary
    weights) FSDP gathers 1 B per parameter instead of BF16's 2: less to move and less held."""
    x = layouts(**JOB)
    fp8 = train(**JOB, dtype="fp8", overlap="serial")
    bf16_gather = train(**JOB, dtype="fp8", overlap="serial", fp8_param_gather=False)
    assert fp8["step_time_s"] < bf16_gather["step_time_s"]
    layer = float(sum(layer_parameters(model("llama3-8b"), x)))
    gathered = FSDP_LAYERS_IN_FLIGHT * layer
    # BF16 gathers add 1 B per gathered parameter, beside the 4 B of FP8 copies and BF16 weights per shard
    assert fp8["memory_weights_bytes"] < bf16_gather["memory_weights_bytes"]
    assert bf16_gather["memory_weights_bytes"] - fp8["memory_weights_bytes"] >= gathered


def test_reshard_after_forward_is_a_job_setting():
    on, off = train(**JOB), train(**JOB, reshard_after_forward=False)
    assert on["memory_weights_bytes"] < off["memory_weights_bytes"]
    # No effect below ZeRO-3: the results differ only in the setting they echo.
    kept, freed = (train(**{**JOB, "zero": 1}, reshard_after_forward=r) for r in (False, True))
    assert {k for k in kept if kept[k] != freed[k]} == {"reshard_after_forward"}


def test_eager_elementwise_kernels_never_make_a_step_faster():
    """PyTorch's eager norms and SwiGLU (torchtitan without --compile) read and write more than fused
    ones: never a faster step, and a norm moves 9 times the bytes (18 where the fused one moves 2)."""
    from commodel.compute.precision import precision
    from commodel.workloads.layer.kernels import layer_kernels

    for name in ("llama3-8b", "gpt3-175b", "qwen3-30b-a3b"):
        job = dict(model=name, system="dgx-h100", gpus=64, global_batch=64, seq=4096)
        fused, eager = model_step(**job), model_step(**job, elementwise="eager")
        assert eager["step_time_s"] >= fused["step_time_s"]
    args = (model("llama3-8b"), 8192.0, 1.0, 8192.0, 1.0, 1.0, 1.0, False, precision("bf16"))
    norms = [
        next(k for k, _, _ in layer_kernels(*args, eager=eager).elementwise if k.label == "norms")
        for eager in (False, True)
    ]
    assert float(norms[1].bytes / norms[0].bytes) == pytest.approx(9.0)


def test_the_advice_names_compiled_kernels_and_holding_the_layers_only_where_they_pay():
    """commodel train's notes: an eager FSDP job is told what fused kernels and holding its layers
    gathered would save, priced; a fused job that already holds them gets neither note."""
    eager = train(**JOB, overlap="serial", elementwise="eager", advise=True)
    notes = " ".join(eager["notes"])
    assert "--elementwise fused" in notes and "--no-reshard-after-forward" in notes
    tuned = train(**JOB, overlap="serial", reshard_after_forward=False, advise=True)
    assert not any("--elementwise" in n or "--no-reshard" in n for n in tuned["notes"])


def test_each_pipeline_stage_exposes_zero3s_collectives_for_its_own_layers():
    """DeepSeek-V3 under ZeRO-3 on 256 MI300X, pp 4, ideal overlap: the collectives are longer than the
    compute. A stage exposes what its own layers' gathers and reduce-scatters leave beside its own
    layers' compute; priced once on the largest stage and added to every stage, recomputing the layers
    (more compute to hide behind there) made the smaller stages' exposure shrink too, and the step
    0.3% shorter."""
    job = {"model": "deepseek-v3", "system": "mi300x-8", "gpus": 256, "pp": 4, "ep": 8, "global_batch": 256,
           "cuda_graphs": "attn", "overlap": "ideal", "zero": 3}  # fmt: skip
    none, full = (train(**job, recompute=r)["step_time_s"] for r in ("none", "full"))
    assert full >= none


def test_a_parameter_no_rank_shares_is_never_gathered():
    """ZeRO-3 gathers a parameter from the ranks that share it: one held whole by one rank of its
    data-parallel group has nothing to gather, and no gathered copy or waiting gradient beside it
    (Mixtral's experts at ep 8 on 8 GPUs, each expert on one rank; every parameter at dp 1). Both had
    been counted: at dp 1 ZeRO-3 held 2 layers and the root twice for nothing."""
    alone = dict(model="llama3-8b", system="dgx-h100", gpus=8, tp=8, global_batch=8)
    memory = {z: train(**alone, zero=z)["memory_per_gpu_bytes"] for z in (0, 3)}
    assert memory[3] == memory[0]
    net = model("mixtral-8x7b")
    experts = dict(model="mixtral-8x7b", system="dgx-b200", gpus=8, ep=8, global_batch=64)
    x = layouts(**experts, zero=3)
    dense, _ = layer_parameters(net, x)
    stage = memory_per_gpu(net, x)
    whole = memory_per_gpu(net, layouts(**experts, zero=2))
    root = 2 * net.vocab * net.hidden  # untied embedding and output tables, dense: shared by 8
    gathered = FSDP_LAYERS_IN_FLIGHT * float(dense) * 2 + root * 2  # BF16, the dense layers' and the root's
    saved = (float(whole["weights"]) - float(stage["weights"])) + gathered
    assert saved == pytest.approx((float(dense) * net.layers + root) * 2 * 7 / 8)  # the dense shards' 7/8
