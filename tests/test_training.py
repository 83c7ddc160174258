"""Training-step model: hand-checkable counts, schedule formulas and the properties it must have."""

import dataclasses
import itertools
import re

import numpy as np
import pytest
from conftest import layouts, model_step, module_texts
from hypothesis import given, settings
from hypothesis import strategies as st

from commodel.compute.precision import precision
from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.overlap import STRATEGIES, Window, window_time
from commodel.overlap.interference import memory_of
from commodel.pricing.run import train
from commodel.pricing.table import job_columns
from commodel.pricing.training_job import training_job
from commodel.workloads.model.catalog import model, models
from commodel.workloads.model.recompute import RECOMPUTE_MODULES, module_bits
from commodel.workloads.model.transformer import model_flops_per_token, parameters
from commodel.workloads.moe.dispatch import domains_reached, forwarded_copies
from commodel.workloads.parallel.layout import RECOMPUTE_CHOICES, stage_layers_text
from commodel.workloads.training.activation_fit import offload_exposed
from commodel.workloads.training.memory import (
    layer_parameters,
    memory_per_gpu,
    reserved_memory,
    stage_parameters,
)
from commodel.workloads.training.step import BREAKDOWN, train_step

GPT3 = model("gpt3-175b")

#: HBM of 3 TB/s with the records' contention constants and no power limit binding.
HBM = memory_of(cluster("dgx-h100").gpu)._replace(Bps=3e12, power=0.0)

#: DeepEP's share of NVLink on H800, as the GPU record states it.
NVLINK_SHARE = cluster("hgx-h800").gpu.expert_dispatch.nvlink_share.value


def test_parameter_counts_match_the_papers():
    expected = {
        "gpt3-175b": 175e9,
        "llama3-8b": 8.0e9,
        "llama3-70b": 70.6e9,
        "llama3-405b": 405e9,
        "mixtral-8x7b": 46.7e9,
        "deepseek-v3": 671e9,
        "megatron-1t": 1.0e12,
        "qwen2-7b": 7.6e9,
    }
    for name, count in expected.items():
        assert parameters(model(name))["total"] == pytest.approx(count, rel=0.015), name
    assert parameters(model("mixtral-8x7b"))["active"] == pytest.approx(12.9e9, rel=0.02)
    assert parameters(model("deepseek-v3"))["active"] == pytest.approx(37e9, rel=0.03)


def test_dense_flops_are_six_n_plus_attention_and_logits():
    # Megatron: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) per batch, i.e. per token 72 l h^2 + 12 l s h + 6 V h
    layers, h, s, V = GPT3.layers, GPT3.hidden, 2048, GPT3.vocab
    expected = 72 * layers * h**2 + 12 * layers * s * h + 6 * V * h
    assert float(model_flops_per_token(GPT3, s, causal=False)) == pytest.approx(expected)
    # causal (Megatron-Bridge): the attention term counts the lower triangle, half the square
    causal = 72 * layers * h**2 + 6 * layers * s * h + 6 * V * h
    assert float(model_flops_per_token(GPT3, s)) == pytest.approx(causal)
    n_matmul = parameters(GPT3)["matmul_active"]
    assert 6 * n_matmul == pytest.approx(72 * layers * h**2)


def test_memory_of_a_known_configuration():
    """Llama 3 8B, 8-way data parallel, ZeRO-1: 2 + 2 bytes per parameter (BF16 weights and gradient
    buffers) plus 12 / 8 of optimizer."""
    m = model("llama3-8b")
    x = layouts(dp=8, global_batch=8, seq=8192, zero=1, grad_reduce_in_fp32=False)
    mem = memory_per_gpu(m, x)
    n = parameters(m)["total"]
    assert float(mem["weights"]) == pytest.approx(2 * n)
    assert float(mem["gradients"]) == pytest.approx(2 * n)
    assert float(mem["optimizer"]) == pytest.approx(12 * n / 8)
    zero3 = memory_per_gpu(m, dataclasses.replace(x, zero=np.asarray(3.0)))
    # ZeRO-3 also holds two layers gathered and their gradients, and the root module's embedding and
    # output tables gathered with their gradients (FSDP2 does not reshard the root after its forward)
    held = 2 * float(sum(layer_parameters(m, x))) + 2 * m.vocab * m.hidden
    assert float(zero3["weights"]) == pytest.approx(2 * n / 8 + 2 * held)
    assert float(zero3["gradients"]) == pytest.approx(2 * n / 8 + 2 * held)


@pytest.mark.parametrize("attention", ["unfused", "flash"])
def test_recomputation_trades_memory_for_flops(attention):
    """Full recomputation keeps only layer inputs; selective (the checkpointed attention core) drops
    the unfused scores, softmax and dropout mask, and saves nothing under flash attention, which
    stores no more than the Q, K, V and output other layers hold: there it only costs time."""
    base = dict(model="gpt3-175b", system="dgx-h100", gpus=64, tp=8, pp=8, global_batch=64, seq=2048)
    runs = {r: model_step(**base, recompute=r, attention=attention) for r in ("none", "selective", "full")}
    mems = [runs[r]["memory_per_gpu_bytes"] for r in ("none", "selective", "full")]
    times = [runs[r]["step_time_s"] for r in ("none", "selective", "full")]
    assert (mems[0] > mems[1] > mems[2]) if attention == "unfused" else (mems[0] == mems[1] > mems[2])
    assert times[0] < times[1] < times[2]
    assert runs["full"]["hw_tflops_per_gpu"] > runs["full"]["tflops_per_gpu"]


#: Llama 3 70B under FSDP at micro-batch 2 and 8K tokens (the Megatron-Bridge GB200 recipe): about
#: 290 GiB of activations per GPU, so recomputation or offload must make room.
FSDP_70B = layouts("llama3-70b", dp=64, micro_batch=2, global_batch=256, seq=8192, zero=3, recompute="auto")


def _train_auto(c, layout=FSDP_70B):
    return train_step(model("llama3-70b"), c, layout, "fp8", "sm-partition")


def _with_host_memory(c, **changes):
    """``c`` with its CPU-memory record changed (``None`` removes it)."""
    host = None if changes.get("host") is False else c.system.host_memory.model_copy(update=changes)
    return dataclasses.replace(c, system=c.system.model_copy(update={"host_memory": host}))


def test_auto_recomputes_just_enough_layers_to_fit():
    c = cluster("dgx-h100", 8)
    auto = _train_auto(c)
    none, full = (
        _train_auto(c, dataclasses.replace(FSDP_70B, recompute=np.asarray(code))) for code in (0.0, 2.0)
    )
    share = float(auto["recompute_share"])
    assert 0 < share < 1 and float(auto["offload_share"]) == 0  # PCIe is too slow to offload to
    assert bool(auto["fits"]) and not bool(none["fits"])
    assert none["step_time_s"] < auto["step_time_s"] < full["step_time_s"]
    too_big = train(model="llama3-405b", system="dgx-h100", gpus=8, global_batch=8, recompute="auto")
    assert not too_big["fits"] and "full still does not fit" in too_big["notes"][0]
    # one layer fewer recomputed would not fit: the share is the least that does
    fewer = share - 1 / model("llama3-70b").layers
    over = none["memory_per_gpu_bytes"] + fewer * (
        full["memory_per_gpu_bytes"] - none["memory_per_gpu_bytes"]
    )
    assert over > 0.9 * c.gpu.memory_capacity.value


def test_auto_offloads_to_grace_memory_when_the_copies_hide():
    """GB200: NVLink-C2C carries a layer's 3.6 GB of activations in about the time of its forward, so
    offloading beats recomputing; a slower link exposes more of each copy and, slow enough, loses to
    recomputation; too little CPU memory also rules it out."""
    c = cluster("gb200-nvl72", 16)
    offloaded = _train_auto(c)
    assert float(offloaded["offload_share"]) > 0 and float(offloaded["recompute_share"]) == 0
    assert bool(offloaded["fits"])
    assert 0 < float(offloaded["offloaded_bytes"]) <= c.host_memory_per_gpu
    assert sum(offloaded[f"{b}_s"] for b in BREAKDOWN) == pytest.approx(offloaded["step_time_s"])
    recomputed = _train_auto(_with_host_memory(c, host=False))
    assert float(recomputed["recompute_share"]) > 0
    assert offloaded["step_time_s"] < recomputed["step_time_s"]
    links = c.system.host_memory.gpus_per_link
    slower = [
        _train_auto(_with_host_memory(c, gpus_per_link=links.model_copy(update={"value": n})))
        for n in (2.0, 2.2, 3.0, 64.0)
    ]
    steps = [float(r["step_time_s"]) for r in slower]
    assert steps == sorted(steps) and steps[1] > steps[0]
    assert float(slower[-1]["offload_share"]) == 0 and float(slower[-1]["recompute_share"]) > 0
    small = _with_host_memory(c, capacity=c.system.host_memory.capacity.model_copy(update={"value": 4e9}))
    assert float(_train_auto(small)["offload_share"]) == 0


def test_auto_offloads_only_where_megatron_core_can():
    """Megatron-Core 0.15 refuses CPU offloading with pipeline parallelism, beside any recomputation
    (``--recompute-modules`` included) and for every layer: there ``auto`` recomputes instead."""
    c = cluster("gb200-nvl72", 16)
    variants = {
        "pp2": dataclasses.replace(FSDP_70B, pp=np.asarray(2.0), dp=np.asarray(32.0)),
        "modules": dataclasses.replace(
            FSDP_70B, recompute_modules=np.asarray(float(module_bits("layernorm")))
        ),
    }
    for name, layout in variants.items():
        out = _train_auto(c, layout)
        assert float(out["offload_share"]) == 0 and float(out["recompute_share"]) > 0, name
        assert bool(out["fits"]), name
    assert float(_train_auto(c)["offload_share"]) > 0  # the same job on one stage offloads
    roomy = _with_host_memory(c, capacity=c.system.host_memory.capacity.model_copy(update={"value": 1e13}))
    every_layer = layouts(
        "llama3-70b", dp=64, micro_batch=6, global_batch=384, seq=16384, zero=3, recompute="auto"
    )
    assert float(_train_auto(roomy, every_layer)["recompute_share"]) == 1


def test_a_job_can_state_the_layers_it_offloads():
    """Megatron's --cpu-offloading-num-layers, priced as auto prices its own choice: the same layers
    give the same step and memory; fewer leave the job too big for HBM, more than the CPU memory
    holds do not fit either, and each layer more frees HBM and costs time."""
    c = cluster("gb200-nvl72", 16)
    auto = _train_auto(c)
    chosen = round(float(auto["offload_share"]) * 80)
    stated = {
        n: _train_auto(
            c, dataclasses.replace(FSDP_70B, recompute=np.asarray(0.0), offload_layers=np.asarray(float(n)))
        )
        for n in (10, chosen, 60)
    }
    assert float(stated[chosen]["step_time_s"]) == pytest.approx(float(auto["step_time_s"]))
    assert float(stated[chosen]["memory_per_gpu_bytes"]) == pytest.approx(float(auto["memory_per_gpu_bytes"]))
    assert float(stated[60]["offload_share"]) == 0.75 and float(stated[60]["recompute_share"]) == 0
    assert not bool(stated[10]["fits"]) and bool(stated[chosen]["fits"])
    memory = [float(stated[n]["memory_per_gpu_bytes"]) for n in (10, chosen, 60)]
    steps = [float(stated[n]["step_time_s"]) for n in (10, chosen, 60)]
    assert memory == sorted(memory, reverse=True) and steps == sorted(steps)
    small = _with_host_memory(c, capacity=c.system.host_memory.capacity.model_copy(update={"value": 4e9}))
    layout = dataclasses.replace(
        FSDP_70B, recompute=np.asarray(0.0), offload_layers=np.asarray(float(chosen))
    )
    assert not bool(_train_auto(small, layout)["fits"])


def test_offload_exposes_only_what_the_layer_does_not_hide():
    exposed = offload_exposed(np.array([1e9, 4e9, 8e9]), 0.01, 0.02, 200e9)
    assert exposed == pytest.approx([0.0, 0.01, 0.03 + 0.02])
    assert np.isinf(offload_exposed(np.array([1.0]), 1.0, 1.0, 0.0)).all()


def _no_logits_model():
    """GPT-3 with a one-token vocabulary: pipeline stages are then exactly balanced."""
    return GPT3.model_copy(update={"vocab": 1})


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 1, 8), (8, 1, 32), (4, 2, 8), (8, 4, 16)])
def test_bubble_fraction(pp, vpp, m):
    net = _no_logits_model()
    x = layouts(pp=pp, vpp=vpp, dp=1, global_batch=m, seq=2048)
    r = train_step(net, cluster("dgx-h100", pp), x)
    total = r["step_time_s"] - r["optimizer_s"] - r["dp_comm_s"]
    # the one-token logits still cost three kernel launches (~1e-5 s): stages balance to 1e-4
    assert float(r["bubble_s"] / total) == pytest.approx((pp - 1) / (vpp * m + pp - 1), rel=1e-3)


@pytest.mark.parametrize("pp", [2, 4, 8, 16])
def test_dualpipe_bubble_and_memory_follow_the_deepseek_v3_report(pp):
    """DualPipe against 1F1B on the same stages (the DeepSeek-V3 report's Table 2): bubble
    (pp/2 - 1)(F&B + B - 3W) over (pp - 1)(F + B), which GEMM-bound layers (B = 2F, W = F) make
    (pp/2 - 1) 2 / ((pp - 1) 3), nothing at pp 2; twice the parameters; pp + 1 micro-batches'
    activations in flight to 1F1B's pp."""
    net, m = _no_logits_model(), 4 * pp
    pair = [layouts(pp=pp, dp=1, global_batch=m, seq=2048, schedule=s) for s in ("1f1b", "dualpipe")]
    one, dual = (train_step(net, cluster("dgx-h100", pp), x) for x in pair)
    assert float(dual["bubble_s"] / one["bubble_s"]) == pytest.approx(
        (pp / 2 - 1) * 2 / (3 * (pp - 1)), abs=0.03
    )
    assert float(dual["step_time_s"]) < float(one["step_time_s"])
    single, double = (memory_per_gpu(net, x) for x in pair)
    assert float(double["weights"] / single["weights"]) == pytest.approx(2.0)
    assert float(double["activations"] / single["activations"]) == pytest.approx((pp + 1) / pp, rel=1e-5)


def test_a_larger_vocabulary_never_needs_less_memory():
    """The first stage's activations and the last stage's logits are held on different GPUs: a
    larger vocabulary adds logits to the last stage and a table to both, and takes nothing away from
    the first (the first stage's peak once lost the logits' bytes)."""
    x = layouts(tp=2, pp=2, dp=32, micro_batch=4, global_batch=1024, seq=8192, zero=1, sequence_parallel=True)
    net = model("llama3-70b")
    small, large = (memory_per_gpu(net.model_copy(update={"vocab": v}), x) for v in (32000, 256000))
    assert large["total"] > small["total"] and large["activations"] == small["activations"]


def test_activations_keep_q_k_and_v_as_wide_as_the_heads_make_them():
    """Q is heads x d_qk wide, K and V kv_heads x (d_qk + d_v), the attention output heads x d_v:
    Korthikanti's 2h for Q holds only where heads x d = h. MLA keeps every head's up-projected key and
    value (DeepSeek-V3: 128 x (192 + 192 + 128) x 2 B) and its two latents."""
    from commodel.workloads.model.transformer import activation_bytes_per_token

    llama = model("llama3-70b")  # heads x d = h: Korthikanti's count, GQA's K and V, no dropout
    h, kv, d, f = llama.hidden, llama.n_kv_heads, llama.d_head, llama.ffn_hidden
    # attention: norm output, Q, K and V, output; MLP: norm output, FC1 output (2f), activation; norms
    korthikanti = (2 * h + 2 * h + 4 * kv * d + 2 * h) + (2 * h + 2 * (2 * f) + 2 * f) + 4 * h
    assert float(activation_bytes_per_token(llama, 0)) == korthikanti
    oss = model("gpt-oss-120b")  # 64 heads of 64: 4096 wide against a hidden of 2880
    wider = oss.model_copy(update={"head_dim": 2 * oss.head_dim})
    gained = activation_bytes_per_token(wider, 0) - activation_bytes_per_token(oss, 0)
    q_k_v, out = 2 * (oss.heads + 2 * oss.n_kv_heads) * oss.head_dim, 2 * oss.heads * oss.head_dim
    assert float(gained) == q_k_v + out
    dsv3 = model("deepseek-v3")
    mla = dsv3.mla.model_copy(update={"v_head_dim": dsv3.mla.v_head_dim + 64})
    gained = activation_bytes_per_token(dsv3.model_copy(update={"mla": mla}), 0) - activation_bytes_per_token(
        dsv3, 0
    )
    assert float(gained) == 2 * dsv3.heads * 64 + 2 * dsv3.heads * 64  # V, and the output projection's input
    latents = dsv3.mla.model_copy(update={"kv_lora_rank": 2 * dsv3.mla.kv_lora_rank})
    gained = activation_bytes_per_token(
        dsv3.model_copy(update={"mla": latents}), 0
    ) - activation_bytes_per_token(dsv3, 0)
    assert float(gained) == (2 + 2) * dsv3.mla.kv_lora_rank
    # a shared expert is an MLP beside the routed ones: its FC1 and activation outputs, and under FP8
    # its own quantized copy of the norm output (the BF16 router keeps the BF16 one), in the 58 of 61
    # layers that are MoE layers
    alone = dsv3.model_copy(update={"moe": dsv3.moe.model_copy(update={"shared_experts": 0})})
    fs = dsv3.moe.expert_ffn_hidden
    for dtype, linear in (("bf16", 2), ("fp8", 1)):
        r = precision(dtype)
        extra = activation_bytes_per_token(dsv3, 0, recipe=r) - activation_bytes_per_token(alone, 0, recipe=r)
        assert float(extra) == pytest.approx(
            58 / 61 * (2 * 2 * fs + linear * fs + (2 - linear) * dsv3.hidden)
        )
    # its three dense layers hold a dense MLP's activations (the 18432-wide FFN), not a MoE layer's
    dense = dsv3.model_copy(update={"moe": dsv3.moe.model_copy(update={"dense_layers": 0})})
    h, f, k, fe = dsv3.hidden, dsv3.ffn_hidden, dsv3.moe.top_k, dsv3.moe.expert_ffn_hidden
    moe_mlp = 2 * h + k * (2 * h + 3 * 2 * fe) + 3 * 2 * fe
    difference = activation_bytes_per_token(dsv3, 0) - activation_bytes_per_token(dense, 0)
    assert float(difference) == pytest.approx(3 / 61 * ((2 * h + 3 * 2 * f) - moe_mlp))


def test_context_parallel_ring_carries_every_heads_key_and_value():
    """Ring attention passes K and V: for MLA every head's up-projected key (d_qk = 192) and value, so
    the exchange grows as d_qk + d_v (it once took hidden / heads = 56 for both)."""
    net = model("deepseek-v3")
    wide = net.model_copy(update={"mla": net.mla.model_copy(update={"v_head_dim": 320})})
    x = layouts(ep=8, cp=4, dp=32, global_batch=256, seq=32768, zero=1)
    narrow_s, wide_s = (train_step(m, cluster("dgx-h100", 16), x)["cp_comm_s"] for m in (net, wide))
    assert float(wide_s / narrow_s) == pytest.approx((192 + 320) / (192 + 128), rel=0.01)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_recompute_modules_free_their_outputs_and_run_their_kernels_again(dtype):
    """Megatron's output-discarding recomputation: ``mla_up_proj`` frees every head's Q, K and V
    (BF16 under any recipe), ``layernorm`` the two norm outputs (2 x 2h) and ``moe_act`` the experts'
    activation output (top_k x 2f), where the linear layers hold those outputs (BF16; under FP8 they
    hold their own quantized copies, so only the BF16 router's input is freed). Its whole-module
    checkpoints keep their input and free what the module holds past it: ``mlp`` a dense layer's FC1
    and activation outputs (under FP8 the checkpoint's BF16 input replaces FC1's 1-byte copy),
    ``shared_experts`` theirs, ``moe`` the experts' permuted copies and insides with the shared
    experts', each in the layers of its kind (DeepSeek-V3: 3 dense, 58 MoE). Each costs its kernels'
    forward again (``moe`` its dispatch and combine too) and nothing where the layer is recomputed in
    full."""
    from commodel.workloads.model.transformer import activation_bytes_per_token, recompute_flops_per_token

    net = model("deepseek-v3")
    h, heads, a, k, f = net.hidden, net.heads, net.mla, net.moe.top_k, net.moe.expert_ffn_hidden
    bf16, linear, moe = dtype == "bf16", 2 if dtype == "bf16" else 1, 58 / 61
    shared = 2 * 2 * f + linear * f + (2 - linear) * h
    freed = {
        "mla_up_proj": 2 * heads * (2 * (a.qk_nope_head_dim + a.qk_rope_head_dim) + a.v_head_dim),
        "layernorm": 4 * h if bf16 else moe * 2 * h,  # under FP8 the MoE router's BF16 input only
        "moe_act": moe * k * 2 * f if bf16 else 0,
        "mlp": (1 - moe) * (2 * 2 * net.ffn_hidden + linear * net.ffn_hidden - (2 - linear) * h),
        "shared_experts": moe * shared,
        "moe": moe * (k * (linear * h + 2 * 2 * f + linear * f) + shared),
    }
    stored = activation_bytes_per_token(net, 0, recipe=precision(dtype))
    for name, saved in freed.items():
        after = activation_bytes_per_token(net, 0, recipe=precision(dtype), modules=RECOMPUTE_MODULES[name])
        assert float(stored - after) == pytest.approx(saved), name
    both = RECOMPUTE_MODULES["moe"] + RECOMPUTE_MODULES["moe_act"] + RECOMPUTE_MODULES["shared_experts"]
    covered = activation_bytes_per_token(net, 0, recipe=precision(dtype), modules=both)
    assert float(stored - covered) == pytest.approx(freed["moe"])  # the MoE checkpoint covers the other two
    everything = sum(RECOMPUTE_MODULES.values())
    assert activation_bytes_per_token(net, 2, modules=everything) == activation_bytes_per_token(net, 2)

    x = layouts(pp=8, ep=32, dp=32, global_batch=512, seq=4096, zero=1)
    c = cluster("dgx-h100", 32)
    steps = {
        m: train_step(net, c, dataclasses.replace(x, recompute_modules=np.asarray(float(m))), dtype)
        for m in (0, 4, 7)
    }
    assert steps[0]["step_time_s"] < steps[4]["step_time_s"] < steps[7]["step_time_s"]
    assert steps[4]["memory_per_gpu_bytes"] < steps[0]["memory_per_gpu_bytes"]
    full = dataclasses.replace(x, recompute=np.asarray(2.0))
    assert (
        train_step(net, c, dataclasses.replace(full, recompute_modules=np.asarray(7.0)), dtype)["step_time_s"]
        == train_step(net, c, full, dtype)["step_time_s"]
    )
    up = a.q_lora_rank * heads * (a.qk_nope_head_dim + a.qk_rope_head_dim) + a.kv_lora_rank * heads * (
        a.qk_nope_head_dim + a.v_head_dim
    )
    assert float(recompute_flops_per_token(net, 4096, 0, modules=4)) == 2 * net.layers * up
    experts = 58 * (net.moe.experts * h + (k + 1) * 3 * h * f)  # router, routed and shared experts
    assert float(recompute_flops_per_token(net, 4096, 0, modules=16)) == 2 * experts
    assert float(recompute_flops_per_token(net, 4096, 0, modules=8)) == 2 * 3 * 3 * h * net.ffn_hidden
    # the MoE layer's checkpoint dispatches and combines its forward again: 3 all-to-all passes, not 2
    again = train_step(net, c, dataclasses.replace(x, recompute_modules=np.asarray(16.0)), dtype)
    assert float(again["ep_comm_s"] / steps[0]["ep_comm_s"]) == pytest.approx(1.5)
    assert again["memory_per_gpu_bytes"] < steps[0]["memory_per_gpu_bytes"]


def test_recomputing_the_mlp_runs_its_gemms_and_its_tensor_parallel_collectives_again():
    """``--recompute-modules mlp`` on a dense model: the MLP's forward runs again in the backward, its
    sequence-parallel gather and reduce-scatter with it (one of the layer's two pairs: half what full
    recomputation adds, each pair's forward two of the five collectives it runs without, the backward
    gathering its column GEMM's input again), for less memory than none and more than full."""
    base = dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=8, pp=4, global_batch=256, seq=8192,
                sequence_parallel=True)  # fmt: skip
    none, mlp, full = train(**base), train(**base, recompute_modules="mlp"), train(**base, recompute="full")
    tp = [r["breakdown"]["tp_comm"] for r in (none, mlp, full)]
    assert tp[2] - tp[0] == pytest.approx(2 * (tp[1] - tp[0]))
    assert (
        3.5 / 3 < tp[1] / tp[0] < 2.5 / 2 and 4 / 3 < tp[2] / tp[0] < 3 / 2
    )  # as gathers and reductions weigh
    assert none["step_time_s"] < mlp["step_time_s"] < full["step_time_s"]
    assert full["memory_per_gpu_bytes"] < mlp["memory_per_gpu_bytes"] < none["memory_per_gpu_bytes"]
    net = model("llama3-70b")
    extra = (mlp["hw_tflops_per_gpu"] / mlp["tflops_per_gpu"] - 1) * model_flops_per_token(net, 8192)
    assert float(extra) == pytest.approx(2 * net.layers * 3 * net.hidden * net.ffn_hidden)


def test_torchtitans_per_op_checkpointing_runs_every_second_matmul_and_keeps_what_it_saves():
    """torchtitan's per-op policy (``ops``): the key, attention-output and up projections run again
    (the matmul FLOPs of wk, wo and w3, about a third of a block's forward), with the norms and the
    activation; what it keeps is the block's input and the outputs it saves, less than without
    recomputation and more than with full. Its step lies between none and full, as its memory does."""
    from commodel.workloads.model.transformer import activation_bytes_per_token, recompute_flops_per_token

    net = model("llama3-8b")
    h, kv, f = net.hidden, net.n_kv_heads * net.d_head, net.ffn_hidden
    ops = RECOMPUTE_MODULES["ops"]
    again = float(recompute_flops_per_token(net, 8192, 0, modules=ops))
    assert again == 2 * net.layers * h * (kv + h + f)
    kept = 2 * (2 * h + net.heads * net.d_head + kv + net.heads * net.d_head + f)
    assert float(activation_bytes_per_token(net, 0, modules=ops)) == pytest.approx(kept)
    assert activation_bytes_per_token(net, 2) < kept < activation_bytes_per_token(net, 0)
    base = dict(
        model="llama3-8b", system="dgx-h100", gpus=8, global_batch=16, micro_batch=2, seq=8192, zero=3
    )
    none, titan, full = (model_step(**base, recompute=r, **m) for r, m in
                         (("none", {}), ("none", {"recompute_modules": "ops"}), ("full", {})))  # fmt: skip
    assert none["step_time_s"] < titan["step_time_s"] < full["step_time_s"]
    assert full["memory_per_gpu_bytes"] < titan["memory_per_gpu_bytes"] < none["memory_per_gpu_bytes"]
    with pytest.raises(CommodelError, match=r"ops .*needs a dense model"):
        train(
            model="qwen3-30b-a3b", system="dgx-h100", gpus=8, ep=8, recompute="none", recompute_modules="ops"
        )
    with pytest.raises(CommodelError, match="give it alone"):
        train(**base, recompute="none", recompute_modules="ops,layernorm")
    with pytest.raises(CommodelError, match="recompute none"):
        train(**base, recompute="selective", recompute_modules="ops")


def test_recompute_modules_are_checked_against_the_model():
    with pytest.raises(CommodelError, match="mla_up_proj needs multi-head latent attention"):
        train(model="llama3-8b", system="dgx-h100", gpus=8, recompute_modules="mla_up_proj")
    with pytest.raises(CommodelError, match="moe_act needs a mixture-of-experts model"):
        train(model="llama3-8b", system="dgx-h100", gpus=8, recompute_modules="layernorm,moe_act")
    with pytest.raises(CommodelError, match="mlp needs dense MLP layers"):
        train(model="qwen3-30b-a3b", system="dgx-h100", gpus=8, ep=8, recompute_modules="mlp")
    with pytest.raises(CommodelError, match="moe needs a mixture-of-experts model"):
        train(model="llama3-8b", system="dgx-h100", gpus=8, recompute_modules="moe")
    with pytest.raises(CommodelError, match="shared_experts needs shared experts"):
        train(model="qwen3-30b-a3b", system="dgx-h100", gpus=8, ep=8, recompute_modules="moe,shared_experts")
    with pytest.raises(CommodelError, match=re.escape("did you mean 'moe_act'")):
        train(model="qwen3-30b-a3b", system="dgx-h100", gpus=8, ep=8, recompute_modules="moe-act")
    with pytest.raises(CommodelError, match="core_attn is --recompute selective"):
        train(model="qwen3-30b-a3b", system="dgx-h100", gpus=8, ep=8, recompute_modules="core_attn,moe_act")
    stated = training_job(model="qwen3-30b-a3b", system="dgx-h100", recompute_modules=" moe_act , layernorm")
    assert stated.recompute_modules == "moe_act,layernorm"
    for listed, why in (
        ("moe_act,layernorm,moe_act", "names moe_act more than once"),
        ("moe_act,", "empty name"),
    ):
        with pytest.raises(CommodelError, match=why):  # as --cuda-graphs and --offload refuse them
            training_job(model="qwen3-30b-a3b", system="dgx-h100", recompute_modules=listed)
    job = dict(model="deepseek-v3", system="hgx-h800", gpus=2048, pp=16, ep=64, global_batch=15360, seq=4096,
               dtype="fp8", recompute="auto")  # fmt: skip
    lean, fat = train(**job, recompute_modules="mla_up_proj"), train(**job, advise=True)
    assert lean["recompute"] != fat["recompute"] and lean["step_time_s"] < fat["step_time_s"]
    # the estimate that recomputes or offloads whole layers to fit names the modules that do it for less
    (hint,) = (note for note in fat["notes"] if note.startswith("--recompute-modules "))
    named = train(**job, recompute_modules=hint.split()[1], advise=True)
    assert "mla_up_proj" in hint.split()[1] and hint.endswith(f"-> {named['step_time_s']:.4g} s per step)")
    assert named["step_time_s"] <= lean["step_time_s"]
    assert not any("--recompute-modules" in note for note in named["notes"])
    dense = train(
        model="llama3-8b",
        system="dgx-h100",
        gpus=8,
        global_batch=64,
        dtype="fp8",
        recompute="auto",
        advise=True,
    )
    assert not any("--recompute-modules" in note for note in dense["notes"])
    assert not any("--recompute-modules" in note for note in train(**job)["notes"])  # advice is asked for


def test_stage_split_follows_megatrons_first_and_last_stage_layers():
    from commodel.workloads.parallel.layout import stage_split

    dsv3 = model("deepseek-v3")  # 61 layers
    cases = [
        ({"pp": 16}, (4, 4, 1)),  # ceil(61 / 16) on 15 stages, the rest (1) last: 61 in all
        ({"pp": 16, "last_stage_layers": 1}, (4, 4, 1)),
        ({"pp": 8, "first_stage_layers": 5}, (5, 8, 8)),
        ({"pp": 2, "first_stage_layers": 30}, (30, 31, 31)),
        ({"pp": 1}, (61, 61, 61)),
    ]
    for layout, expected in cases:
        assert tuple(float(v) for v in stage_split(dsv3, layouts("deepseek-v3", **layout))) == expected
    # Llama 3 405B's balanced pipeline: 126 layers and the two ends in 16 stages of 8 places
    llama = layouts("llama3-405b", pp=16, vpp=8, ends_as_layers=True)
    assert tuple(float(v) for v in stage_split(model("llama3-405b"), llama)) == (7, 8, 7)
    # one call over layouts of every kind splits each as it would alone
    mixed = layouts("llama3-405b", pp=np.array([16, 16, 4]), vpp=np.array([8, 1, 1]),
                    ends_as_layers=np.array([True, False, False]), last_stage_layers=np.array([np.nan, np.nan, 30]))  # fmt: skip
    split = [[7, 8, 7], [8, 8, 6], [32, 32, 30]]  # 126 layers in every split
    assert np.array(stage_split(model("llama3-405b"), mixed)).T.tolist() == split
    texts = stage_layers_text(model("llama3-405b"), mixed).tolist()
    assert texts == [",".join(["7", *["8"] * 14, "7"]), ",".join(["8"] * 15 + ["6"]), "32,32,32,30"]
    assert stage_layers_text(dsv3, layouts("deepseek-v3", pp=1)) == ""


def test_one_layer_chunks_shrink_the_405b_bubble_to_the_papers_loss():
    """Llama 3 405B on 8K and 16K H100 at the same 16M-token batch (the paper's Table 4: 430 and 400
    TFLOP/s, 7% lost): at the paper's one-layer chunks (vpp 8, the embedding and the loss in their
    own) the bubble is (pp - 1) / (vpp m) of the work and the model loses 4-10%; at vpp 2 it loses
    more than twice that."""
    from commodel.validate.runs import runs

    def loss(**changes):
        small, large = (
            model_step(runs().training[f"llama3-405b-{g}"].job.model_copy(update=changes))
            for g in ("8k", "16k")
        )
        return 1 - large["tflops_per_gpu"] / small["tflops_per_gpu"], small

    chunks, two = loss(), loss(vpp=2, ends_as_layers=False)
    assert 0.04 < chunks[0] < 0.10 and two[0] > 2 * chunks[0]
    assert chunks[1]["breakdown"]["bubble"] < two[1]["breakdown"]["bubble"] / 3


def test_moving_layers_off_the_last_stage_pays_for_its_logits():
    """Llama 3 8B on pp 4: the last stage's logits (a 128K vocabulary) are worth about two layers, so
    5 layers there and 9 on the others beat the even 8; a multi-token prediction module adds a layer
    and the logits again to the last stage, counted in the model FLOPs."""
    base = dict(model="llama3-8b", system="dgx-h100", gpus=32, pp=4, global_batch=256)
    even, moved = train(**base, advise=True), train(**base, last_stage_layers=5, advise=True)
    assert moved["step_time_s"] < even["step_time_s"]
    assert moved["stage_imbalance"] < even["stage_imbalance"]
    mtp, mtp_moved = train(**base, mtp_layers=1), train(**base, last_stage_layers=5, mtp_layers=1)
    assert mtp["step_time_s"] > even["step_time_s"] and mtp_moved["step_time_s"] < mtp["step_time_s"]
    net = model("llama3-8b")
    extra = model_flops_per_token(net, 8192, mtp=1) - model_flops_per_token(net, 8192)
    layer = (model_flops_per_token(net, 8192) - 6 * net.vocab * net.hidden) / net.layers
    assert extra == pytest.approx(layer + 12 * net.hidden**2 + 6 * net.vocab * net.hidden)
    assert mtp["tflops_per_gpu"] * mtp["step_time_s"] > even["tflops_per_gpu"] * even["step_time_s"]
    # the estimate says which split balances the stages, found by pricing every choice
    assert any("--last-stage-layers 5 balances it" in note for note in even["notes"])
    assert not any("--last-stage-layers" in note for note in moved["notes"])


def test_the_even_split_of_an_uneven_model_is_megatron_bridges_own_layout():
    """DeepSeek-V3 (61 layers) with its prediction module on pp 4 x vp 4: ceil(61 / 4) = 16 layers on
    the first three stages and the rest, 13, on the last, the split Megatron-Bridge's recipe writes
    (``Et*4|(t*4|)*14tmL``); balanced already, so no lighter last stage is advised."""
    job = dict(
        model="deepseek-v3", system="gb200-nvl72", gpus=256, pp=4, vpp=4, ep=64, etp=1, global_batch=4096
    )
    even = train(**job, mtp_layers=1, recompute="auto", advise=True)
    assert even["stage_layers"] == "16,16,16,13"
    assert not any("--last-stage-layers" in note for note in even["notes"])
    assert (
        train(**job, pipeline_layout="Et*4|(t*4|)*14tmL", recompute="auto")["stage_layers"] == "16,16,16,13"
    )


def test_breakdown_sums_to_the_step():
    r = train(
        model="mixtral-8x7b", system="dgx-h100", gpus=64, tp=2, pp=4, ep=4, global_batch=64, seq=4096,
        sequence_parallel=True, zero=1, cp=2, overlap="sm-partition",
    )  # fmt: skip
    assert sum(r["breakdown"].values()) == pytest.approx(r["step_time_s"])
    assert set(r["breakdown"]) == set(BREAKDOWN)
    assert r["breakdown"]["ep_comm"] > 0 and r["breakdown"]["cp_comm"] >= 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": "llama3-70b", "gpus": 48, "tp": 3}, "heads (64) must be divisible by tp"),
        ({"dp": 5}, "tp x pp x cp x dp must equal the number of GPUs"),
        ({"tp": 8, "pp": 16}, "tp x pp x cp exceeds the number of GPUs"),
        ({"global_batch": 100}, "global batch must be a multiple"),
        ({"ep": 2}, "needs a mixture-of-experts model"),
        ({"vpp": 2, "pp": 1, "dp": 8}, "need pipeline parallelism"),
        ({"schedule": "dualpipe"}, "DualPipe needs an even pp of at least 2"),
        ({"schedule": "dualpipe", "pp": 4, "vpp": 2}, "DualPipe has no virtual stages"),
        ({"schedule": "dualpipe", "pp": 4, "global_batch": 4}, "micro-batches even, at least 2 x pp"),
        ({"last_stage_layers": 4}, "first and last stage layers need pipeline parallelism (pp > 1)"),
        ({"pp": 4, "offload_layers": 8}, "CPU offloading needs one pipeline stage"),
        ({"offload_layers": 8, "recompute": "full"}, "CPU offloading runs without recomputation"),
        ({"offload_layers": 96}, "offloaded layers must be fewer than the model's 96"),
        (
            {"system": "a40-pcie-8", "gpus": 8, "tp": 4, "offload_layers": 8},
            "a40-pcie-8's record does not state",
        ),
        (
            {"pp": 4, "first_stage_layers": 48, "last_stage_layers": 48},
            "an equal whole number (>= 1) of the 96",
        ),
        ({"pp": 4, "last_stage_layers": 5}, "an equal whole number (>= 1) of the 96"),
        ({"ends_as_layers": True}, "the embedding and loss as layers need 1F1B pipeline parallelism"),
        ({"pp": 4, "ends_as_layers": True, "last_stage_layers": 23}, "and no first or last stage layers"),
        ({"pp": 4, "vpp": 2, "ends_as_layers": True}, "layers + 2 (98) must be divisible by pp x vpp"),
        ({"pp": 8, "vpp": 13, "ends_as_layers": True}, "pp x vpp must not exceed the 96 layers"),
    ],
)
def test_bad_layouts_are_rejected(changes, message):
    base = dict(model="gpt3-175b", system="dgx-h100", gpus=64, tp=8, pp=1, global_batch=64)
    with pytest.raises(CommodelError, match=re.escape(message)):
        train(**{**base, **changes})


def test_virtual_stages_take_an_uneven_split_that_divides_into_their_chunks():
    """Megatron-Core splits stated first and last stage layers into vpp chunks when each stage's
    layers divide by vpp: 18, 22, 22, 18 of Llama 3 70B's 80 layers in chunks of 9 and 11; the
    busiest stage sets the pace, under interleaving as without it."""
    job = dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=4, pp=4, global_batch=256, dtype="fp8")
    job |= dict(sequence_parallel=True, vpp=2)
    even, uneven = train(**job), train(**job, first_stage_layers=18, last_stage_layers=18)
    assert (even["stage_layers"], uneven["stage_layers"]) == ("20,20,20,20", "18,22,22,18")
    even, uneven = model_step(**job), model_step(**job, first_stage_layers=18, last_stage_layers=18)
    assert uneven["step_time_s"] > even["step_time_s"]


def test_a_tensor_parallel_job_that_fits_only_with_sequence_parallelism_says_so():
    recipe = dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=4, pp=8, vpp=5, global_batch=128)
    off, on = (train(**recipe, dtype="fp8", sequence_parallel=sp) for sp in (False, True))
    assert not off["fits"] and any("--sequence-parallel" in note for note in off["notes"])
    assert on["fits"] and not any("--sequence-parallel" in note for note in on["notes"])


def test_the_llama3_70b_recipe_fits_an_h100_without_recomputation():
    """Published recipes run TP 4, PP 8, VP 5, micro-batch 1 at 8K on 64 H100 in 80 GB (80 GiB: HBM's
    unit). In FP8 it fits with FP32 gradients (66.5 GiB); in BF16 with BF16 gradients (71.6 GiB,
    above 90% of a decimal 80 GB), while FP32 gradients (76.0 GiB) leave less than the reserve
    (74 GiB usable)."""
    recipe = dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=4, pp=8, vpp=5, global_batch=128)
    recipe |= dict(seq=8192, sequence_parallel=True, recompute="none")
    fp8, bf16_grads = train(**recipe, dtype="fp8"), train(**recipe, grad_reduce_in_fp32=False)
    assert fp8["fits"] and bf16_grads["fits"] and bf16_grads["memory_per_gpu_bytes"] > 80e9 * 0.9
    fp32_grads = train(**recipe)["memory_per_gpu_bytes"]
    held = sum(stage_parameters(model("llama3-70b"), layouts(tp=4, pp=8, vpp=5))[:2])  # the first stage's
    assert fp32_grads - bf16_grads["memory_per_gpu_bytes"] == pytest.approx(2 * held)  # 2 B more each
    assert fp32_grads > 80 * 2**30 and not train(**recipe)["fits"]  # the reserve included


def test_the_llama3_405b_paper_layout_fits_the_80_gib_it_ran_in():
    """The Llama 3 paper trained 405B at tp 8, pp 16 with one-layer chunks, 8K tokens, ZeRO-2 and no
    activation checkpointing on 80 GiB H100s: the model must find room for it. A reserve of a fixed
    part (context, NCCL, workspaces) and a share (fragmentation) leaves a GB300 more of its 288 GiB
    than an H100 of its 80 in proportion, and never less in absolute terms."""
    job = dict(model="llama3-405b", system="dgx-h100", gpus=8192, tp=8, pp=16, vpp=8, ends_as_layers=True)
    job |= dict(global_batch=2048, seq=8192, sequence_parallel=True, zero=2)
    result = train(**job)
    assert result["fits"] and result["memory_per_gpu_bytes"] > 0.9 * 80 * 2**30
    categories = ("weights", "gradients", "optimizer", "activations", "logits", "reserved")
    assert sum(result[f"memory_{c}_bytes"] for c in categories) == pytest.approx(
        result["memory_per_gpu_bytes"]
    )
    h100, gb300 = (gib * 2**30 - reserved_memory(gib * 2**30) for gib in (80, 288))
    assert gb300 / (288 * 2**30) > h100 / (80 * 2**30) and 288 * 2**30 - gb300 > 80 * 2**30 - h100


#: Megatron-Bridge's H100 performance recipes (``perf_recipes/*/h100``, release 0.6.2) as they state
#: them: BF16, BF16 gradients, sequence parallelism with tp, no recomputation beyond the modules listed.
H100_RECIPES = {
    "llama3-8b": dict(gpus=8, cp=2, global_batch=128),
    "llama3-70b": dict(gpus=64, tp=4, pp=4, cp=2, vpp=5, global_batch=256),
    "llama3-405b": dict(gpus=512, tp=8, pp=8, cp=2, vpp=8, global_batch=768, ends_as_layers=True),
    "deepseek-v3": dict(
        gpus=1024, tp=2, pp=8, vpp=4, ep=64, etp=1, global_batch=16384, recompute_modules="mla_up_proj,mlp"
    ),
    "gpt-oss-120b": dict(
        gpus=64, pp=4, ep=8, etp=1, global_batch=1280, recompute_modules="layernorm,moe_act"
    ),
    "qwen3-235b-a22b": dict(
        gpus=256, tp=2, pp=8, vpp=4, ep=32, etp=1, global_batch=8192, ends_as_layers=True
    ),
}


@pytest.mark.parametrize("name", H100_RECIPES)
def test_megatron_bridges_h100_recipes_fit_the_80_gib_they_run_in(name):
    """NVIDIA runs these layouts on 80 GiB H100s without recomputing whole layers, so the memory
    model must find room for each (they take 50-66 GiB of it) without ``auto``."""
    job = H100_RECIPES[name] | dict(
        model=name, system="dgx-h100", grad_reduce_in_fp32=False, recompute="none"
    )
    result = train(**job, sequence_parallel=job.get("tp", 1) > 1)
    assert result["fits"] and result["memory_per_gpu_bytes"] > 0.5 * 80 * 2**30


def test_fp32_gradients_take_twice_the_bytes_to_hold_and_to_reduce():
    """Megatron's FP32 gradient buffer (its default under BF16) holds 4 B per parameter where BF16
    gradients take 2 (not sharded under ZeRO-1), and its reduce-scatter carries twice the bytes; the
    parameter all-gather does not change."""
    job = dict(model="llama3-8b", system="dgx-h100", gpus=16, global_batch=32, zero=1, overlap="serial")
    bf16, fp32 = (model_step(**job, grad_reduce_in_fp32=on) for on in (False, True))
    held = sum(parameters(model("llama3-8b"))[k] for k in ("layers", "embedding"))
    assert fp32["memory_per_gpu_bytes"] - bf16["memory_per_gpu_bytes"] == pytest.approx(2 * held)
    assert 1 < fp32["breakdown"]["dp_comm"] / bf16["breakdown"]["dp_comm"] < 2


def test_bf16_moments_take_two_bytes_each_of_the_sharded_optimizer_state():
    """Megatron's precision-aware optimizer with BF16 moments (DeepSeek-V3; Megatron-Bridge's recipe
    for it): 8 B of optimizer state per parameter where FP32 moments take 12, sharded over the data-
    parallel ranks under ZeRO-1, and 8 B less read and written per local parameter in the step."""
    job = dict(model="llama3-8b", system="dgx-h100", gpus=16, global_batch=32, zero=1, overlap="serial")
    fp32, bf16 = (model_step(**job, bf16_moments=on) for on in (False, True))
    held = sum(parameters(model("llama3-8b"))[k] for k in ("layers", "embedding")) / 16  # dp 16 shards
    assert fp32["memory_per_gpu_bytes"] - bf16["memory_per_gpu_bytes"] == pytest.approx(4 * held)
    assert bf16["breakdown"]["optimizer"] / fp32["breakdown"]["optimizer"] == pytest.approx(26 / 34)
    assert bf16["breakdown"]["compute"] == fp32["breakdown"]["compute"]


def test_a_rejected_job_names_the_layout_it_resolved_to():
    with pytest.raises(CommodelError) as error:
        train(model="llama3-8b", system="gb200-nvl72", gpus=72, micro_batch=2)
    assert "(72 GPUs, tp=1 pp=1 cp=1 dp=72 ep=1, micro batch 2 of global batch 1024)" in str(error.value)


def test_unknown_names_get_suggestions():
    with pytest.raises(CommodelError, match="did you mean 'llama3-70b'"):
        train(model="llama3-70", system="dgx-h100", gpus=8)
    with pytest.raises(CommodelError, match="did you mean 'sm-partition'"):
        train(model="llama3-8b", system="dgx-h100", gpus=8, global_batch=8, overlap="sm-partitoin")


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["llama3-8b", "qwen2-7b", "megatron-22b"]),
    st.sampled_from(["dgx-a100", "dgx-h100", "mi300x-8", "frontier-node"]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2]),
    st.sampled_from(STRATEGIES),
)
def test_more_data_parallel_gpus_never_lower_throughput(name, system, tp, nodes, strategy):
    """At a fixed per-GPU batch, growing dp never lowers aggregate tokens/s."""
    net = model(name)
    if net.heads % tp:
        return
    c = cluster(system, 8)
    per_node = c.gpus_per_node // tp
    dps = np.array([1, 2, 4, 8, 16, 32]) * per_node
    x = layouts(tp=tp, dp=dps, global_batch=dps * 4, seq=2048, zero=1)
    tokens = train_step(net, c, x, strategy=strategy)["tokens_per_s"]
    assert np.all(np.diff(tokens) >= -1e-9 * tokens[:-1])


@settings(max_examples=60, deadline=None)
@given(
    st.floats(1e-6, 1.0),
    st.floats(0, 1.0),
    st.floats(1.0, 3.0),
    st.floats(0, 1.0),
    st.floats(0, 1e-3),
    st.floats(0, 2e12),
    st.integers(0, 20),
)
def test_overlap_is_never_below_ideal_nor_above_both_slowed_throughout(
    compute, comm, tail, mem_share, wave, traffic, calls
):
    """Overlapped, a window takes at least the longer side; it may exceed serial where the two slow
    each other enough, but never the two run one after the other each slowed all the way: compute
    by its SMs' tail and the memory latency's largest rise, the collective by that rise."""
    w = Window(
        np.asarray(compute), np.asarray(compute * tail), np.asarray(compute * mem_share), np.asarray(wave)
    )
    times = {
        s: float(window_time(s, w, comm, traffic_Bps=traffic, memory=HBM, calls=calls, in_network=True))
        for s in STRATEGIES
    }
    worst = max(1 / (1 - HBM.ceiling), 2.0)  # the latency's cap, or two full loads sharing the bandwidth
    for s, t in times.items():
        assert max(compute, comm) * (1 - 1e-12) <= t <= (compute * tail + comm) * worst * (1 + 1e-12), s
    assert times["ideal"] == pytest.approx(max(compute, comm))
    assert times["serial"] == pytest.approx(compute + comm)


def test_every_overlap_strategy_is_no_slower_than_serial_end_to_end():
    base = dict(model="llama3-8b", system="dgx-h100", gpus=16, global_batch=64, seq=4096, zero=3)
    serial = train(**base)["step_time_s"]
    for strategy in STRATEGIES:
        assert train(**base, overlap=strategy)["step_time_s"] <= serial * (1 + 1e-12)


def test_a_strategy_per_layout_prices_each_as_its_strategy_alone():
    """Layouts under different overlap strategies priced in one call (as a sweep's groups are) get
    the numbers each strategy gives them alone, bit for bit, with recomputation auto and ZeRO-3."""
    rng = np.random.default_rng(3)
    n = 60
    tp, pp = rng.choice([1, 2, 8], n), rng.choice([1, 2], n)
    x = layouts(
        tp=tp, pp=pp, dp=16 / (tp * pp), micro_batch=rng.choice([1, 2], n), global_batch=64, seq=4096,
        recompute=rng.choice(["none", "auto"], n), sequence_parallel=tp > 1, zero=rng.choice([1, 3], n),
    )  # fmt: skip
    net, c = model("llama3-8b"), cluster("dgx-h100", 2)
    strategies = np.asarray(STRATEGIES, dtype=object)[rng.integers(0, len(STRATEGIES), n)]
    together = train_step(net, c, x, strategy=strategies)
    for name in STRATEGIES:
        rows = strategies == name
        alone = train_step(net, c, x.select(rows), strategy=name)
        for key, values in alone.items():
            assert np.array_equal(values, together[key][rows], equal_nan=True), (name, key)


def test_the_parameter_all_gather_moves_the_recipes_primary_weights():
    """ZeRO's parameter all-gather carries what the optimizer's primary weights are: 2 B per parameter
    in BF16, 1 B under per-tensor FP8 and 128 x 128-block FP8 (Megatron's --fp8-param-gather: one
    copy, transposed after the gather), both 1 x 32-block copies with their scales under MXFP8; the
    gradients' reduce-scatter stays BF16. Without --fp8-param-gather the BF16 weights are gathered and
    held beside their FP8 copies (4 B per parameter). Llama 3 70B under FSDP on 64 GB200 (the
    Megatron-Bridge recipe): per-tensor FP8 exposes less data-parallel time than MXFP8, and less with
    FP8 parameters than without, in less memory; BF16 ignores the setting."""
    from commodel.comm.fabric import fabric_of
    from commodel.workloads.parallel.groups import collective, group
    from commodel.workloads.training.data_parallel import gradient_sync

    c = cluster("gb200-nvl72", 16)
    fab = fabric_of(c)
    where = group(np.asarray(64.0), 1, c.domain_gpus)
    params, sharded = np.asarray(1e9), np.asarray(True)
    bf16 = gradient_sync(params, 2.0, precision("bf16").gathered_bytes, sharded, where, fab)
    for name, gathered in (("fp8", 1.0), ("fp8-block", 1 + 4 / 128**2), ("mxfp8", 2 + 2 / 32)):
        rs, _, ag, _ = gradient_sync(params, 2.0, precision(name).gathered_bytes, sharded, where, fab)
        assert rs == bf16[0], name
        assert ag == collective("allgather", params * gathered, where, fab)[0], name
    job = dict(model="llama3-70b", system="gb200-nvl72", gpus=64, micro_batch=2, global_batch=256, zero=3)
    fp8, blocks = model_step(**job, dtype="fp8"), model_step(**job, dtype="mxfp8")
    bf16_weights = model_step(**job, dtype="fp8", fp8_param_gather=False)
    assert fp8["breakdown"]["dp_comm"] < blocks["breakdown"]["dp_comm"]
    assert fp8["breakdown"]["dp_comm"] < bf16_weights["breakdown"]["dp_comm"]
    assert fp8["memory_per_gpu_bytes"] < bf16_weights["memory_per_gpu_bytes"]
    plain = [model_step(**job, fp8_param_gather=on) for on in (True, False)]
    assert plain[0]["step_time_s"] == plain[1]["step_time_s"]
    assert plain[0]["memory_per_gpu_bytes"] == plain[1]["memory_per_gpu_bytes"]


def test_faster_gpu_is_never_slower():
    c = cluster("dgx-h100", 2)
    x = layouts(tp=8, dp=2, global_batch=16, seq=4096, sequence_parallel=True)
    net = model("llama3-70b")
    faster_gpu = c.gpu.model_copy(
        update={
            "peak_flops": {
                k: v.model_copy(update={"value": 2 * v.value}) for k, v in c.gpu.peak_flops.items()
            },
            "memory_bandwidth": c.gpu.memory_bandwidth.model_copy(
                update={"value": 2 * c.gpu.memory_bandwidth.value}
            ),
        }
    )
    faster = dataclasses.replace(c, gpu=faster_gpu)
    assert train_step(net, faster, x)["step_time_s"] < train_step(net, c, x)["step_time_s"]


@pytest.mark.parametrize("system", ["dgx-h100", "dgx-b200"])
def test_a_faster_network_slows_no_step_beyond_the_queueing_of_its_burst(system):
    """The same layouts over 400G RoCE, 400G InfiniBand (lower latency) and 800G InfiniBand, under
    every overlap strategy and ZeRO stage, dense and MoE: no step gets more than 0.5% slower. A
    collective beside compute costs it the latency its HBM load adds; a faster network moves the
    same bytes in less time at a higher load, and a queue's wait grows faster than its load
    (``1 / (1 - rho)``), so the burst may cost a little more (0.24% at most here, B200 at ZeRO 1)."""
    rng = np.random.default_rng(3)
    for name in ("llama3-8b", "llama3-70b", "qwen3-30b-a3b"):
        net, n = model(name), 64
        tp, pp = rng.choice([1, 2, 4, 8], n), rng.choice([1, 2, 4], n)
        ep = rng.choice([1, 2, 4, 8], n) if net.moe else np.ones(n, int)
        vpp = np.where(pp > 1, rng.choice([1, 2], n), 1)
        x = layouts(tp=tp, pp=pp, dp=128 // (tp * pp), ep=ep, vpp=vpp, global_batch=512, seq=4096,
                        zero=rng.choice([0, 1, 3], n), sequence_parallel=tp > 1)  # fmt: skip
        for strategy in STRATEGIES:
            steps = [
                train_step(net, cluster(system, 16, scale_out=fabric), x, strategy=strategy)["step_time_s"]
                for fabric in ("roce-400g", "ib-ndr", "ib-xdr")
            ]
            assert np.all(steps[1] <= steps[0] * 1.005) and np.all(steps[2] <= steps[1] * 1.005)


def test_every_shipped_model_trains():
    """On one node, every shipped model has a step where it fits, and where it does not (the largest:
    tens of billions of parameters and more on 8 GPUs) its memory, more than the GPU holds, and no step."""
    held = cluster("dgx-h100").gpu.memory_capacity.value
    for name, net in models().items():
        tp = max(t for t in (1, 2, 4, 8) if net.heads % t == 0 and net.n_kv_heads % t == 0)
        job = dict(
            model=name, system="dgx-h100", gpus=8, tp=tp, global_batch=8, seq=2048, sequence_parallel=True
        )
        r = train(**job, recompute="auto", zero=3)
        if r["fits"]:
            assert np.isfinite(r["step_time_s"]) and r["step_time_s"] > 0, name
        else:
            assert r["memory_per_gpu_bytes"] > held and "step_time_s" not in r and "mfu" not in r, name
            assert 16 * parameters(net)["total"] / 8 > held, name  # its states alone, sharded over 8


def test_an_alias_is_the_same_architecture():
    job = dict(system="dgx-h100", gpus=8, tp=8, global_batch=8, sequence_parallel=True, recompute="full")
    assert (
        model_step(model="llama3.1-70b", **job)["step_time_s"]
        == model_step(model="llama3-70b", **job)["step_time_s"]
    )
    with pytest.raises(CommodelError, match=re.escape("did you mean 'llama3.1-405b'")):
        train(model="llama3.1-405", **job)


@pytest.mark.parametrize("name", ["llama3-8b", "qwen3-30b-a3b"])
def test_a_batch_prices_every_layout_as_it_would_alone(name):
    """Sharing sub-results between layouts (per distinct micro-batch, collective and layer shape, and
    recomputation's none and full priced in one pass for ``auto``), and skipping what no layout of a
    batch uses (DualPipe, stated stages, multi-token prediction, context parallelism), must not change
    any number: a batch of layouts equals each layout priced on its own."""
    from commodel.workloads.parallel.layout_rules import valid

    rng = np.random.default_rng(7)
    n = 600
    tp, pp, sp = rng.choice([1, 2, 4], n), rng.choice([1, 2, 4], n), rng.random(n) < 0.5
    cp = np.where(rng.random(n) < 0.2, 2, 1)
    last_layers = np.where(rng.random(n) < 0.3, 4, np.nan)
    x = layouts(
        name, tp=tp, pp=pp, cp=cp, dp=64 / (tp * pp * cp), micro_batch=rng.choice([1, 2], n),
        global_batch=rng.choice([256, 512], n), seq=rng.choice([2048, 4096], n),
        recompute=np.array(RECOMPUTE_CHOICES)[rng.integers(0, 4, n)], sequence_parallel=sp,
        zero=rng.integers(0, 4, n), schedule=np.where(rng.random(n) < 0.3, "dualpipe", "1f1b"),
        mtp_layers=rng.choice([0, 1], n), last_stage_layers=last_layers,
        ends_as_layers=(pp == 2) & np.isnan(last_layers) & (rng.random(n) < 0.4),
        ep=rng.choice([1, 4] if "qwen" in name else [1], n),
        etp=np.where(sp & (rng.random(n) < 0.5) & ("qwen" in name), 1, np.nan),
        fp8_dispatch=(rng.random(n) < 0.5) & ("qwen" in name), ep_sms=rng.choice([np.nan, 20] if "qwen" in name else [np.nan], n),
        recompute_modules=module_texts(rng.choice([0, 1, 3] if "qwen" in name else [0, 1], n)),
        dispatcher=np.where(("qwen" in name) & (rng.random(n) < 0.5), "deepep", "alltoall"),
    )  # fmt: skip
    net, c = model(name), cluster("dgx-h100")
    x = x.select(valid(net, x, 64))
    assert (
        x.tp.size > 100 and x.dualpipe.any() and (x.last_stage_layers > 0).any() and (x.mtp_layers > 0).any()
    )
    assert x.ends_as_layers.any()
    assert (x.recompute_modules > 0).any() and (x.recompute == 3).any() and (x.cp > 1).any()
    batch = train_step(net, c, x, strategy="sm-partition", ep_overlap="1f1b")
    for i in rng.choice(x.tp.size, 25, replace=False):
        alone = train_step(
            net, c, x.select(np.arange(x.tp.size) == i), strategy="sm-partition", ep_overlap="1f1b"
        )
        for key, values in alone.items():
            assert values[0] == pytest.approx(batch[key][i], rel=1e-12), key


def test_in_network_overlap_helps_only_where_the_switch_reduces():
    """In-switch collectives take fewer SMs and half the HBM traffic: never slower than naive overlap
    on an NVLS node, and the same as naive overlap where the switch cannot reduce (A100)."""
    x = layouts(dp=8, global_batch=32, seq=4096, zero=3, recompute="selective")
    net = model("llama3-8b")

    def step(system, strategy):
        return float(train_step(net, cluster(system), x, strategy=strategy)["step_time_s"])

    assert step("dgx-h100", "in-network") < step("dgx-h100", "sm-partition")
    assert step("dgx-a100", "in-network") == pytest.approx(step("dgx-a100", "sm-partition"))


@settings(max_examples=5, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from(["llama3-8b", "llama3-70b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b", "gpt3-175b"]),
    st.sampled_from(["dgx-h100", "gb200-nvl72", "gb300-nvl72", "dgx-a100", "mi300x-8"]),
)
def test_physical_sanity_over_random_valid_configurations(seed, name, system):
    """No input gives MFU above 1, hardware TFLOP/s above the peak, a step shorter than the largest
    GEMM of one layer and micro-batch, a fitting job with more offloaded activations than the CPU
    memory, or a breakdown that does not add up: 3,300 random layouts per example (recomputation
    none, selective, full or auto, or stated layers offloaded), at least 2,000 valid each, over 10,000 in all, under every tensor-parallel mechanism the
    system supports, with the expert all-to-alls on the critical path or overlapped (with another
    micro-batch or the shared experts), under 1F1B or
    DualPipe, with or without a multi-token prediction module, a lighter last stage or the embedding
    and loss counted as layers, with experts
    split as attention is or whole, recomputing any of the modules the model has, dispatched by NCCL or
    DeepEP, permuted by fused kernels or not, with Adam's moments in FP32 or BF16."""
    from commodel.compute import gemm, kernel_time
    from commodel.compute.roofline import peak_flops
    from commodel.workloads.parallel.layout_rules import valid

    rng = np.random.default_rng(seed)
    n = 3300
    net, c = model(name), cluster(system, 64)
    dtype = str(rng.choice(["bf16", "fp8"] if "fp8" in c.gpu.peak_flops else ["bf16"]))
    tp, pp, cp = rng.choice([1, 2, 4, 8], n), rng.choice([1, 2, 4, 8], n), rng.choice([1, 2], n)
    experts, moe = (net.moe.experts, True) if net.moe else (1, False)  # MoE-only settings: MoE models only
    ep = np.where(rng.random(n) < 0.7, 1, rng.choice([e for e in (1, 2, 4, 8) if experts % e == 0], n))
    gpus = tp * pp * cp * rng.choice([1, 2, 4, 8], n)
    mb, vpp, sp = rng.choice([1, 2, 4], n), rng.choice([1, 2], n), rng.random(n) < 0.5
    dualpipe = (pp > 1) & (vpp == 1) & (rng.random(n) < 0.3)
    lighter_last = (pp > 1) & ~dualpipe & (rng.random(n) < 0.2)  # under virtual stages too
    places = (net.layers + 2) % (pp * vpp) == 0  # where the embedding and loss can count as layers
    recompute = rng.integers(0, 4, n)
    modules = np.bitwise_and(rng.integers(0, 8, n), 1 | 2 * (net.moe is not None) | 4 * (net.mla is not None))
    offloads = (
        (pp == 1) & (recompute == 0) & (modules == 0) & (rng.random(n) < 0.3)
    )  # as Megatron-Core allows
    ends_as_layers = (pp > 1) & ~dualpipe & ~lighter_last & places & (rng.random(n) < 0.3)
    steps = rng.choice([1, 4, 16], n)  # micro-batches per step: interleaving runs at least pp
    steps = np.where(vpp > 1, np.maximum(steps, pp), steps)
    x = layouts(
        name, system, tp=tp, pp=pp, cp=cp, ep=ep, dp=gpus // (tp * pp * cp), vpp=vpp, micro_batch=mb,
        global_batch=gpus // (tp * pp * cp) * mb * steps, seq=rng.choice([2048, 8192, 131072], n),
        recompute=np.array(RECOMPUTE_CHOICES)[recompute], sequence_parallel=sp, zero=rng.integers(0, 4, n),
        expert_load=np.where(moe, np.minimum(rng.choice([1.0, 1.3, 2.0], n), ep), 1.0),
        schedule=np.where(dualpipe, "dualpipe", "1f1b"),
        mtp_layers=rng.choice([0, 0, 1], n), last_stage_layers=np.where(lighter_last, 2, np.nan),
        ends_as_layers=ends_as_layers, etp=np.where(moe & sp & (rng.random(n) < 0.3), 1, np.nan),
        recompute_modules=module_texts(modules), offload_layers=np.where(offloads, rng.integers(1, net.layers, n), 0),
        dispatcher=np.where((net.moe is not None) & (rng.random(n) < 0.5), "deepep", "alltoall"),
        fp8_activation_input=rng.random(n) < 0.3, bf16_moments=rng.random(n) < 0.3,
        permute_fusion=moe & (rng.random(n) < 0.5),
    )  # fmt: skip
    ok = valid(net, x, gpus)
    assert ok.sum() >= 2000, ok.sum()
    x, gpus = x.select(ok), gpus[ok]
    mechanism = str(rng.choice(["none", "t3", "userbuffers", *(["cais"] if c.nvls else [])]))
    r = train_step(
        net, c, x, dtype=dtype, strategy=str(rng.choice(STRATEGIES)), tp_overlap=mechanism,
        ep_overlap=str(rng.choice(["none", "1f1b", "shared-experts"])),
    )  # fmt: skip
    peak = peak_flops(c.gpu, precision(dtype).gemm)
    assert np.all(r["mfu"] <= 1 + 1e-9)
    assert np.all(r["hw_tflops_per_gpu"] * 1e12 <= peak * (1 + 1e-9))
    ffn = net.ffn_hidden if net.moe is None else net.moe.expert_ffn_hidden
    largest = gemm(x.tokens, ffn / x.tp, net.hidden, precision(dtype).gemm)
    assert np.all(r["step_time_s"] >= kernel_time(c.gpu, largest, launch=False).time_s)
    assert np.all((r["offloaded_bytes"] <= c.host_memory_per_gpu) | ~r["fits"])  # auto's, or stated
    assert sum(r[f"{b}_s"] for b in BREAKDOWN) == pytest.approx(r["step_time_s"])


def test_an_unbalanced_expert_rank_sets_the_pace():
    """The busiest expert-parallel rank's share (``expert_load``) stretches its expert GEMMs and the
    all-to-alls; it changes nothing without expert parallelism or experts."""
    c = cluster("gb200-nvl72", 2)
    x = layouts(dp=8, ep=8, micro_batch=4, global_batch=512, seq=4096, zero=1)

    def step(name="qwen3-30b-a3b", **changes):
        return train_step(model(name), c, dataclasses.replace(x, **changes), "mxfp8", "sm-partition")

    balanced, skewed, worse = (step(expert_load=np.asarray(v)) for v in (1.0, 1.5, 2.0))
    assert balanced["step_time_s"] < skewed["step_time_s"] < worse["step_time_s"]
    assert float(worse["ep_comm_s"] / balanced["ep_comm_s"]) == pytest.approx(2.0, rel=0.05)
    assert worse["compute_s"] > balanced["compute_s"]
    one_rank = {"ep": np.asarray(1.0)}
    assert float(step(**one_rank, expert_load=np.asarray(2.0))["step_time_s"]) == float(
        step(**one_rank)["step_time_s"]
    )
    dense = {"name": "llama3-8b", "ep": np.asarray(1.0)}
    assert float(step(**dense, expert_load=np.asarray(2.0))["step_time_s"]) == float(
        step(**dense)["step_time_s"]
    )


@pytest.mark.parametrize("recipe, system", [("mxfp8", "gb200-nvl72"), ("fp8-block", "dgx-h100")])
def test_block_scaled_fp8_pays_for_its_casts(monkeypatch, recipe, system):
    """Block-scaled FP8 (MXFP8 on Blackwell, TE's blockwise recipe on Hopper) quantizes in one pass of
    about 4.06 B per element where current scaling takes 6 B, yet runs slower (Megatron-Bridge, Llama
    3 8B on GB200: 5.5%): its casts reach a fraction of the copy bandwidth. At copy speed it would be
    the faster recipe; slower casts cost more. Only the casts differ: the same FLOPs and memory."""
    from commodel.compute import precision as recipes

    c, net = cluster(system, 2), model("llama3-8b")
    x = layouts(dp=c.total_gpus, micro_batch=2, global_batch=128, seq=8192, zero=1)

    def step(dtype, field="step_time_s"):
        return float(train_step(net, c, x, dtype, "sm-partition")[field])

    assert step(recipe) > step("fp8")
    assert step(recipe, "memory_per_gpu_bytes") == step("fp8", "memory_per_gpu_bytes")
    assert step(recipe, "tflops_per_gpu") / step(recipe, "mfu") == pytest.approx(
        step("fp8", "tflops_per_gpu") / step("fp8", "mfu")
    )
    slower = step(recipe)
    for share, compare in ((1.0, lambda t: t < step("fp8")), (0.1, lambda t: t > slower)):
        monkeypatch.setitem(
            recipes.RECIPES, recipe, dataclasses.replace(recipes.RECIPES[recipe], cast_bandwidth=share)
        )
        assert compare(step(recipe))


def test_userbuffers_hides_tensor_parallel_communication_behind_its_gemms():
    """Transformer Engine's userbuffers overlap exposes less TP communication than running the
    collectives between the GEMMs, more of it the less compute there is to hide behind (shorter
    sequences), nothing changes without sequence parallelism (TE needs it), and without a TP group
    its cut GEMMs and SM margins cost nothing."""
    net, c = model("llama3-405b"), cluster("gb200-nvl72", 256)

    def tp_comm(mechanism, seq=8192, sp=True):
        x = layouts(
            tp=4, pp=16, dp=4, vpp=4, global_batch=64, seq=seq, sequence_parallel=sp, recompute="full"
        )
        r = train_step(net, c, x, dtype="fp8", strategy="sm-partition", tp_overlap=mechanism)
        return float(r["tp_comm_s"] / r["step_time_s"])

    # what stays: the last chunk, cut GEMMs, SM margins, the clock the exchange's HBM power takes
    assert 0 < tp_comm("userbuffers") < 0.85 * tp_comm("none")
    assert tp_comm("userbuffers", seq=1024) > tp_comm("userbuffers")
    assert tp_comm("userbuffers", sp=False) == pytest.approx(tp_comm("none", sp=False))
    alone = dict(model="llama3-8b", system="dgx-h100", gpus=8, sequence_parallel=True)
    assert (
        model_step(**alone, tp_overlap="userbuffers")["breakdown"]["tp_comm"] == 0
    )  # no TP group: nothing to hide


def test_userbuffers_chunks_cost_small_gemms_their_waves(monkeypatch):
    """Userbuffers' ring exchange cuts a consumer GEMM into tp chunks of its rows, three at a time on
    their own streams: dearer the fewer rows a chunk keeps (GPT-3 175B at tp 8 and 4,096 tokens on H100: 512-row chunks in emptier waves, about
    a fifth; Llama 3 405B at tp 2 and 8,192 tokens: nothing). Priced so, the step's exposed TP time
    grows, which takes Megatron-LM's own GPT-3 175B run on 96 H100 from 23% to 13.5% fast."""
    from commodel.compute.kernels import gemm
    from commodel.hardware import default_db
    from commodel.workloads.layer import userbuffers
    from commodel.workloads.layer import work as lw

    h100, gb300 = default_db().gpu("h100-sxm"), default_db().gpu("gb300")
    qkv = gemm(4096, 3 * 12288 / 8, 12288)
    assert lw.chunked_s(h100, qkv, 8, None) > 1.15 * lw.timed(h100, qkv, None)[0]
    wide = gemm(8192, (128 / 2 + 2 * 4) * 128, 16384)
    assert lw.chunked_s(gb300, wide, 2, None) == pytest.approx(lw.timed(gb300, wide, None)[0], rel=1e-3)

    net, c = model("gpt3-175b-mcore"), cluster("dgx-h100", 12)

    def tp_comm():
        x = layouts(tp=8, pp=12, dp=1, global_batch=1152, sequence_parallel=True, recompute="selective")
        r = train_step(net, c, x, strategy="sm-partition", tp_overlap="userbuffers")
        return float(np.ravel(r["tp_comm_s"])[0])

    chunked = tp_comm()
    monkeypatch.setattr(userbuffers, "UB_STREAMS", 1)  # one chunk at a time: each its own waves
    assert tp_comm() > chunked
    monkeypatch.setattr(
        lw, "chunk_groups", lambda kernel, chunks: [(kernel, np.ones_like(np.asarray(chunks)))]
    )
    assert tp_comm() < chunked


def test_fp8_recipes_gather_quantized_activations(monkeypatch):
    """Under FP8, Transformer Engine quantizes a GEMM's input before its sequence-parallel all-gather:
    the gathers move one byte per element and the recipe's scales, the reduce-scatters still two, so
    TP time falls where the gathers are exposed, and as far as their bytes go."""
    import dataclasses

    from commodel.compute import precision as precision_module

    job = dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=8, global_batch=64, dtype="fp8",
               sequence_parallel=True, recompute="full")  # fmt: skip
    quantized = train(**job)["breakdown"]["tp_comm"]
    sixteen_bit = dataclasses.replace(precision_module.RECIPES["fp8"], activation_gather_bytes=2.0)
    monkeypatch.setitem(precision_module.RECIPES, "fp8", sixteen_bit)
    wide = train(**job)["breakdown"]["tp_comm"]
    assert quantized < 0.9 * wide
    assert precision_module.RECIPES["bf16"].activation_gather_bytes == 2.0
    assert precision_module.RECIPES["mxfp8"].activation_gather_bytes == pytest.approx(1 + 1 / 32)


def test_the_advice_turns_userbuffers_on_or_off_where_it_pays():
    """commodel train prices the other tensor-parallel mechanism: userbuffers for Llama 3 70B at TP 8
    on H100 (its collectives exposed between the GEMMs otherwise), and none for GPT-3 175B at 512
    tokens, where 64-row GEMM chunks cost more than the communication they hide: switching away from
    userbuffers gains more there than at its 2,048-token recipe (where the two are within a few %)."""
    common = dict(system="dgx-h100", tp=8, sequence_parallel=True, overlap="sm-partition", advise=True)
    exposed = train(model="llama3-70b", gpus=64, global_batch=64, recompute="auto", **common)
    assert any("--tp-overlap userbuffers" in n for n in exposed["notes"])
    short = train(model="gpt3-175b-mcore", gpus=96, pp=12, global_batch=96, seq=512, tp_overlap="userbuffers",
                  recompute="selective", **common)  # fmt: skip
    assert any("--tp-overlap async" in n for n in short["notes"])
    long = train(model="gpt3-175b-mcore", gpus=96, pp=12, global_batch=96, tp_overlap="userbuffers",
                 recompute="selective", **common)  # fmt: skip

    def gain(run):  # what the advice says switching to async saves, 0 without a note
        notes = [n for n in run["notes"] if "--tp-overlap async" in n]
        return 0.0 if not notes else 1 - float(notes[0].split("-> ")[1].split()[0]) / run["step_time_s"]

    assert gain(short) > 2 * gain(long)


def test_with_sequence_parallelism_a_gpu_dispatches_only_its_sequence_shard():
    """With tp 2 and sequence parallelism each GPU sends its half of the tokens over the expert group
    (here across two nodes) and the TP pair all-gathers them over NVLink: less expert communication
    than sending every token from both TP ranks, and no TP collective at all with tp 1."""
    c = cluster("dgx-h100", 4)
    x = layouts(tp=2, dp=16, ep=8, micro_batch=1, global_batch=64, seq=4096, zero=1)

    def ep_comm(**changes):
        layout = dataclasses.replace(x, **changes)
        return float(train_step(model("mixtral-8x7b"), c, layout, "bf16", "sm-partition")["ep_comm_s"])

    sharded, whole = ep_comm(sequence_parallel=np.asarray(True)), ep_comm(sequence_parallel=np.asarray(False))
    assert 0 < sharded < 0.75 * whole
    one = {"tp": np.asarray(1.0), "dp": np.asarray(32.0)}
    assert ep_comm(**one, sequence_parallel=np.asarray(True)) == ep_comm(
        **one, sequence_parallel=np.asarray(False)
    )


def test_the_expert_grid_folds_over_the_tensor_parallel_ranks():
    """Megatron-Core's MoE parallel folding: with expert tp 1 the expert group may span the attention's
    tensor-parallel ranks (Qwen3-235B on 256 H100: tp 2, pp 8, ep 32 = tp x dp), which expert tp = tp
    (the default) cannot place; each GPU then holds E / ep whole experts, and no expert-tp gather
    follows the dispatch. A layer of routed experts (no shared expert) has one tensor-parallel
    gather-reduce pair per pass, not a dense layer's two."""
    from commodel.workloads.model.transformer import layer_weights, tensor_parallel_mlps
    from commodel.workloads.training.memory import stage_parameters

    recipe = dict(model="qwen3-235b-a22b", system="dgx-h100", gpus=256, tp=2, pp=8, ep=32, vpp=4,
                  global_batch=1024, seq=4096, sequence_parallel=True)  # fmt: skip
    folded = train(**recipe, etp=1)
    assert folded["fits"] and folded["tokens_per_s"] > 0
    with pytest.raises(CommodelError, match="expert tp x ep must divide tp x cp x dp"):
        train(**recipe)
    with pytest.raises(CommodelError, match="need sequence parallelism"):
        train(**{**recipe, "sequence_parallel": False}, etp=1)
    net = model("qwen3-235b-a22b")
    x = layouts(tp=2, pp=8, dp=16, ep=32, etp=1, global_batch=1024, sequence_parallel=True)
    _, experts, _ = stage_parameters(net, x)
    assert float(experts) == pytest.approx(np.ceil(94 / 8) * layer_weights(net).moe_experts / 32)
    assert tensor_parallel_mlps(net) == 0 and tensor_parallel_mlps(model("deepseek-v3")) == 1
    same = dict(model="mixtral-8x7b", system="dgx-h100", gpus=64, tp=2, pp=4, ep=4, global_batch=256,
                seq=4096, sequence_parallel=True)  # fmt: skip
    default, explicit, whole = train(**same), train(**same, etp=2), train(**same, etp=1)
    assert default["step_time_s"] == explicit["step_time_s"]
    assert whole["breakdown"]["ep_comm"] < default["breakdown"]["ep_comm"]


def test_fp8_dispatch_halves_the_bytes_towards_the_experts_only():
    """DeepSeek-V3's low-precision communication: the dispatch and the gradient towards the experts in
    FP8 with per-128 scales (1.03 B per element), the combine and its gradient in BF16: a large,
    bandwidth-bound expert exchange takes (1 + 1.03 / 2) / 2 = 0.76 of its BF16 time."""
    base = dict(model="qwen3-30b-a3b", system="dgx-h100", gpus=64, ep=64, global_batch=512, seq=4096)
    bf16, fp8 = model_step(**base), model_step(**base, fp8_dispatch=True)
    ratio = fp8["breakdown"]["ep_comm"] / bf16["breakdown"]["ep_comm"]
    assert ratio == pytest.approx((1 + (1 + 4 / 128) / 2) / 2, abs=0.02)
    dense = dict(model="llama3-8b", system="dgx-h100", gpus=8, global_batch=64)
    assert model_step(**dense, fp8_dispatch=True)["step_time_s"] == model_step(**dense)["step_time_s"]


def test_fp8_activation_inputs_take_one_byte_each_and_cost_no_time():
    """Megatron's --activation-func-fp8-input-store (DeepSeek-V3's cached SwiGLU inputs): every
    activation function keeps its input, FC1's gate and up outputs, in FP8: a dense SwiGLU layer holds
    2 f bytes less per token, a MoE layer 2 f per routed copy (top_k of them), on any recipe; the
    step's time does not change."""
    from commodel.workloads.model.transformer import activation_bytes_per_token

    for name, dtype in (("llama3-8b", "bf16"), ("qwen3-30b-a3b", "fp8")):
        net = model(name)
        width, copies = (net.ffn_hidden, 1) if net.moe is None else (net.moe.expert_ffn_hidden, net.moe.top_k)
        kept, fp8 = (
            activation_bytes_per_token(net, 0, recipe=precision(dtype), fp8_activation_input=on)
            for on in (False, True)
        )
        assert kept - fp8 == pytest.approx(2 * width * copies)
        job = dict(
            model=name,
            system="dgx-h100",
            gpus=8,
            ep=8 if net.moe else 1,
            global_batch=64,
            seq=4096,
            dtype=dtype,
        )
        off, on = model_step(**job), model_step(**job, fp8_activation_input=True)
        assert (
            on["memory_per_gpu_bytes"] < off["memory_per_gpu_bytes"]
            and on["step_time_s"] == off["step_time_s"]
        )


def test_deepep_crosses_the_network_once_per_node_and_group_limited_routing_caps_the_nodes():
    """DeepEP (Megatron's flex dispatcher) sends a token over the network once per remote node its
    experts land on and forwards it over NVLink there, once per GPU holding any of its experts; NCCL's
    all-to-all sends every routed copy. With expert parallelism over 8 H800 nodes the network carries
    DeepSeek-V3's tokens 4 (1 - (3/4)^8) x 7/8 = 3.15 times instead of 7 (its router picks experts from
    4 of 8 node groups). Without the group limit a token reaches 8 (1 - (7/8)^8) x 7/8 = 4.6 remote
    nodes; on 4 nodes the limit of 4 changes nothing. Inside one node of 8 a top-8 token goes to the
    7 (1 - (7/8)^8) = 4.6 other GPUs holding its experts instead of 7 copies, at DeepEP's share of
    NVLink: 4.6 / 0.84 / 7 = 0.78 of the all-to-all's time."""
    net = model("deepseek-v3")
    moe = net.moe
    assert float(forwarded_copies(moe, 1.0, 8, 8)[0]) == pytest.approx(4 * (1 - 0.75**8) * 7 / 8)
    free = moe.model_copy(update={"router_groups": 0, "router_group_top_k": 0})
    assert float(forwarded_copies(free, 1.0, 8, 8)[0]) == pytest.approx(8 * (1 - (7 / 8) ** 8) * 7 / 8)
    assert float(domains_reached(moe, 4)) == float(domains_reached(free, 4))
    assert float(forwarded_copies(moe, 1.0, 1, 8)[0]) == 0.0
    reached = domains_reached(moe, np.arange(1.0, 65.0))
    assert np.all(np.diff(reached) >= 0) and np.all(reached <= np.minimum(np.arange(1.0, 65.0), moe.top_k))

    def ep_comm(system, gpus, dispatcher, name="deepseek-v3"):
        job = dict(model=name, system=system, gpus=gpus, pp=8, ep=gpus // 8, global_batch=1024, seq=4096)
        return model_step(**job, dispatcher=dispatcher)["breakdown"]["ep_comm"]

    assert ep_comm("hgx-h800", 512, "deepep") < 0.6 * ep_comm("hgx-h800", 512, "alltoall")
    inside = 7 * (1 - (7 / 8) ** 8)
    domains, per = np.meshgrid([1.0, 2, 4, 8, 32], [1.0, 2, 4, 8, 72])
    nvlink = forwarded_copies(free, 1.0, domains, per)[1]  # one copy per GPU: at most k, and g - 1 a domain
    assert np.all(nvlink <= free.top_k * (per - 1) / per + 1e-12) and np.all(nvlink <= domains * (per - 1))
    assert float(forwarded_copies(free, 1.0, 1, 8)[1]) == pytest.approx(inside)
    many = float(forwarded_copies(free, 1.0, 1, 4096)[1])  # GPUs far outnumber k: one copy per expert
    assert many == pytest.approx(8 * 4095 / 4096, rel=1e-3) and many < 8
    assert ep_comm("hgx-h800", 64, "deepep") == pytest.approx(
        inside / NVLINK_SHARE / 7 * ep_comm("hgx-h800", 64, "alltoall"), rel=0.05
    )
    with pytest.raises(CommodelError, match="hybridep dispatchers need a mixture-of-experts model"):
        train(model="llama3-8b", system="dgx-h100", gpus=8, dispatcher="deepep")
    # DeepEP puts from the GPU over RDMA: across nodes it needs a NIC that takes GPU-initiated work
    # requests (Slingshot's does not), inside one node it runs over the scale-up links
    with pytest.raises(CommodelError, match="deepep dispatcher needs GPU-initiated RDMA across nodes"):
        train(model="qwen3-30b-a3b", system="frontier-node", gpus=16, ep=16, dispatcher="deepep")
    inside = dict(model="qwen3-30b-a3b", system="frontier-node", gpus=16, ep=8, dispatcher="deepep")
    train(**inside)  # accepted: inside one node DeepEP runs over the scale-up links
    assert model_step(**inside)["breakdown"]["ep_comm"] > 0
    with pytest.raises(CommodelError, match="did you mean 'deepep'"):
        train(model="deepseek-v3", system="dgx-h100", gpus=64, ep=8, dispatcher="deepeep")


@pytest.mark.parametrize(
    "groups, top, problem",
    [
        (8, 0, "go together"),
        (0, 4, "go together"),
        (3, 1, "must divide"),
        (8, 9, "at least router_group_top_k"),
    ],
)
def test_a_group_limited_router_is_checked_where_it_is_declared(groups, top, problem):
    from pydantic import ValidationError

    from commodel.workloads.model.schema import MoE

    declared = dict(
        experts=256, top_k=8, expert_ffn_hidden=2048, router_groups=groups, router_group_top_k=top
    )
    with pytest.raises(ValidationError, match=problem):
        MoE.model_validate(declared)


def test_train_names_deepep_where_it_pays():
    """Asked for advice, ``train`` prices DeepEP in place of NCCL's all-to-all and names it where it
    saves time: across two H100 nodes a token of Qwen3-30B-A3B crosses the network about once instead
    of 4 times. Inside one node a top-2 token (Mixtral 8x7B) reaches 7 (1 - (7/8)^2) = 1.6 other GPUs
    against 1.75 copies by the all-to-all, which DeepEP's share of NVLink more than undoes: nothing is
    said."""
    across = dict(model="qwen3-30b-a3b", system="dgx-h100", gpus=16, ep=16, global_batch=256, seq=4096)
    (note,) = [n for n in train(**across, advise=True)["notes"] if n.startswith("--dispatcher deepep")]
    faster = train(**across, dispatcher="deepep")
    assert note.endswith(f"-> {faster['step_time_s']:.4g} s per step)")
    assert not any("--dispatcher" in n for n in train(**across)["notes"])  # advice is asked for
    inside = dict(across, model="mixtral-8x7b", gpus=8, ep=8)
    assert not any("--dispatcher" in n for n in train(**inside, advise=True)["notes"])


def test_deepep_holds_its_20_sms_unless_told_otherwise():
    """Megatron's --moe-deepep-num-sms defaults to 20: the SMs a paired layer loses under 1F1B overlap."""
    base = dict(model="qwen3-30b-a3b", system="dgx-h100", gpus=8, ep=8, global_batch=256, seq=4096,
                overlap="sm-partition", ep_overlap="1f1b", dispatcher="deepep")  # fmt: skip
    assert model_step(**base)["step_time_s"] == model_step(**base, ep_sms=20)["step_time_s"]
    assert model_step(**base)["step_time_s"] != model_step(**base, ep_sms=24)["step_time_s"]


def test_deepep_reaches_8_nvlink_peers_and_hybridep_the_whole_domain():
    """On a GB200 NVL72 rack, DeepEP's internode kernels cross RDMA between groups of its 8 NVLink
    peers (NUM_MAX_NVL_PEERS), where HybridEP stays on NVLink across the 64 GPUs; on 8-GPU H100 nodes
    the two move the same bytes and differ only in the SMs they hold (20 and 16). Asked for advice on
    the rack, ``train`` names HybridEP, not DeepEP."""
    rack = dict(model="qwen3-30b-a3b", system="gb200-nvl72", gpus=64, ep=64, global_batch=512, seq=4096)
    deep, hybrid = (train(**rack, dispatcher=d)["breakdown"]["ep_comm"] for d in ("deepep", "hybridep"))
    assert hybrid < 0.5 * deep
    inside = dict(rack, gpus=8, ep=8)  # one group of 8 NVLink peers: the same dispatch
    assert train(**inside, dispatcher="deepep")["breakdown"]["ep_comm"] == pytest.approx(
        train(**inside, dispatcher="hybridep")["breakdown"]["ep_comm"]
    )
    nodes = dict(rack, system="dgx-h100", gpus=16, ep=16)
    deep, hybrid = (train(**nodes, dispatcher=d)["breakdown"]["ep_comm"] for d in ("deepep", "hybridep"))
    assert deep == pytest.approx(hybrid)
    overlapped = dict(nodes, overlap="sm-partition", ep_overlap="1f1b")
    assert train(**overlapped, dispatcher="deepep", ep_sms=16)["step_time_s"] == pytest.approx(
        train(**overlapped, dispatcher="hybridep")["step_time_s"]
    )
    notes = train(**dict(rack, dispatcher="alltoall"), advise=True)["notes"]
    assert not any(n.startswith("--dispatcher deepep") for n in notes)


@pytest.mark.parametrize("system", ["gb200-nvl72", "gb300-nvl72"])
@pytest.mark.parametrize("model_name", ["qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b"])
def test_hybridep_never_moves_tokens_slower_than_deepep_on_a_rack(system, model_name):
    """HybridEP's NVLink group holds DeepEP's 8 peers and more, so a token crosses the rack's NICs no
    more often and its exchange is never slower, at every expert-parallel size."""
    for ep, gpus in ((16, 64), (32, 128), (64, 256)):
        job = dict(model=model_name, system=system, gpus=gpus, ep=ep, global_batch=gpus * 2, seq=4096,
                   recompute="auto", pp=max(1, gpus // ep // 2))  # fmt: skip
        deep, hybrid = (model_step(**job, dispatcher=d) for d in ("deepep", "hybridep"))
        assert hybrid["breakdown"]["ep_comm"] <= deep["breakdown"]["ep_comm"] * (1 + 1e-9), (ep, gpus)


def test_sms_held_by_the_expert_all_to_all_slow_the_layer_it_overlaps():
    """Under 1F1B expert overlap the all-to-all kernels hold SMs the paired layer's GEMMs lose: NCCL's
    CTAs by default (24 on an NVSwitch node), or the SMs stated (DeepEP's 20): more SMs, a slower
    step where compute sets the pace."""
    base = dict(model="qwen3-30b-a3b", system="dgx-h100", gpus=8, ep=8, global_batch=256, seq=4096,
                overlap="sm-partition", ep_overlap="1f1b")  # fmt: skip
    steps = [model_step(**base, ep_sms=k)["step_time_s"] for k in (4, 20, 24, 40)]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    assert model_step(**base)["step_time_s"] == steps[2]


def test_shared_expert_overlap_hides_the_all_to_alls_behind_the_shared_experts_only():
    """Megatron's --moe-shared-expert-overlap runs each layer's dispatch and combine beside its own
    shared experts, in every micro-batch (nothing is left for the pipeline's warm-up): it hides at most
    the shared experts' time, less than 1F1B's whole partner layer, nothing under serial execution or
    for a model without shared experts (Qwen3)."""
    from commodel.compute.precision import precision
    from commodel.workloads.layer.work import layer_work_of

    net, c = model("deepseek-v3"), cluster("gb200-nvl72", 16)
    x = layouts(dp=64, ep=64, micro_batch=1, global_batch=512, seq=4096, zero=1)

    def step(ep_overlap, strategy="sm-partition", name="deepseek-v3"):
        return train_step(model(name), c, x, "bf16", strategy, ep_overlap=ep_overlap)

    none, shared, partner = (step(o) for o in ("none", "shared-experts", "1f1b"))
    hidden = float(none["ep_comm_s"] - shared["ep_comm_s"])
    own = layer_work_of(net, c.gpu, x, precision("bf16"), "flash", shared_experts=True)
    assert 0 < hidden <= float(own.total_s) * net.layers * 8  # 8 micro-batches
    assert float(partner["ep_comm_s"]) < float(shared["ep_comm_s"])
    assert float(shared["bubble_s"]) == pytest.approx(float(none["bubble_s"]), rel=0.05)
    assert float(step("shared-experts", "serial")["step_time_s"]) == float(
        step("none", "serial")["step_time_s"]
    )
    qwen = [float(step(o, name="qwen3-30b-a3b")["step_time_s"]) for o in ("none", "shared-experts")]
    assert qwen[0] == qwen[1]


def test_overlapped_expert_all_to_alls_hide_under_another_micro_batch():
    """1F1B overlap puts one micro-batch's dispatch and combine beside another's layer: less exposed
    expert communication the more micro-batches pair up, none of it hidden with a single micro-batch
    (nothing to pair with) or with no overlap at all (serial)."""
    c = cluster("dgx-h100", 8)
    net = model("deepseek-v3")

    def step(overlap, strategy="sm-partition", batch=256):
        x = layouts(pp=8, dp=8, ep=8, micro_batch=1, global_batch=batch, seq=4096, zero=1)
        r = train_step(net, c, x, "bf16", strategy, ep_overlap=overlap)
        return float(r["ep_comm_s"]), float(r["step_time_s"])

    (comm, time), (hidden, faster) = step("none"), step("1f1b")
    assert hidden < 0.8 * comm and faster < time
    alone, unhidden = step("1f1b", batch=8)[1], step("none", batch=8)[1]  # one micro-batch per step
    assert alone == pytest.approx(unhidden, rel=0.005)
    assert step("1f1b", "serial") == pytest.approx(step("none", "serial"))
    with pytest.raises(CommodelError, match="did you mean '1f1b'"):
        train(model="deepseek-v3", system="dgx-h100", gpus=64, pp=8, ep=8, ep_overlap="1f1c")


@pytest.mark.parametrize(
    "job",
    [
        dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=8, pp=4, dtype="fp8", sequence_parallel=True),
        dict(model="deepseek-v3", system="gb200-nvl72", gpus=256, pp=4, ep=64, seq=4096, dtype="mxfp8"),
        dict(model="gpt-oss-120b", system="gb300-nvl72", gpus=64, ep=64, micro_batch=2, global_batch=1280),
        dict(model="llama3-8b", system="dgx-a100", gpus=8, attention="unfused", seq=2048),
    ],
    ids=["dense-fp8", "mla-moe-mxfp8", "banded-moe", "unfused"],
)
def test_the_kernel_table_adds_up_to_the_layer_the_step_prices(job):
    """``train(kernels=True)`` lists one layer's kernels, each labelled, with its roofline; the rows'
    forward and backward add up to the layer compute the step model prices, recomputation aside (the
    same pricing, itemized), and a compute-bound GEMM never beats its GPU's peak."""
    from commodel.compute.roofline import peak_flops
    from commodel.pricing.training import job_layout
    from commodel.workloads.layer.work import layer_work_of

    result = train(**job, kernels=True)
    rows = result["kernels"]
    the_job = training_job(**job)
    net, gpu = model(the_job.model), cluster(the_job.system).gpu
    x = job_layout(
        job_columns(the_job), np.zeros(1, dtype=int), net, np.array([float(result["layout"]["dp"])])
    )
    plain = dataclasses.replace(x, recompute=np.zeros(1), recompute_modules=np.zeros(1))
    work = layer_work_of(net, gpu, plain, precision(the_job.dtype, gpu), the_job.attention)
    assert sum(r["fwd_ms"] for r in rows) == pytest.approx(1e3 * float(work.fwd_s[0]), rel=1e-12)
    assert sum(r["bwd_ms"] for r in rows) == pytest.approx(1e3 * float(work.bwd_s[0]), rel=1e-12)
    assert all(r["kernel"] and r["bound"] in ("compute", "memory", "launch") for r in rows)
    for r in rows:
        if r["shape"]:
            assert r["tflops"] <= peak_flops(gpu, r["dtype"]) / 1e12
    labels = {r["kernel"] for r in rows}
    assert "attention out" in labels and ({"qkv", "q down"} & labels)
    assert ("expert fc1" in labels) == (net.moe is not None)


def test_the_kernel_table_is_for_one_kind_of_node():
    with pytest.raises(CommodelError, match="one kind of node"):
        train(model="llama3-8b", system="dgx-h100:1,mi300x-8:1", pp=2, recompute="none", kernels=True)


def test_fp8_dispatch_casts_each_token_once_before_the_all_to_all():
    """DeepSeek-V3 (report, section 3.3.2) quantizes the experts' inputs before the dispatch and their
    output gradients before the combine's backward: one cast per token a GPU holds, where casting
    after the dispatch would convert each of its top_k = 8 received copies; the step gets faster."""
    job = dict(model="deepseek-v3", system="hgx-h800", gpus=512, pp=8, ep=64, seq=4096, global_batch=1024,
               dtype="fp8-block")  # fmt: skip
    after, before = (train(**job, fp8_dispatch=on, kernels=True) for on in (False, True))

    def cast_mb(result, label):
        return next(r["mb"] for r in result["kernels"] if r["kernel"].startswith(label))

    for label in ("cast expert fc1 input", "cast expert fc2 grad"):
        assert cast_mb(after, label) == pytest.approx(8 * cast_mb(before, label))
    for label in ("cast expert fc1 grad", "cast expert fc2 input"):  # what the all-to-alls do not carry
        assert cast_mb(after, label) == pytest.approx(cast_mb(before, label))
    assert model_step(**job, fp8_dispatch=True)["step_time_s"] < model_step(**job)["step_time_s"]


@pytest.mark.parametrize(("pp", "ep"), [(2, 8), (1, 256)])  # 32 local experts, or one
def test_each_dispatcher_permutes_the_tokens_where_megatron_core_does(pp, ep):
    """Megatron-Core's all-to-all dispatcher permutes a GPU's tokens to their experts before sending
    and back after the combine, and sorts the received chunks by local expert where a GPU holds
    several; its flex dispatcher (DeepEP) sends the tokens unpermuted and permutes only the received
    copies into its experts' order and back, on any number of local experts."""
    job = dict(model="deepseek-v3", system="gb200-nvl72", gpus=256, pp=pp, ep=ep, seq=4096, global_batch=256,
               dtype="mxfp8", kernels=True)  # fmt: skip
    alltoall, deepep = train(**job), train(**job, dispatcher="deepep")

    def calls(result, label):
        return [(r["forward"], r["backward"]) for r in result["kernels"] if r["kernel"] == label]

    moe = model("deepseek-v3").moe_layers / model("deepseek-v3").layers
    assert calls(alltoall, "token permute") == [(2 * moe, 2 * moe)]
    sorts = 2 * moe if ep < 256 else 0.0
    assert calls(alltoall, "token sort") == [(sorts, sorts)]
    assert calls(deepep, "token permute") == [(0.0, 0.0)]
    assert calls(deepep, "received-token permute") == [(2 * moe, 2 * moe)]


def test_fused_permutes_read_each_token_once():
    """Transformer Engine's fused permute (Megatron's --moe-permute-fusion, which Megatron-Bridge's MoE
    models set) reads a token once and writes its top_k copies, and its unpermute reads the copies and
    writes one: 1 + top_k rows a pass where the unfused gather reads and writes 2 top_k."""
    job = dict(model="deepseek-v3", system="gb200-nvl72", gpus=256, pp=4, ep=64, seq=4096, global_batch=256,
               dtype="mxfp8", kernels=True)  # fmt: skip
    unfused, fused = (
        next(r for r in train(**job, permute_fusion=on)["kernels"] if r["kernel"] == "token permute")
        for on in (False, True)
    )
    top_k = model("deepseek-v3").moe.top_k
    assert fused["mb"] / unfused["mb"] == pytest.approx((1 + top_k) / (2 * top_k))
    assert fused["fwd_ms"] < unfused["fwd_ms"]


def test_interleaved_chunks_reduce_their_gradients_as_their_work_ends():
    """Megatron-Core reduces each model chunk's gradients at its last backward: with vpp 1 the whole
    reduction hides behind the last micro-batch's backward of the stage; with vpp chunks it is the
    larger of the last chunk's share behind that chunk's pass and all of it behind the passes from
    the first chunk's end (pp chunk-passes apart). Hidden as well or better, never below zero, and a
    step with more chunks exposes less of it."""
    from commodel.overlap import exposed
    from commodel.workloads.layer.work import repeat
    from commodel.workloads.training.data_parallel import chunked_exposed

    layer = Window(*(np.array([t]) for t in (0.010, 0.012, 0.001, 1e-4)))  # 10 ms of backward per layer
    comm, bw, buckets, layers = np.array([0.5]), np.array([4e10]), np.array([40.0]), np.array([8.0])
    kw = dict(memory=HBM, in_network=False)
    for strategy in STRATEGIES:
        whole = exposed(strategy, repeat(layer, layers), comm, traffic_Bps=bw, calls=buckets, **kw)
        x1 = layouts(pp=np.array([8]), vpp=np.array([1]))
        assert chunked_exposed(strategy, layer, layers, x1, comm, bw, buckets, **kw) == pytest.approx(whole)
        chunked = [
            chunked_exposed(strategy, layer, layers, layouts(pp=np.array([pp]), vpp=np.array([v])), comm, bw,
                            buckets, **kw)[0]
            for pp, v in ((8, 2), (8, 4), (8, 8), (64, 8))
        ]  # fmt: skip
        assert all(0 <= c <= whole[0] + 1e-12 for c in chunked)
        assert all(a >= b - 1e-12 for a, b in itertools.pairwise(chunked))  # more chunks, less exposed
        if strategy == "serial":  # nothing overlaps: all of it, however chunked
            assert chunked == [comm[0]] * 4
            continue
        last = exposed(strategy, repeat(layer, layers / 8), comm / 8, traffic_Bps=bw, calls=buckets / 8, **kw)
        assert chunked[-1] >= last[0] - 1e-12  # the last chunk's share is always behind its own pass
        if strategy == "ideal":  # many chunk-passes apart, nothing else is exposed
            assert chunked[-1] == pytest.approx(last[0])

    job = dict(
        model="llama3-70b", system="dgx-h100", gpus=1024, tp=8, pp=8, global_batch=256, overlap="ideal"
    )
    dp = [model_step(**job, vpp=v)["breakdown"]["dp_comm"] for v in (1, 2, 5)]
    assert dp[0] > dp[1] > dp[2] > 0


def test_memory_categories_add_up_to_the_total_over_random_valid_jobs():
    """Weights, gradients, optimizer, activations, logits and the reserve make the memory per GPU, in
    every valid job, recomputation and offload chosen by auto included."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator
    from commodel.workloads.training.memory import CATEGORIES

    rng = np.random.default_rng(7)
    n = 600
    jobs = pd.DataFrame({
        "model": rng.choice(["llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b"], n),
        "system": rng.choice(["dgx-h100", "dgx-b200", "gb200-nvl72"], n),
        "gpus": rng.choice([8, 16, 64], n), "tp": rng.choice([1, 2, 4, 8], n), "pp": rng.choice([1, 2, 4], n),
        "global_batch": rng.choice([64, 128, 256], n), "micro_batch": rng.choice([1, 2], n),
        "zero": rng.choice([0, 1, 2, 3], n), "recompute": rng.choice(["none", "selective", "full", "auto"], n),
        "offload": rng.choice(["", "", "optimizer", "weights", "optimizer,weights"], n),
    })  # fmt: skip
    result = evaluator("training")(jobs)
    valid = result[result.valid]
    assert len(valid) > 100
    parts = sum(valid[f"memory_{c}_bytes"] for c in CATEGORIES)
    assert np.allclose(parts, valid.memory_per_gpu_bytes, rtol=1e-9)
    assert (valid[[f"memory_{c}_bytes" for c in CATEGORIES]] >= 0).all().all()
    capacity = valid.system.map({s: cluster(s).gpu.memory_capacity.value for s in valid.system.unique()})
    host = valid.system.map({s: cluster(s).host_memory_per_gpu for s in valid.system.unique()})
    in_host = valid.offloaded_state_bytes + valid.offloaded_bytes <= host
    assert (valid.fits == ((valid.memory_per_gpu_bytes <= capacity * (1 + 1e-9)) & in_host)).all()
    assert (valid.offloaded_state_bytes > 0).sum() > 50


@pytest.mark.parametrize(
    "job",
    [dict(model="llama3-8b", system="dgx-h100", gpus=8, global_batch=128, zero=3, recompute="full"),
     dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=8, pp=2, global_batch=256, sequence_parallel=True),
     dict(model="mixtral-8x7b", system="gb200-nvl72", gpus=16, ep=8, global_batch=512, zero=1)],
)  # fmt: skip
def test_micro_batch_max_is_the_largest_that_fits(job):
    """It fits, and the next divisor of the global batch that makes a valid layout does not."""
    chosen = train(**job, micro_batch="max")
    m = chosen["micro_batch"]
    assert chosen["fits"] and "the largest that fits" in chosen["notes"][0]
    larger = [d for d in range(m + 1, job["global_batch"] + 1) if job["global_batch"] % d == 0]
    for d in larger:
        try:
            result = train(**job, micro_batch=d)
        except CommodelError:
            continue  # not a valid layout at that micro-batch
        assert not result["fits"], d
        break


def test_micro_batch_max_says_when_nothing_fits_and_what_would():
    """No micro-batch of Llama 3 70B fits one node unsharded: an error, naming the memory at micro-batch
    1 and the changes that make it fit."""
    with pytest.raises(
        CommodelError,
        match=r"no micro-batch fits: at micro-batch 1 the job does not fit: .* GiB.* makes it fit",
    ):
        train(model="llama3-70b", system="dgx-h100", gpus=8, global_batch=64, micro_batch="max")


def test_block_recomputation_trades_memory_for_time_layer_by_layer():
    """--recompute-layers N (Megatron's block method): each layer more recomputed frees memory and
    costs time; all of a stage's layers is --recompute full, none is no recomputation; with virtual
    stages N counts per chunk."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    base = {"model": "llama3-70b", "system": "dgx-h100", "gpus": 64, "tp": 8, "pp": 4, "micro_batch": 2,
            "global_batch": 256}  # fmt: skip
    jobs = pd.DataFrame(
        [{**base, "recompute": "full" if n else "none", "recompute_layers": n} for n in range(21)]
    )
    table = evaluator("training")(jobs)
    fits = table.fits.to_numpy()
    assert not fits[0] and fits[-1] and (np.diff(fits.astype(int)) >= 0).all()  # fewer layers: none fit
    assert (table.valid == table.fits).all() and table.problem[~fits].str.startswith("does not fit").all()
    assert (np.diff(table.memory_per_gpu_bytes) < 0).all() and (np.diff(table.step_time_s[fits]) > 0).all()
    assert table.step_time_s[~fits].isna().all()
    full = evaluator("training")(pd.DataFrame([{**base, "recompute": "full"}]))
    assert table.step_time_s.iloc[-1] == pytest.approx(full.step_time_s[0])
    assert table.memory_per_gpu_bytes.iloc[-1] == pytest.approx(full.memory_per_gpu_bytes[0])
    chunked = evaluator("training")(
        pd.DataFrame([{**base, "vpp": 2, "recompute": "full", "recompute_layers": 5}])
    )
    assert chunked.recompute_share[0] == pytest.approx(0.5)  # 5 of each chunk's 10 layers
    job = {**base, "recompute": "full", "sequence_parallel": True}
    said = [n for n in (9, 10, 99) if any("covers every layer" in note for note in
            train(**job, vpp=2, recompute_layers=n)["notes"])]  # fmt: skip
    assert said == [10, 99]  # Megatron takes any N; the job says when it is all of a chunk


def test_async_tensor_parallelism_hides_the_backward_column_collectives_and_never_costs_more():
    """Megatron-Core's and Transformer Engine's layers without userbuffers start a column GEMM's
    backward gather and reduce-scatter beside the GEMMs they do not feed: over random layouts never
    more exposed TP time than running every collective between the GEMMs, less where there is TP
    communication, nothing at tp 1; with or without sequence parallelism (then an allreduce)."""
    rng = np.random.default_rng(11)
    net, c = model("llama3-70b"), cluster("dgx-h100", 8)
    for _ in range(20):
        tp = int(rng.choice([1, 2, 4, 8]))
        x = layouts(tp=tp, pp=1, dp=64 // tp, global_batch=int(rng.choice([64, 128])) * 64 // tp,
                    seq=int(rng.choice([1024, 4096, 8192])), sequence_parallel=bool(rng.integers(2)) and tp > 1,
                    recompute="full")  # fmt: skip
        none, hidden = (
            train_step(net, c, x, strategy="sm-partition", tp_overlap=m)["tp_comm_s"]
            for m in ("none", "async")
        )
        assert np.all(hidden <= none * (1 + 1e-12)), tp
        assert np.all(hidden < none) if tp > 1 else np.all(hidden == 0)


def test_a_job_fills_its_scale_up_domains_evenly():
    """GPUs per domain: the largest divisor of the job's GPU count that fits the domain (256 GPUs on
    72-GPU racks run as 4 x 64; 100 as 2 x 50; a prime count spreads one per domain), per element."""
    from commodel.workloads.parallel.groups import job_domain

    gpus = np.array([[256.0, 144.0, 72.0], [100.0, 7.0, 8.0]])
    assert job_domain(gpus, 72).tolist() == [[64, 72, 72], [50, 7, 8]]
    assert job_domain(gpus, 8).tolist() == [[8, 8, 8], [5, 7, 8]]
    assert float(job_domain(13, 8)) == 1.0 and job_domain(np.full(1000, 36.0), 72).tolist() == [36.0] * 1000
