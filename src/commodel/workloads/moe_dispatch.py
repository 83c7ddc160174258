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
  ``k`` experts land on (``(N - 1) (1 - (1 - 1/N)^k)`` nodes in expectation) and is forwarded over
  NVLink to the experts there; large chunks, so bandwidth binds: network bytes over the NIC share
  against the forwarded bytes over NVLink, whichever is slower, plus one put latency.
"""

from __future__ import annotations

from commodel.comm.initiation import message_rate, path_of, put_latency
from commodel.errors import CommodelError, unknown
from commodel.hardware.cluster import Cluster
from commodel.workloads.schema import Transformer
from commodel.workloads.transformer import routed_copies

MODES = ("low-latency", "high-throughput")

#: Issuers of RDMA writes at once: a DeepEP low-latency kernel's warps when the GPU initiates (assumed:
#: 4 issuing warps on each of the 24 SMs DeepEP takes), else the one proxy or host thread per GPU.
ISSUING_WARPS = 96


def issuers(scheme: str) -> int:
    """Threads issuing one GPU's messages under ``scheme``."""
    return ISSUING_WARPS if scheme in ("kernel-initiated", "kernel-triggered") else 1


#: Bytes per element dispatched (FP8 with per-128 scales) and combined (BF16).
DISPATCH_BYTES, COMBINE_BYTES = 1 + 4 / 128, 2.0


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
        k = model.moe.top_k
        remote_nodes = (nodes - 1) * (1 - (1 - 1 / nodes) ** k) if nodes > 1 else 0.0
        terms = {
            "network": tokens * remote_nodes * size / nic_share,
            "NVLink": copies * (g - 1) / g * size / nvlink,
        }
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
