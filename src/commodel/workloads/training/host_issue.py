"""The host that issues a training step's kernels (Megatron-Core on PyTorch eager), and CUDA graphs.

Every operator a layer runs costs the host its framework dispatch (Python module code, PyTorch's
dispatcher and autograd; the system record's ``initiation.op_dispatch``, by CPU) plus the driver's
launch (the GPU record's ``launch_overhead``). The host runs ahead of the GPU by as many kernels as the
launch queue holds, so a layer's pass takes ``max(G, H)``: the GPU's work ``G`` (compute and the
communication it exposes) or the host's issue ``H``, whichever is longer; the GPU waits
``max(0, H - G)`` (Megatron-LM's MoE guide: the cure for CPU overhead is "CUDA graphs, or a larger
micro-batch", since ``G`` grows with the micro-batch and ``H`` does not).

**Operators per layer** (:data:`SCOPE_OPS`, forward, by Megatron's CUDA-graph scope; assumed from
Megatron-Core 0.15's module structure, each within a factor of 1.5): ``attn`` the input norm, QKV GEMM,
rotary embedding, attention and its output projection with the bias-dropout-add and the views and
splits between them; ``mlp`` the pre-MLP norm, two GEMMs, the activation and the residual;
``moe_router`` the router GEMM, score function, top-k and the load-balancing loss terms;
``moe_preprocess`` the tokens per expert and the permutation indices; ``moe`` the permutation, the two
all-to-alls, the sort by local expert and back, the activation and unpermute, plus
:data:`OPS_PER_LOCAL_EXPERT` per expert on the GPU (Transformer Engine's ``GroupedLinear`` issues one
GEMM per local expert for fc1 and fc2). Each of a scope's Transformer Engine GEMM modules
(:data:`GEMM_MODULES`; MLA's attention has more, :func:`attention_modules`) adds the host record's ``te_module_ops`` operators' worth of its own Python, and FP8
:data:`FP8_OPS_PER_GEMM_MODULE` operators (quantize, scale update). The backward issues :data:`BACKWARD_OPS` times the forward's operators
(input- and weight-gradient GEMMs, elementwise gradients). An MoE model's dense layers run ``attn`` and
``mlp``; its MoE layers ``attn``, the router, preprocess and ``moe`` (and ``mlp`` for shared experts).

**Synchronization**: dropless experts have dynamic shapes, so every MoE layer's forward waits once
for its tokens per expert on the host, whatever the dispatcher: Megatron-Core's grouped experts turn
them into a host list for Transformer Engine's ``GroupedLinear`` (``TEGroupedMLP.forward``:
``tokens_per_expert.tolist()``, 0.15), the all-to-all dispatcher copies them for its split sizes, and
DeepEP's normal dispatch has the CPU wait for its received counts (``fused_a2a.py``: "not compatible
with CUDA graph"). A capacity factor's padded experts have static shapes and no wait
(:mod:`commodel.workloads.moe.token_drop`). The host cannot run ahead past it: the layer's forward
takes ``max(G, H)`` plus the refill, the GPU idle while the host sees the stream end, copies the
counts and issues the next kernel (:func:`commodel.workloads.moe.dispatch.count_wait_s`).

**Recomputation** runs forward code again in the backward, so the host issues it again: full
recomputation the layer's whole forward (a captured scope one replay more), a whole-module
checkpoint (``--recompute-modules mlp``, ``shared_experts``, ``moe``) its scopes' forward operators,
and a recomputed MoE layer's dispatcher waits for its counts again. The output-discarding
checkpoints (the norms, the experts' activation, MLA's up-projections) and selective recomputation
(the attention core) re-run one or two kernels each, which this leaves out.

**CUDA graphs** (``--cuda-graphs``, Megatron's ``--cuda-graph-scope`` names,
:data:`GRAPH_SCOPES`): a
captured scope costs one graph replay (``initiation.graph_replay``) per pass instead of its
operators' issue; ``full_iteration`` captures the whole step (one replay per step, none per layer).
Dropless experts cannot be captured (``moe``, and ``full_iteration`` of an MoE model): the job refuses it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.choice_bits import bits_of, has_bit
from commodel.errors import unknown
from commodel.hardware.cluster import Cluster
from commodel.workloads.model.recompute import has_module
from commodel.workloads.model.schema import Transformer
from commodel.workloads.moe.dispatch import count_wait_s
from commodel.workloads.moe.token_drop import dropless
from commodel.workloads.parallel.layout import Layout

#: CUDA-graph scopes a job may capture (``--cuda-graphs``, Megatron's ``--cuda-graph-scope`` names),
#: each a bit of :attr:`~commodel.workloads.parallel.layout.Layout.cuda_graphs`; ``none`` is no bit.
GRAPH_SCOPES = {
    "none": 0,
    "attn": 1,
    "mlp": 2,
    "moe_router": 4,
    "moe_preprocess": 8,
    "moe": 16,
    "full_iteration": 32,
}

#: Forward operators per layer by CUDA-graph scope (module docstring; assumed, within a factor of 1.5).
SCOPE_OPS = {"attn": 14.0, "mlp": 8.0, "moe_router": 10.0, "moe_preprocess": 10.0, "moe": 14.0}

#: Operators Transformer Engine's ``GroupedLinear`` adds per local expert in the forward: fc1's and
#: fc2's GEMMs, one per expert.
OPS_PER_LOCAL_EXPERT = 2.0

#: Operators FP8 adds per GEMM module in the forward (quantize the input, update the scale).
FP8_OPS_PER_GEMM_MODULE = 2.0

#: Transformer Engine GEMM modules (``LayerNormLinear``, ``Linear``, ``GroupedLinear``) in each of
#: ``attn``, ``mlp`` and ``moe``: QKV and output projection, fc1 and fc2.
GEMM_MODULES = 2.0

#: The modules a host-time microbenchmark times one forward of: ``torch.nn.Linear`` and Transformer
#: Engine's ``Linear`` (:func:`module_ops`).
MODULES = ("torch-linear", "te-linear")

#: Backward operators per forward operator: a GEMM's input- and weight-gradient GEMMs, an elementwise
#: operator's gradient, autograd's accumulation (measured 2.29 on small eager Transformer layers,
#: ``benchmarks/measure_host_ops.py``).
BACKWARD_OPS = 2.0


def graph_bits(names: str) -> int:
    """The :data:`GRAPH_SCOPES` bits of comma-separated scope names ("" or none for none)."""
    return bits_of(GRAPH_SCOPES, names)


def captures(bits: ArrayLike, scope: str) -> np.ndarray:
    """Where ``bits`` (:attr:`~commodel.workloads.parallel.layout.Layout.cuda_graphs`) capture ``scope``."""
    return has_bit(bits, GRAPH_SCOPES[scope])


def graph_problem(model: Transformer, x: Layout) -> tuple[np.ndarray, str]:
    """Dropless experts have dynamic shapes: their layer, or a whole MoE step, cannot be captured."""
    captured = captures(x.cuda_graphs, "moe") | captures(x.cuda_graphs, "full_iteration")
    return np.asarray(model.moe is not None and captured & dropless(x)), (
        "dropless experts have dynamic shapes, so CUDA graphs cannot capture the moe scope or the full "
        "iteration of a mixture-of-experts model (Megatron captures attn, moe_router and moe_preprocess; "
        "a --capacity-factor pads them to static shapes)"
    )


def unrun_scope_problem(model: Transformer, x: Layout) -> tuple[np.ndarray, str]:
    """A captured scope the model never runs (the MoE router on a dense model; the dense MLP where
    every layer is a MoE layer without shared experts) is a mistake, not a free graph."""
    absent = [scope for scope, share in scope_shares(model).items() if share == 0]
    mask = np.zeros(np.shape(x.cuda_graphs), dtype=bool)
    for scope in absent:
        mask = mask | captures(x.cuda_graphs, scope)
    return mask, f"--cuda-graphs: this model runs no {', no '.join(absent)} scope to capture"


def scope_shares(model: Transformer) -> dict[str, float]:
    """The share of the model's layers that run each scope (an MoE model's dense layers have
    ``mlp``; its MoE layers the router, preprocess and ``moe``, and ``mlp`` too with shared experts)."""
    moe = model.moe_layers / model.layers if model.moe is not None else 0.0
    shared = model.moe is not None and model.moe.shared_experts > 0
    mlp = 1.0 if shared else 1.0 - moe
    return {"attn": 1.0, "mlp": mlp, "moe_router": moe, "moe_preprocess": moe, "moe": moe}


def capturable_scopes(model: Transformer, padded: bool = False) -> str:
    """The CUDA graphs a tuned recipe captures for ``model``: the whole iteration of a dense model;
    every scope an MoE model's layers run but the experts, whose dropless shapes are dynamic (with
    them too where a capacity factor pads them)."""
    if model.moe is None:
        return "full_iteration"
    shares = scope_shares(model)
    return ",".join(s for s, share in shares.items() if share > 0 and (s != "moe" or padded))


def attention_modules(model: Transformer) -> float:
    """Transformer Engine GEMM modules in a layer's attention: the QKV and output projections, or
    MLA's five (Megatron-Core's ``MLASelfAttention``: the query's down and up projections, or one
    query projection without a query LoRA, the key-value down and up projections, the output
    projection)."""
    if model.mla is None:
        return GEMM_MODULES
    return 5.0 if model.mla.q_lora_rank else 4.0


def scope_ops(
    model: Transformer, x: Layout, fp8: bool, te_module_ops: float
) -> dict[str, tuple[np.ndarray, float]]:
    """Per scope: forward operators in a layer that has it, and the share of the layers that do, each
    Transformer Engine GEMM module adding ``te_module_ops`` operators' worth of its own Python. A
    module beyond a scope's :data:`GEMM_MODULES` adds its GEMM to the scope's operators."""
    module = te_module_ops + (FP8_OPS_PER_GEMM_MODULE if fp8 else 0.0)
    attention = attention_modules(model)
    local = model.moe.experts / np.asarray(x.ep, dtype=float) if model.moe is not None else 0.0
    extra = {
        "attn": attention * module + attention - GEMM_MODULES,
        "mlp": GEMM_MODULES * module,
        "moe": GEMM_MODULES * module + OPS_PER_LOCAL_EXPERT * local,
    }
    shape = np.shape(x.ep)
    return {
        name: (np.broadcast_to(SCOPE_OPS[name] + extra.get(name, 0.0), shape), share)
        for name, share in scope_shares(model).items()
    }


def module_ops(cluster: Cluster, module: str) -> float:
    """A module's forward as operators' worth of host time on ``cluster``'s host: ``torch.nn.Linear``
    issues one operator; Transformer Engine's ``Linear`` one and its own Python (``te_module_ops``)."""
    if module not in MODULES:
        raise unknown("module", module, MODULES)
    return 1.0 + (cluster.system.initiation.te_module_ops.value if module == "te-linear" else 0.0)


def module_host_s(cluster: Cluster, module: str) -> float:
    """Host seconds of one module's forward (:func:`module_ops`) on ``cluster``'s host."""
    return module_ops(cluster, module) * cluster.op_issue_s


def remade_scopes(model: Transformer, x: Layout) -> dict[str, np.ndarray]:
    """Per scope, the share of the layers whose backward runs that scope's forward again: all of them
    under full recomputation; a whole-module checkpoint's scopes in the layers that have them (``mlp``
    the dense layers' MLP, ``shared_experts`` the MoE layers' shared experts, ``moe`` the whole MoE
    layer: router, preprocessing, experts and its shared experts)."""
    full = np.asarray(x.recompute) == 2
    shares = scope_shares(model)
    moe = shares["moe"]
    shared = moe if model.moe is not None and model.moe.shared_experts else 0.0
    whole_moe = has_module(x.recompute_modules, "moe")
    shared_again = has_module(x.recompute_modules, "shared_experts") | whole_moe
    mlp = (1 - moe) * has_module(x.recompute_modules, "mlp") + shared * shared_again
    return {
        scope: np.where(full, shares[scope], again)
        for scope, again in (("attn", 0.0), ("mlp", mlp), ("moe_router", moe * whole_moe),
                             ("moe_preprocess", moe * whole_moe), ("moe", moe * whole_moe))
    }  # fmt: skip


def host_issue_s(model: Transformer, cluster: Cluster, x: Layout, fp8: bool) -> tuple[np.ndarray, np.ndarray]:
    """Host seconds to issue one layer's forward and backward for one micro-batch, averaged over the
    layers: a captured scope at one graph replay per pass, nothing per layer under ``full_iteration``;
    the backward issues what recomputation runs again of the forward (:func:`remade_scopes`)."""
    host, op = cluster.system.initiation, cluster.op_issue_s
    fwd = bwd = np.zeros(np.shape(x.cuda_graphs))
    again = remade_scopes(model, x)
    for name, (ops, share) in scope_ops(model, x, fp8, host.te_module_ops.value).items():
        captured = captures(x.cuda_graphs, name)
        forward = np.where(captured, host.graph_replay.value, ops * op)  # in a layer that runs it
        fwd = fwd + share * forward
        bwd = bwd + share * np.where(captured, host.graph_replay.value, BACKWARD_OPS * ops * op)
        bwd = bwd + again[name] * forward
    whole = captures(x.cuda_graphs, "full_iteration")
    return np.where(whole, 0.0, fwd), np.where(whole, 0.0, bwd)


def host_wait_s(
    model: Transformer, cluster: Cluster, x: Layout, fp8: bool, gpu_fwd_s: np.ndarray, gpu_bwd_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per layer and micro-batch the GPU waits for the host in the forward and in the
    backward: ``max(0, H - G)`` per pass, plus the refill after the dispatcher's synchronization in
    MoE layers (module docstring), in the backward too where recomputation runs the MoE layer again.
    The GPU is idle meanwhile: a collective on its own stream runs on undisturbed."""
    fwd, bwd = host_issue_s(model, cluster, x, fp8)
    refill = dropless(x) * count_wait_s(cluster)
    again = remade_scopes(model, x)["moe"]
    return (
        np.maximum(fwd - gpu_fwd_s, 0.0) + scope_shares(model)["moe"] * refill,
        np.maximum(bwd - gpu_bwd_s, 0.0) + again * refill,
    )
