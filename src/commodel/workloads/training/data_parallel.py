"""Data parallelism and ZeRO in one micro-batch's pricing (:func:`data_parallel`): the gradient
reduction and parameter gather of ZeRO 0-2 behind the step's ends, ZeRO-3's (FSDP's) per-layer
gathers and reduce-scatters every micro-batch, and the optimizer's pass over its local parameters."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm.fabric import Fabric
from commodel.overlap import Window, exposed
from commodel.vectorize import on_unique
from commodel.workloads.layer.work import repeat, window
from commodel.workloads.parallel.groups import Group, collective, in_switch
from commodel.workloads.parallel.layout import Layout
from commodel.workloads.training.memory import (
    OPTIMIZER_BYTES,
    gathered_bytes,
    gradient_bytes,
    layer_parameters,
    optimizer_bytes,
)
from commodel.workloads.training.microbatch_context import MicroBatch

#: Adam with fp32 master weights: read master, gradient, momentum, variance (16 B), write master,
#: momentum, variance and the bf16 copy (14 B), read the gradient again for the norm (4 B).
ADAM_BYTES_PER_PARAM = 34.0

#: Parameters per data-parallel gradient bucket, and per data-parallel rank: Megatron-Core's default
#: bucket, ``max(40 M, 1 M x dp)`` (``DistributedDataParallel``, 0.15: larger buckets at large dp
#: keep NCCL's ring chunks bandwidth-bound).
BUCKET_PARAMS, BUCKET_PARAMS_PER_RANK = 40e6, 1e6


def gradient_sync(
    params: np.ndarray,
    grad_bytes: ArrayLike,
    gathered_bytes: ArrayLike,
    sharded: np.ndarray,
    where: Group,
    fab: Fabric,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(reduce seconds, its per-GPU bytes/s, parameter gather seconds, its bytes/s) of the gradients
    of ``params`` parameters (``grad_bytes`` each) over a data-parallel group: an allreduce, or with a
    sharded optimizer (ZeRO >= 1) a reduce-scatter and an allgather of the updated parameters,
    ``gathered_bytes`` each (:attr:`~commodel.compute.precision.Precision.gathered_bytes` under FP8
    with ``fp8_param_gather``). Only what a layout runs is priced."""

    def sync(*keys: np.ndarray) -> tuple[np.ndarray, ...]:
        params, grad_bytes, gathered_bytes, sharded, ranks, per_node = keys
        at = Group(ranks, per_node)
        nbytes = params * grad_bytes
        rs, rs_bw = collective("reducescatter", np.where(sharded, nbytes, 0.0), at, fab)
        ar, ar_bw = collective("allreduce", np.where(sharded, 0.0, nbytes), at, fab)
        ag, ag_bw = collective("allgather", np.where(sharded, params * gathered_bytes, 0.0), at, fab)
        return np.where(sharded, rs, ar), np.where(sharded, rs_bw, ar_bw), ag, ag_bw

    # The three collectives share their keys: coded once, each priced on the distinct rows.
    return on_unique(sync, params, grad_bytes, gathered_bytes, sharded, where.ranks, where.per_node)


def chunked_exposed(
    strategy: str | np.ndarray,
    layer: Window,
    stage_layers: np.ndarray,
    x: Layout,
    comm_s: np.ndarray,
    traffic_Bps: np.ndarray,
    buckets: np.ndarray,
    **kwargs: object,
) -> np.ndarray:
    """Seconds a data-parallel collective of ``comm_s`` (the whole stage's parameters, in
    ``buckets`` launches) adds to a step, each of the ``vpp`` model chunks' share launched as that
    chunk's work is done.

    Megatron-Core's interleaved schedule reduces a chunk's gradients at its last backward and gathers
    a chunk's parameters one chunk ahead of its first forward (``schedules.py``, 0.15), and the
    chunks take their turns ``pp`` chunk-passes apart (``pp L / vpp`` layers of a stage of ``L``).
    Queued on one stream, chunk ``k``'s share and those after it must fit in ``k`` such gaps and
    the last chunk's own pass, so the exposure is the larger of two ends (it is linear in ``k``): the
    last chunk's share ``comm / vpp`` behind its ``L / vpp`` layers, and all of ``comm`` behind
    ``(1 + (vpp - 1) pp) L / vpp`` layers. Without interleaving (vpp 1) both are ``comm`` behind
    the stage's ``L`` layers."""

    def behind(layers: np.ndarray, share: np.ndarray) -> np.ndarray:
        """Exposure of ``share`` of the collective behind ``layers`` layers' passes."""
        comm, calls = share * comm_s, share * buckets
        return exposed(strategy, repeat(layer, layers), comm, traffic_Bps=traffic_Bps, calls=calls, **kwargs)

    chunk = stage_layers / x.vpp
    return np.maximum(behind(chunk, 1 / x.vpp), behind(chunk * (1 + (x.vpp - 1) * x.pp), 1.0))


def data_parallel(
    m: MicroBatch,
    stage_layers: np.ndarray,
    dense: np.ndarray,
    experts: np.ndarray,
    root: np.ndarray,
    idle: tuple[np.ndarray, np.ndarray] = (0.0, 0.0),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Data parallelism and ZeRO: the seconds ZeRO-3's gathers and reduce-scatters expose per
    micro-batch, the seconds the end-of-step gradient reduction and parameter gather expose, and the
    optimizer's on the local (ZeRO-sharded) parameters.

    ZeRO-3 (FSDP) gathers each layer's parameters before its forward and, freeing them after it
    (``reshard_after_forward``), again before its backward, and reduce-scatters its gradients after
    its backward, every micro-batch. Each gather is prefetched one layer ahead and each
    reduce-scatter runs behind the next layer's backward (PyTorch FSDP2, Megatron-FSDP), so all
    but the first gathers and the last reduce-scatters can hide behind compute. Those are exposed
    whatever the overlap: the ``root`` module's parameters (the embedding and output tables, which
    FSDP2 gathers once at the forward's start and reduce-scatters once at the backward's end, the
    embedding's gradient coming last) and the first layer's, ``(G + R) (root + layer) / params`` of
    the stage's ``G + R``. Each layer's ``idle`` seconds (forward, backward), in which its GPU computes
    nothing (it waits for the host, or runs the layer's exposed collectives), carry them too."""
    x, fab = m.x, m.fab
    dp_part = m.partitioned(m.dp_ctas)
    zero3, sharded = x.zero == 3, x.zero >= 1
    gathered = gathered_bytes(x, m.recipe)  # bytes per parameter
    grad_size = gradient_bytes(x)
    reduce_s, reduce_bw, gather_s, ag_bw = gradient_sync(dense, grad_size, gathered, sharded, m.dp, fab)
    expert_reduce_s, _, expert_gather_s, _ = gradient_sync(experts, grad_size, gathered, sharded, m.edp, fab)
    reduce_s, gather_s = reduce_s + expert_reduce_s, gather_s + expert_gather_s
    dp_kw = {"memory": m.memory, "in_network": in_switch(fab, m.dp)}
    buckets = np.ceil((dense + experts) / np.maximum(BUCKET_PARAMS, BUCKET_PARAMS_PER_RANK * x.dp))
    gathers = np.where(x.reshard_after_forward, 2.0, 1.0)
    z3_comm = np.where(zero3, gathers * gather_s + reduce_s, 0.0)
    z3_bytes = gathers * gather_s * ag_bw + reduce_s * reduce_bw  # per GPU: the HBM traffic is twice these
    z3_traffic = 2 * np.divide(z3_bytes, z3_comm, out=np.zeros_like(z3_comm), where=z3_comm > 0)
    z3_window = repeat(window(m.full, dp_part, "both", idle), stage_layers)
    layer_dense, layer_experts = layer_parameters(m.model, x)
    ends = (root + layer_dense + layer_experts) / np.maximum(dense + experts, 1.0)
    fill = np.where(zero3, (gather_s + reduce_s) * np.minimum(ends, 1.0), 0.0)  # the prefetch pipeline's ends
    z3_exposed = fill + exposed(
        m.strategy,
        z3_window,
        z3_comm - fill,
        traffic_Bps=z3_traffic,
        calls=(gathers + 1) * stage_layers,
        **dp_kw,
    )
    # ZeRO 0-2: reduce gradients behind the last micro-batches' backward ...
    end_reduce = np.where(zero3, 0.0, reduce_s)
    dp_exposed = chunked_exposed(
        m.strategy,
        window(m.full, dp_part, "bwd", idle),
        stage_layers,
        x,
        end_reduce,
        2 * reduce_bw,
        buckets,
        **dp_kw,
    )
    # ... and with ZeRO 1-2 gather the updated parameters behind the next step's first forwards.
    param_gather = np.where(sharded & ~zero3, gather_s, 0.0)
    dp_exposed = dp_exposed + chunked_exposed(
        m.strategy,
        window(m.full, dp_part, "fwd", idle),
        stage_layers,
        x,
        param_gather,
        2 * ag_bw,
        buckets,
        **dp_kw,
    )
    local = dense / np.where(sharded, x.dp * x.cp, 1) + experts / np.where(sharded, x.expert_dp, 1)
    moments_saved = OPTIMIZER_BYTES - optimizer_bytes(x)  # BF16 moments: each read and written once
    return z3_exposed, dp_exposed, local * (ADAM_BYTES_PER_PARAM - 2 * moments_saved) / m.hbm
