"""MoE expert-parallel dispatch and combine as DeepEP runs them, over GPU-initiated transports (NVSHMEM
IBGDA, NCCL GIN with its GDAKI or proxy backend; Hamidouche et al., arXiv:2511.15076).

Per GPU and MoE layer the router sends :func:`commodel.workloads.transformer.routed_copies` token
copies of ``hidden`` elements (FP8 dispatched, BF16 combined), to experts spread evenly over the
``ep`` GPUs of ``ep / g`` nodes of ``g`` GPUs (a copy stays on its GPU with probability ``1 / ep``,
in its node with ``(g - 1) / ep``).

- **low-latency** (decode): every copy is its own RDMA write from the GPU, no forwarding; its cost is
  the put latency of the scheme plus the largest of the messages' issue time (``messages / rate``,
  :func:`commodel.comm.initiation.message_rate` with DeepEP's issuing warps), the network bytes over
  the GPU's share of the NICs and the in-node bytes over NVLink.
- **high-throughput** (prefill, training): a token crosses the network once per remote node its
  ``k`` experts land on (:func:`forwarded_copies`) and is forwarded over NVLink to the experts there;
  large chunks, so bandwidth binds: network bytes over the NIC share against the forwarded bytes over
  NVLink, whichever is slower, plus one put latency. Megatron-Core runs these kernels as its flex
  dispatcher's DeepEP backend; training prices them with :func:`high_throughput_s`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm.fabric import Fabric
from commodel.comm.initiation import available, message_rate, path_of, put_latency
from commodel.errors import CommodelError, unknown
from commodel.hardware.cluster import Cluster
from commodel.workloads.groups import Group
from commodel.workloads.schema import MoE, Transformer
from commodel.workloads.transformer import routed_copies

MODES = ("low-latency", "high-throughput")

#: Issuers of RDMA writes at once: a DeepEP low-latency kernel's warps when the GPU initiates (assumed:
#: 4 issuing warps on each of the 24 SMs DeepEP takes), else the one proxy or host thread per GPU.
ISSUING_WARPS = 96


def issuers(scheme: str) -> int:
    """Threads issuing one GPU's messages under ``scheme``."""
    return ISSUING_WARPS if scheme in ("kernel-initiated", "kernel-triggered") else 1


#: SMs DeepEP's high-throughput kernels hold (Megatron-Core's ``--moe-deepep-num-sms`` default; the
#: DeepSeek-V3 report's 20).
DEEPEP_SMS = 20

#: Bytes per element dispatched (FP8 with per-128 scales) and combined (BF16).
DISPATCH_BYTES, COMBINE_BYTES = 1 + 4 / 128, 2.0


def domains_reached(moe: MoE, domains: ArrayLike) -> np.ndarray:
    """Scale-up domains one token's ``k`` experts land on, in expectation, with the experts spread
    evenly over ``domains`` in contiguous blocks: ``n (1 - (1 - 1/n)^k)``, ``n`` the domains the router
    may choose from. That is all ``D`` of them, or under group-limited routing (``G`` groups, the best
    ``M``; DeepSeek-V3's node-limited routing: at most 4 of 8 nodes) the chosen groups' share,
    ``min(D, M max(D / G, 1))`` (groups smaller than a domain taken as landing on distinct domains)."""
    d = np.asarray(domains, dtype=float)
    n = (
        d
        if not moe.router_groups
        else np.minimum(d, moe.router_group_top_k * np.maximum(d / moe.router_groups, 1))
    )
    return n * (1 - (1 - 1 / n) ** moe.top_k)


def forwarded_copies(
    moe: MoE, tokens: ArrayLike, domains: ArrayLike, per_domain: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(network, NVLink) token copies one GPU sends in a high-throughput dispatch over ``domains``
    scale-up domains of ``per_domain`` GPUs: each token once to every remote domain its experts land
    on, ``tokens x reached x (D - 1) / D`` (:func:`domains_reached`); each of its ``k`` copies forwarded
    over NVLink unless its expert sits on the GPU it reaches the domain at, ``tokens k (g - 1) / g``."""
    t, d, g = (np.asarray(v, dtype=float) for v in (tokens, domains, per_domain))
    network = t * domains_reached(moe, d) * (d - 1) / d
    return network, t * moe.top_k * (g - 1) / g


def cross_domain_problem(c: Cluster) -> str:
    """Why DeepEP cannot dispatch across ``c``'s scale-up domains, or "" when it can: its kernels put
    over RDMA from the GPU (NVSHMEM's IBGDA), so the NIC must take GPU-initiated work requests."""
    if c.scale_out.initiation is not None and available("kernel-initiated", path_of(c)):
        return ""
    return (
        f"the deepep dispatcher needs GPU-initiated RDMA across nodes, which {c.scale_out.description} lacks"
    )


def high_throughput_s(
    model: Transformer, c: Cluster, fab: Fabric, where: Group, tokens: ArrayLike, element_bytes: ArrayLike
) -> np.ndarray:
    """Seconds of one high-throughput dispatch (or combine) of ``tokens`` per GPU over the
    expert-parallel group ``where``, elements of ``element_bytes``: the network copies
    (:func:`forwarded_copies`) over the GPU's share of its domain's NICs (``fab`` as
    :func:`~commodel.workloads.groups.shared_nics` gives it) against the forwarded ones over its
    scale-up links, whichever is slower, plus one GPU-initiated put across domains, as one kernel
    call (:meth:`~commodel.comm.fabric.Fabric.call_time`)."""
    network, nvlink = forwarded_copies(model.moe, tokens, where.nodes, where.per_node)
    size = model.hidden * np.asarray(element_bytes, dtype=float)
    spans = where.spans_nodes
    put = float(put_latency("kernel-initiated", path_of(c), 0)) if np.any(spans) else 0.0
    moving = np.maximum(network * size / fab.net_Bps(1), nvlink * size / fab.up_Bps(where.per_node))
    return np.where(network + nvlink > 0, fab.call_time(moving + np.where(spans, put, 0.0)), 0.0)


def exchange(
    mode: str, scheme: str, model: Transformer, c: Cluster, ep: int, tokens: float, element_bytes: float
) -> dict[str, float]:
    """Seconds of one dispatch (or combine) per GPU, and which resource binds it."""
    if mode not in MODES:
        raise unknown("DeepEP mode", mode, MODES)
    if model.moe is None:
        raise CommodelError(f"{model.description} has no experts to dispatch to")
    g = min(c.gpus_per_node, ep)
    if ep % g:
        raise CommodelError(f"ep ({ep}) must fill whole nodes of {c.gpus_per_node} GPUs")
    path = path_of(c)
    nodes = ep / g
    copies = float(routed_copies(model, tokens))
    size = model.hidden * element_bytes
    nic_share = path.bandwidth * c.system.scale_out.nics_per_node.value / c.gpus_per_node
    nvlink = c.scale_up.bandwidth.value * c.scale_up.efficiency.value * c.system.scale_up.links_per_gpu.value
    if mode == "low-latency":
        remote = copies * (ep - g) / ep
        local = copies * (g - 1) / ep
        terms = {
            "message issue": remote / message_rate(scheme, path, issuers(scheme)),
            "network": remote * size / nic_share,
            "NVLink": local * size / nvlink,
        }
    else:
        network, forwarded = (float(v) for v in forwarded_copies(model.moe, tokens, nodes, g))
        terms = {"network": network * size / nic_share, "NVLink": forwarded * size / nvlink}
    binding = max(terms, key=terms.get)
    latency = float(put_latency(scheme, path, 0)) if nodes > 1 else 0.0
    return {"time_s": latency + terms[binding], "binding": binding, **{f"{k}_s": v for k, v in terms.items()}}


def dispatch_combine(mode: str, scheme: str, model: Transformer, c: Cluster, ep: int, tokens: float) -> dict:
    """One MoE layer's dispatch and combine per GPU: seconds of each, their sum, and what binds."""
    dispatch = exchange(mode, scheme, model, c, ep, tokens, DISPATCH_BYTES)
    combine = exchange(mode, scheme, model, c, ep, tokens, COMBINE_BYTES)
    return {
        "dispatch_s": dispatch["time_s"],
        "combine_s": combine["time_s"],
        "time_s": dispatch["time_s"] + combine["time_s"],
        "binding": combine["binding"],
    }
