"""Training on a cluster of unlike node groups (AMD and NVIDIA nodes in one job): heterogeneity across
pipeline stages only, as Hu et al. run it (arXiv 2602.18007); tensor, context and data parallel groups
stay inside one group, each on its vendor's own library.

A cluster is written ``SYSTEM:NODES,SYSTEM:NODES`` (:func:`node_groups`); the pipeline's stages fill
the groups in that order, ``gpus_g / (tp cp dp)`` stages each. Every group prices a layer and
micro-batch with its own GPU and fabric (:func:`commodel.workloads.training.microbatch.per_microbatch`). Layers
per stage are given, or balanced so every stage takes the same time: stage ``s`` of group ``g`` gets
``l_s = (T - e_s) / t_g`` layers with ``t_g`` its layer time, ``e_s`` its extra work (the logits on the
last stage) and ``T`` such that they sum to the model's layers, rounded to whole layers by largest
remainder. Where stages of two vendors meet, activations and gradients cross by
:func:`commodel.comm.cross_vendor.cross_vendor_time` (each tensor-parallel rank sends its 1/tp slice);
between stages of one vendor, by its own library; under the ``gloo`` transport the gradient
reductions too run on the host. Groups of one system (``dgx-h100:1,dgx-h100:1``)
are a homogeneous cluster with speed-balanced stages: the best a homogeneous counterpart reaches.

1F1B with per-stage times ``t_s`` (a micro-batch's forward and backward) and ``m`` micro-batches:
the largest of the bounds each stage sets (:func:`~commodel.workloads.training.schedule.stages_1f1b`;
``(m - 1) max_s t_s + sum_s t_s`` where the last stage is the slowest), plus the slowest group's
exposed gradient reduction and optimizer, scaled by its largest stage's share of the layers. Uniform
stages give the homogeneous model's ``(m + pp - 1) t``.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from commodel.comm.cross_vendor import cross_vendor_time, host_allreduce_time
from commodel.compute.precision import precision
from commodel.errors import CommodelError
from commodel.hardware.cluster import Cluster, cluster
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import model_flops_per_token, recompute_flops_per_token
from commodel.workloads.moe.token_drop import dropped_share
from commodel.workloads.parallel.layout import AUTO, Layout
from commodel.workloads.training.memory import (
    by_category,
    fits,
    gradient_bytes,
    memory_with_microbatches,
    stage_parameters,
)
from commodel.workloads.training.microbatch import per_microbatch
from commodel.workloads.training.schedule import stages_1f1b

_GROUP = re.compile(r"\s*([A-Za-z0-9._-]+)\s*:\s*(\d+)\s*")


def is_node_groups(system: str) -> bool:
    """Whether ``system`` names node groups (``SYSTEM:NODES,...``) rather than one system."""
    return ":" in system


def parse_node_groups(text: str) -> list[tuple[str, int]]:
    """``"mi300x-8:2,dgx-h100:2"`` as ``[("mi300x-8", 2), ("dgx-h100", 2)]``; malformed text is an
    error that shows the form."""
    groups = []
    for part in text.split(","):
        match = _GROUP.fullmatch(part)
        if match is None or int(match.group(2)) < 1:
            raise CommodelError(
                f"cannot read node group '{part.strip()}' in '{text}': write SYSTEM:NODES with at least one "
                "node, groups separated by commas (mi300x-8:2,dgx-h100:2)"
            )
        groups.append((match.group(1), int(match.group(2))))
    return groups


def groups_size(
    groups: list[tuple[Cluster, int]], gpus: np.ndarray, nodes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list]:
    """A job's GPUs and nodes on node groups (``(cluster, nodes)`` each): the groups' own; a job that
    states others breaks a rule, ``(mask, message)``."""
    own_nodes = sum(n for _, n in groups)
    own_gpus = sum(c.gpus_per_node * n for c, n in groups)
    stated = (~np.isnan(nodes) & (nodes != own_nodes)) | (~np.isnan(gpus) & (gpus != own_gpus))
    problem = (stated, f"the node groups are {own_nodes} nodes of {own_gpus} GPUs")
    return np.full(len(gpus), float(own_gpus)), np.full(len(gpus), float(own_nodes)), [problem]


def group_rules(node_groups: bool, x: Layout, stage_layers: np.ndarray) -> list:
    """``(mask, message)`` for each rule of stating layers per stage and of recomputing across node
    groups: stage layers apply to node groups only; auto recomputation needs one kind of node."""
    if not node_groups:
        return [(stage_layers != "", "stage layers apply to node groups (SYSTEM:NODES,...)")]
    return [(x.recompute == AUTO, "recompute auto needs one kind of node; across node groups choose "
             "none, selective or full")]  # fmt: skip


def node_groups(text: str) -> list[Cluster]:
    """The clusters of each node group in ``text``."""
    return [cluster(name, nodes) for name, nodes in parse_node_groups(text)]


def stage_plan(groups: list[Cluster], x: Layout) -> list[int]:
    """The group index of every pipeline stage (one-row layout ``x``); a group must hold whole stages."""
    per_stage = float(x.tp[0] * x.cp[0] * x.dp[0])
    plan: list[int] = []
    for g, c in enumerate(groups):
        stages = c.total_gpus / per_stage
        if stages != int(stages) or stages < 1:
            raise CommodelError(
                f"{c.name} x {c.nodes} ({c.total_gpus} GPUs) does not hold whole pipeline stages of "
                f"tp x cp x dp = {per_stage:g} GPUs"
            )
        plan += [g] * int(stages)
    if len(plan) != int(x.pp[0]):
        raise CommodelError(f"the node groups hold {len(plan)} pipeline stages, but pp is {int(x.pp[0])}")
    return plan


def balanced_layers(layers: int, layer_s: np.ndarray, extra_s: np.ndarray) -> np.ndarray:
    """Whole layers per stage that equalize ``l_s t_s + e_s`` (module docstring)."""
    target = (layers + np.sum(extra_s / layer_s)) / np.sum(1 / layer_s)
    ideal = np.maximum((target - extra_s) / layer_s, 0.0)
    ideal = ideal * layers / ideal.sum()
    whole = np.floor(ideal)
    short = int(layers - whole.sum())
    whole[np.argsort(whole - ideal)[:short]] += 1  # largest remainders first
    return whole


def parse_stage_layers(text: str, layers: int, stages: int) -> np.ndarray:
    """Layers per stage as given (``"18,14"``); they must cover the model's layers."""
    try:
        given = np.array([int(v) for v in text.split(",")], dtype=float)
    except ValueError:
        raise CommodelError(f"cannot read stage layers '{text}': whole numbers separated by commas") from None
    if len(given) != stages or np.any(given < 1) or given.sum() != layers:
        raise CommodelError(
            f"stage layers '{text}' must give each of the {stages} pipeline stages at least one layer and "
            f"sum to the model's {layers} layers"
        )
    return given


def _sends(
    model: Transformer,
    groups: list[Cluster],
    plan: list[int],
    x: Layout,
    parts: list[dict],
    transport: str,
    nics: int | None,
) -> tuple[np.ndarray, float]:
    """Each stage's pipeline sends per micro-batch: between stages of one vendor by its library, where
    vendors meet by the chosen ``transport`` (a forward and a backward each), every one on the host
    path under ``gloo`` (Gloo for all communication); and one such crossing's seconds."""
    act = x.tokens[0] * model.hidden * 2 / x.tp[0]
    vendor = [groups[g].gpu.vendor for g in plan]
    hosted = transport == "gloo"
    boundary = np.array([hosted or vendor[s] != vendor[s + 1] for s in range(len(plan) - 1)] + [False])
    crossing = [
        float(cross_vendor_time(transport, act, groups[plan[s]], groups[plan[s + 1]], groups[plan[s]].gpus_per_node,
                                nics or groups[plan[s]].system.scale_out.nics_per_node.value))
        for s in np.flatnonzero(boundary)
    ]  # fmt: skip
    cross = max(crossing, default=0.0)
    sends = np.array([float(parts[g]["pp_exposed_s"][0]) for g in plan])
    return np.where(boundary | np.concatenate([[False], boundary[:-1]]), 2 * cross, sends), cross


def _gradient_reduction_s(
    model: Transformer, groups: list[Cluster], x: Layout, parts: list[dict], share: np.ndarray, transport: str
) -> float:
    """The end-of-step gradient reduction the slowest group exposes, scaled by its largest stage's
    share of the layers: by the group's own library, or under ``gloo`` by Gloo on the host
    (:func:`~commodel.comm.cross_vendor.host_allreduce_time`), priced exposed: the most it could hide
    behind, the last micro-batch's backward, is a small share of it."""
    if transport != "gloo":
        return max(float(parts[g]["dp_exposed_s"][0]) * share[g] for g in range(len(groups)))
    if int(x.zero[0]) == 3:
        raise CommodelError(
            "Gloo for all communication prices ZeRO 0-2's gradient reduction; ZeRO-3 is not modelled"
        )
    grads = float((sum(stage_parameters(model, x)[:2]) * gradient_bytes(x))[0])
    return max(float(host_allreduce_time(grads * share[g], int(x.dp[0]), c)) for g, c in enumerate(groups))


def _one_kind_only(x: Layout) -> None:
    """Refuse what is priced for one kind of node only."""
    one_kind = ("dualpipe", "first_stage_layers", "last_stage_layers", "ends_as_layers", "mtp_layers")
    if int(x.vpp[0]) > 1 or any(getattr(x, name)[0] for name in one_kind):
        raise CommodelError(
            "across node groups, interleaving (vpp > 1), DualPipe, first and last stage layers, the "
            "embedding and loss as layers and multi-token prediction are not modelled; give the layers "
            "per stage with --stage-layers"
        )


def _group_memory(
    model: Transformer, groups: list[Cluster], x: Layout, parts: list[dict], share: np.ndarray
) -> tuple[dict[str, float], bool]:
    """Memory by category of the fullest group's GPUs (each group's model states and activations
    scaled by its stages' share of the layers), and whether every group's GPUs fit."""
    held = [
        by_category(
            {k: v * share[g] for k, v in memory_with_microbatches(parts[g], model, x).items()},
            c.gpu.memory_capacity.value,
        )
        for g, c in enumerate(groups)
    ]
    totals = [float(h["memory_per_gpu_bytes"][0]) for h in held]
    fit = all(bool(fits(t, c.gpu.memory_capacity.value)) for t, c in zip(totals, groups, strict=True))
    return {k: float(v[0]) for k, v in held[int(np.argmax(totals))].items()}, fit


def hetero_train_step(
    model: Transformer,
    groups: list[Cluster],
    x: Layout,
    dtype: str,
    strategy: str,
    attention_impl: str,
    transport: str,
    nics: int | None = None,
    stage_layers: str = "",
) -> dict[str, np.ndarray]:
    """One training step of the one-row layout ``x`` on node ``groups`` (module docstring): the keys of
    :func:`commodel.workloads.training.step.train_step`, and ``cross_vendor_s`` per boundary transfer."""
    x = dataclasses.replace(x, **{f.name: np.atleast_1d(getattr(x, f.name)) for f in dataclasses.fields(x)})
    _one_kind_only(x)
    plan = stage_plan(groups, x)
    parts = [
        per_microbatch(model, c, x, precision(dtype, c.gpu), strategy, attention_impl, "none") for c in groups
    ]
    layer_s = np.array([float(parts[g]["layer_s"][0]) for g in plan])
    extra_s = np.zeros(len(plan))
    extra_s[-1] = float(parts[plan[-1]]["end_s"][0])
    if stage_layers:
        layers = parse_stage_layers(stage_layers, model.layers, len(plan))
    else:
        layers = balanced_layers(model.layers, layer_s, extra_s)
    # Per micro-batch and stage: its layers, its extra work, and its pipeline sends.
    sends, cross = _sends(model, groups, plan, x, parts, transport, nics)
    other = layers * np.array([float(parts[g]["z3_layer_s"][0]) for g in plan])
    stage = layers * layer_s + extra_s + sends + other
    m = float(x.microbatches[0])
    slowest = int(np.argmax(stage))
    even = model.layers / len(plan)
    share = np.array(
        [layers[[s for s in range(len(plan)) if plan[s] == g]].max() / even for g in range(len(groups))]
    )
    dp_s = _gradient_reduction_s(model, groups, x, parts, share, transport)
    optimizer_s = max(float(parts[g]["optimizer_s"][0]) * share[g] for g in range(len(groups)))
    forward = np.array([float(parts[g]["layer_fwd_share"][0]) for g in plan])
    span = stages_1f1b(stage, forward, m)
    step = span + dp_s + optimizer_s
    g_slow = plan[slowest]
    p = parts[g_slow]
    n_layers = layers[slowest]
    tokens = x.global_batch[0] * x.seq[0]
    model_flops = tokens * model_flops_per_token(model, x.seq[0])
    hw_flops = model_flops + tokens * recompute_flops_per_token(
        model, x.seq[0], x.recompute[0], modules=x.recompute_modules[0]
    )
    gpus = sum(c.total_gpus for c in groups)
    peak = sum(c.total_gpus * c.gpu.peak_flops[precision(dtype).gemm].value for c in groups) / gpus
    memory, fit = _group_memory(model, groups, x, parts, share)
    result = {
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "tflops_per_gpu": model_flops / (step * gpus) / 1e12,
        "hw_tflops_per_gpu": hw_flops / (step * gpus) / 1e12,
        "mfu": model_flops / (step * gpus) / peak,
        **memory,
        "fits": fit,
        "recompute_share": float(x.recompute[0] == 2),
        "offload_share": 0.0,
        "offloaded_bytes": 0.0,
        "stage_imbalance": stage.max() / stage.mean() - 1,
        "dropped_share": float(dropped_share(model, x)[0]),
        "tp_domains": float(p["tp_domains"][0]),
        "compute_s": m * (n_layers * float(p["layer_compute_s"][0]) + extra_s[slowest]),
        "host_s": m * n_layers * float(p["host_exposed_s"][0]),
        "tp_comm_s": m * n_layers * float(p["tp_exposed_s"][0]),
        "cp_comm_s": m * n_layers * float(p["cp_exposed_s"][0]),
        "ep_comm_s": m * n_layers * float(p["ep_exposed_s"][0]),
        "pp_comm_s": m * sends[slowest],
        "dp_comm_s": m * other[slowest] + dp_s,
        "offload_s": 0.0,
        "bubble_s": span - m * stage.max(),
        "optimizer_s": optimizer_s,
        "cross_vendor_s": cross,
        "stage_layers": ",".join(str(int(v)) for v in layers),
    }
    return {k: np.atleast_1d(v) for k, v in result.items()}
