"""MoE expert-parallel dispatch and combine as DeepEP runs them, over GPU-initiated transports (NVSHMEM
IBGDA, NCCL GIN with its GDAKI or proxy backend; Hamidouche et al., arXiv:2511.15076).

Per GPU and MoE layer the router sends :func:`commodel.workloads.model.transformer.routed_copies` token
copies of ``hidden`` elements (FP8 dispatched, BF16 combined), to experts spread evenly over the
``ep`` GPUs of ``ep / g`` groups of ``g`` GPUs that reach each other over NVLink (a copy stays on its
GPU with probability ``1 / ep``, in its group with ``(g - 1) / ep``): a scale-up domain for the
low-latency kernels, at most :data:`DEEPEP_NVL_PEERS` of its GPUs for the high-throughput ones.

- **low-latency** (decode): every copy is its own RDMA write from the GPU, no forwarding; its cost is
  the put latency of the scheme plus the largest of the messages' issue time (``messages / rate``,
  :func:`commodel.comm.initiation.message_rate` with DeepEP's issuing warps), the network bytes over
  the GPU's share of the NICs and the in-node bytes over NVLink.
- **high-throughput** (prefill, training): a token crosses the network once per remote node its
  ``k`` experts land on and is forwarded over NVLink there, one copy per GPU holding any of its
  experts (:func:`forwarded_copies`); large chunks, so bandwidth binds: network bytes over the NIC
  share against the forwarded bytes over NVLink, whichever is slower, plus one put latency.
  Megatron-Core runs these kernels as its flex dispatcher's DeepEP backend; training prices them with
  :func:`high_throughput_s`, the scalar :func:`exchange` with the same two legs and call.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm.fabric import Fabric, fabric_of
from commodel.comm.initiation import Path, available, message_rate, path_of, put_latency
from commodel.errors import CommodelError, unknown
from commodel.hardware.cluster import Cluster
from commodel.workloads.model.schema import MoE, Transformer
from commodel.workloads.model.transformer import routed_copies
from commodel.workloads.parallel.groups import Group, group, job_domain, shared_nics
from commodel.workloads.parallel.layout import Layout

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

#: GPUs DeepEP's high-throughput kernels reach over NVLink (its ``NUM_MAX_NVL_PEERS``, 8): beyond
#: them its internode kernels go over RDMA, even inside a larger NVLink domain (a GB200 NVL72 rack):
#: DeepEP's ``Buffer`` disables NVSHMEM's multi-node NVLink unless built with ``allow_mnnvl``, and
#: Megatron-Core 0.14-0.15 builds it without. (Megatron's DeepSeek-V3 GB200 guide ran a DeepEP over
#: MNNVL: a build this constant does not describe; data/gates.toml says what it does to those rows.)
DEEPEP_NVL_PEERS = 8

#: SMs HybridEP's kernels hold (assumed, range 8-32: NVIDIA's HybridEP copies with the Tensor Memory
#: Accelerator and names no default here).
HYBRIDEP_SMS = 16


def flex_group(ep: Group, deepep: ArrayLike) -> Group:
    """The expert-parallel group as Megatron's flex dispatcher sees it: HybridEP over the whole
    NVLink domain, DeepEP over at most :data:`DEEPEP_NVL_PEERS` of its GPUs (the rest across RDMA)."""
    per_node = np.where(
        np.asarray(deepep, dtype=bool), np.minimum(ep.per_node, DEEPEP_NVL_PEERS), ep.per_node
    )
    return Group(ep.ranks, per_node)


def flex_sms(deepep: ArrayLike) -> np.ndarray:
    """SMs the flex dispatcher's kernels hold: DeepEP's or HybridEP's."""
    return np.where(np.asarray(deepep, dtype=bool), DEEPEP_SMS, HYBRIDEP_SMS)


#: Bytes per element dispatched (FP8 with per-128 scales) and combined (BF16).
DISPATCH_BYTES, COMBINE_BYTES = 1 + 4 / 128, 2.0

#: Bytes per element dispatched where the experts compute in NVFP4 and the dispatch quantizes to it
#: (SGLang's GB200 deployment: "NVFP4-quantizing DeepEP dispatch"): 4 bits and an FP8 scale per 16.
NVFP4_DISPATCH_BYTES = 0.5 + 1 / 16


def _choosable(moe: MoE, domains: ArrayLike) -> np.ndarray:
    """Scale-up domains a token's router may pick experts from: all ``D``, or under group-limited
    routing (``G`` groups, the best ``M``; DeepSeek-V3's node-limited routing: at most 4 of 8 nodes)
    the chosen groups' share, ``min(D, M max(D / G, 1))`` (groups smaller than a domain taken as
    landing on distinct domains)."""
    d = np.asarray(domains, dtype=float)
    if not moe.router_groups:
        return d
    return np.minimum(d, moe.router_group_top_k * np.maximum(d / moe.router_groups, 1))


def domains_reached(moe: MoE, domains: ArrayLike) -> np.ndarray:
    """Scale-up domains one token's ``k`` experts land on, in expectation, with the experts spread
    evenly over ``domains`` in contiguous blocks: ``n (1 - (1 - 1/n)^k)``, ``n`` the domains the router
    may choose from (:func:`_choosable`)."""
    n = _choosable(moe, domains)
    return n * (1 - (1 - 1 / n) ** moe.top_k)


def forwarded_copies(
    moe: MoE, tokens: ArrayLike, domains: ArrayLike, per_domain: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(network, NVLink) token copies one GPU sends in a high-throughput dispatch over ``domains``
    scale-up domains of ``per_domain`` GPUs.

    Network: each token once to every remote domain its experts land on, ``tokens x reached x (D -
    1) / D`` (:func:`domains_reached`). NVLink: in every domain it reaches, the token goes once to
    each GPU holding any of its ``k`` experts but the one it arrives at (DeepEP's per-rank token mask,
    ``is_token_in_rank``: one copy per destination GPU, not per expert). With the experts spread
    evenly over the ``n g`` GPUs of the ``n`` domains the router may choose from (:func:`_choosable`),
    a GPU holds one of them with probability ``q = 1 - (1 - 1/(n g))^k``: ``tokens x n (g - 1) q``
    (``k (g - 1) / g`` where the GPUs far outnumber ``k``; 4.6 copies instead of 7 for top-8 inside
    one node of 8)."""
    t, d, g = (np.asarray(v, dtype=float) for v in (tokens, domains, per_domain))
    n = _choosable(moe, d)
    network = t * domains_reached(moe, d) * (d - 1) / d
    holds = 1 - (1 - 1 / (n * g)) ** moe.top_k
    return network, t * n * (g - 1) * holds


def cross_domain_problem(c: Cluster) -> str:
    """Why DeepEP cannot dispatch across ``c``'s scale-up domains, or "" when it can: its kernels put
    over RDMA from the GPU (NVSHMEM's IBGDA), so the NIC must take GPU-initiated work requests."""
    if c.scale_out.initiation is not None and available("kernel-initiated", path_of(c)):
        return ""
    return (
        f"the deepep dispatcher needs GPU-initiated RDMA across nodes, which {c.scale_out.description} lacks"
    )


def deepep_problem(c: Cluster, x: Layout, gpus: np.ndarray) -> tuple[np.ndarray, str]:
    """``(mask, message)``: layouts whose expert groups the flex dispatcher (DeepEP beyond its NVLink
    peers, HybridEP beyond the domain) would send over RDMA where ``c`` cannot
    (:func:`cross_domain_problem`)."""
    reason = cross_domain_problem(c) if np.any(x.flex) else ""
    if not reason:
        return np.zeros(np.shape(gpus), dtype=bool), ""
    where = flex_group(group(x.ep, x.expert_tp, job_domain(gpus, c.domain_gpus)), x.deepep)
    return x.flex & where.spans_nodes, reason


def ep_sms_problem(clusters: list[Cluster], x: Layout) -> tuple[np.ndarray, str]:
    """``(mask, message)``: layouts whose expert kernels would hold more SMs (``--ep-sms``) than a GPU
    has (the fewest, on node groups)."""
    sms = min(c.gpu.compute_units.value for c in clusters)
    return np.asarray(x.ep_sms) > sms, f"--ep-sms cannot exceed the GPU's {sms:.0f} SMs"


def count_wait_s(c: Cluster) -> float:
    """Seconds the GPU idles each time a dropless dispatcher has the CPU wait for the tokens each
    expert or rank receives (DeepEP's normal dispatch: its ``notify_dispatch`` kernel exchanges the
    counts, the host waits for them to size the receive buffers, Megatron-Core's ``fused_a2a.py``: "not
    compatible with CUDA graph"; Megatron's all-to-all and grouped experts copy them to host lists):
    the host sees the stream end (``initiation.host_sync``), copies the counts and issues the next
    kernel, two operators' issue (:attr:`~commodel.hardware.cluster.Cluster.op_issue_s`), while the
    launch queue it had filled has run dry. DeepEP's low-latency kernels have no such wait: they
    receive into buffers sized for the most tokens a rank may get."""
    return c.system.initiation.host_sync.value + 2 * c.op_issue_s


def _high_throughput_terms(
    model: Transformer, c: Cluster, fab: Fabric, where: Group, tokens: ArrayLike, element_bytes: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(network, NVLink) seconds of one high-throughput dispatch (or combine) of ``tokens`` per GPU
    over the expert-parallel group ``where``, elements of ``element_bytes``: the network copies
    (:func:`forwarded_copies`) over the GPU's share of its domain's NICs (``fab`` as
    :func:`~commodel.workloads.parallel.groups.shared_nics` gives it; above the pods at their all-to-all share,
    :meth:`~commodel.comm.fabric.Fabric.pod_share`), the forwarded ones over its scale-up
    links at the share of their rate DeepEP sustains on the GPU (``expert_dispatch.nvlink_share``)."""
    network, nvlink = forwarded_copies(model.moe, tokens, where.nodes, where.per_node)
    size = model.hidden * np.asarray(element_bytes, dtype=float)
    net = fab.net_Bps(1) * fab.pod_share(where.nodes, all_to_all=True)  # above the pods: its share
    share = c.gpu.expert_dispatch.nvlink_share.value
    return network * size / net, nvlink * size / (share * fab.up_Bps(where.per_node))


def _high_throughput_call(
    c: Cluster, fab: Fabric, where: Group, network_s: np.ndarray, nvlink_s: np.ndarray, scheme: str
) -> np.ndarray:
    """One high-throughput call from its two legs: the slower, plus one put across domains by
    ``scheme``, as one kernel call (:meth:`~commodel.comm.fabric.Fabric.call_time`)."""
    spans = where.spans_nodes
    put = float(put_latency(scheme, path_of(c), 0)) if np.any(spans) else 0.0
    moving = np.maximum(network_s, nvlink_s) + np.where(spans, put, 0.0)
    return np.where(network_s + nvlink_s > 0, fab.call_time(moving), 0.0)


def high_throughput_s(
    model: Transformer, c: Cluster, fab: Fabric, where: Group, tokens: ArrayLike, element_bytes: ArrayLike
) -> np.ndarray:
    """Seconds of one high-throughput dispatch (or combine) by GPU-initiated puts: the slower of its
    network and NVLink legs (:func:`_high_throughput_terms`), plus one put across domains."""
    legs = _high_throughput_terms(model, c, fab, where, tokens, element_bytes)
    return _high_throughput_call(c, fab, where, *legs, "kernel-initiated")


def _low_latency_terms(
    model: Transformer, fab: Fabric, path: Path, where: Group, tokens: ArrayLike, element_bytes: ArrayLike,
    scheme: str, shared_queue: bool = False,
) -> dict[str, np.ndarray]:  # fmt: skip
    """(message issue, network, NVLink) seconds of one low-latency dispatch (or combine) of ``tokens``
    per GPU over ``where``: every routed copy its own write, ``(ep - g) / ep`` of them remote (issued
    at the transport's message rate, over the GPU's share of the NICs), ``(g - 1) / ep`` over NVLink."""
    copies = routed_copies(model, tokens)
    ep, g = where.ranks, where.per_node
    size = model.hidden * np.asarray(element_bytes, dtype=float)
    remote, local = copies * (ep - g) / ep, copies * (g - 1) / ep
    return {
        "message issue": remote / message_rate(scheme, path, issuers(scheme), shared_queue),
        "network": remote * size / (fab.net_Bps(1) * fab.pod_share(where.nodes, all_to_all=True)),
        "NVLink": local * size / fab.up_Bps(g),
    }


def low_latency_s(
    model: Transformer, c: Cluster, fab: Fabric, where: Group, tokens: ArrayLike, element_bytes: ArrayLike,
    scheme: str = "kernel-initiated", shared_queue: bool = False,
) -> np.ndarray:  # fmt: skip
    """Seconds of one low-latency dispatch (or combine): the put across domains, the slowest of its
    terms (:func:`_low_latency_terms`) and the call's own phases (``expert_dispatch.low_latency_call``)."""
    path = path_of(c)
    terms = _low_latency_terms(model, fab, path, where, tokens, element_bytes, scheme, shared_queue)
    return _low_latency_call(c, path, where, terms, scheme, shared_queue)


def _low_latency_call(
    c: Cluster, path: Path, where: Group, terms: dict[str, np.ndarray], scheme: str, shared_queue: bool
) -> np.ndarray:
    """One low-latency call from its terms: the put across domains, the slowest term and the call's
    own phases (the GPU's ``expert_dispatch.low_latency_call``)."""
    put = float(put_latency(scheme, path, 0, shared_queue=shared_queue))
    phases = c.gpu.expert_dispatch.low_latency_call.value
    return np.where(where.spans_nodes, put, 0.0) + np.maximum.reduce(list(terms.values())) + phases


def exchange(
    mode: str,
    scheme: str,
    model: Transformer,
    c: Cluster,
    ep: int,
    tokens: float,
    element_bytes: float,
    shared_queue: bool = False,
) -> dict[str, float]:
    """Seconds of one dispatch (or combine) per GPU, which resource binds it, and the GPUs of each
    NVLink group (``group_gpus``). ``shared_queue``: the transport's GPU threads share send queues
    (NVSHMEM IBGDA), each put reserving its slot."""
    if mode not in MODES:
        raise unknown("DeepEP mode", mode, MODES)
    if model.moe is None:
        raise CommodelError(f"{model.description} has no experts to dispatch to")
    if ep < 2:
        raise CommodelError(f"ep {ep} has no peer to send a token to: DeepEP's dispatch and combine exchange "
                            "tokens among ep >= 2 GPUs")  # fmt: skip
    if model.moe.experts % ep:
        raise CommodelError(f"ep ({ep}) must divide the {model.moe.experts} experts of {model.description}: "
                            "DeepEP gives every rank the same number of them")  # fmt: skip
    # The normal kernels reach at most DEEPEP_NVL_PEERS GPUs over NVLink, as in training's flex group.
    reach = c.domain_gpus if mode == "low-latency" else min(c.domain_gpus, DEEPEP_NVL_PEERS)
    g = min(reach, ep)
    if ep % g:
        raise CommodelError(f"ep ({ep}) must fill whole groups of the {reach} GPUs DeepEP's {mode} kernels "
                            "reach over NVLink")  # fmt: skip
    path = path_of(c)
    fab = shared_nics(fabric_of(c))
    where = group(ep, 1, g)
    if mode == "high-throughput":
        network_s, nvlink_s = _high_throughput_terms(model, c, fab, where, tokens, element_bytes)
        terms = {"network": float(network_s), "NVLink": float(nvlink_s)}
        time = float(_high_throughput_call(c, fab, where, network_s, nvlink_s, scheme))
    else:
        parts = _low_latency_terms(model, fab, path, where, tokens, element_bytes, scheme, shared_queue)
        terms = {name: float(value) for name, value in parts.items()}
        time = float(_low_latency_call(c, path, where, parts, scheme, shared_queue))
    binding = max(terms, key=terms.get) if max(terms.values()) > 0 else "call"  # nothing to move
    return {"time_s": time, "binding": binding, "group_gpus": g, **{f"{k}_s": v for k, v in terms.items()}}


def received_bandwidths(
    moe: MoE, hidden: int, tokens: float, ep: int, domains: float, element_bytes: float, seconds: float
) -> dict[str, float]:
    """The bandwidths DeepEP's tests print for one call (GB/s): ``nvl`` counts the tokens a GPU
    receives, once per token with any expert on it, its own included (``N q`` of every GPU's tokens,
    ``q = 1 - (1 - 1/N)^k`` over ``N = ep`` GPUs); ``rdma`` each token once per scale-up domain its
    experts land on, its own included (:func:`domains_reached`)."""
    size = tokens * hidden * element_bytes / seconds / 1e9
    return {
        "nvl": size * ep * (1 - (1 - 1 / ep) ** moe.top_k),
        "rdma": size * float(domains_reached(moe, domains)),
    }


def dispatch_combine(
    mode: str, scheme: str, model: Transformer, c: Cluster, ep: int, tokens: float, shared_queue: bool = False
) -> dict:
    """One MoE layer's dispatch and combine per GPU: seconds of each, their sum, and what binds."""
    dispatch = exchange(mode, scheme, model, c, ep, tokens, DISPATCH_BYTES, shared_queue)
    combine = exchange(mode, scheme, model, c, ep, tokens, COMBINE_BYTES, shared_queue)
    return {
        "dispatch_s": dispatch["time_s"],
        "combine_s": combine["time_s"],
        "time_s": dispatch["time_s"] + combine["time_s"],
        "binding": combine["binding"],
    }
