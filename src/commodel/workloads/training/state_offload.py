"""Model states in CPU memory (``--offload optimizer,weights``), as Calculon prices them (Isaev et
al. 2023, SC'23: weights and optimizer state in a second memory tier, streamed over its link) and
as ZeRO-Offload and Megatron-Core's CPU optimizer offload keep them.

Over a host link of ``B`` bytes/s per direction per GPU (the system's ``[host_memory]`` link, shared
by the GPUs on it: :attr:`commodel.hardware.cluster.Cluster.host_offload_Bps`), full duplex:

- **optimizer**: the FP32 master weights and Adam's moments ``O`` live in CPU memory; the optimizer
  step streams them in and out in chunks, so it exposes ``O / B`` (the two directions at once), and
  nothing hides it (the step waits for the last gradients). HBM drops by ``O``.
- **weights**: a stage's weights ``W`` over ``L`` layers live in CPU memory, two layers resident
  (double-buffered: one computing, the next arriving). Each micro-batch fetches a layer's ``W / L``
  before its forward and again before its backward, behind the previous layer's work, exposing
  ``max(0, W/(L B) - t_fwd) + max(0, W/(L B) - t_bwd)`` per layer (the same hand-off as activation
  offload, :func:`~commodel.workloads.training.activation_fit.offload_exposed`); the gradients stay in HBM and
  the updated weights go back after the optimizer step, ``W / B`` (with the optimizer's outbound
  stream when both are offloaded). HBM drops by ``W (1 - 2 / L)``; under ZeRO-3 ``W`` is the shard,
  and the layers and root tables the all-gathers rebuild stay in HBM beside it.

The bandwidth at which the weights' fetches hide entirely (``offload_needed_Bps``): ``W / (L
min(t_fwd, t_bwd))``; the optimizer's streams never hide. Not modelled: the HBM bandwidth the copies take from kernels,
and the CPU memory's own bandwidth.
"""

from __future__ import annotations

import numpy as np

from commodel.workloads.parallel.layout import Layout, offloads
from commodel.workloads.training.activation_fit import offload_exposed

#: Layers of weights a GPU keeps in HBM while the rest live in CPU memory (double buffering).
RESIDENT_LAYERS = 2


def state_offload(
    memory: dict[str, np.ndarray],
    x: Layout,
    stage_layers: np.ndarray,
    fwd_s: np.ndarray,
    bwd_s: np.ndarray,
    host_Bps: float,
) -> dict[str, np.ndarray]:
    """What offloading ``x.offload`` changes: ``weights`` and ``optimizer``, the bytes left in
    HBM; ``host_bytes``, those in CPU memory; ``per_layer_s``, the seconds the weights' fetches expose
    per layer and micro-batch; ``step_s``, the optimizer step's streams per step; ``needed_Bps``, the
    host bandwidth that would hide the fetches. ``memory``: :func:`memory_with_microbatches`'s bytes;
    ``fwd_s``, ``bwd_s``: one layer's forward and backward per micro-batch."""
    optimizer_out, weights_out = (
        offloads(x.offload, "optimizer"),
        offloads(x.offload, "weights"),
    )
    # ZeRO-3's gathered layers and root tables are working copies the all-gathers rebuild in HBM:
    # only the shard moves to CPU memory.
    gathered = memory["gathered_weights"]
    weights, optimizer = memory["weights"] - gathered, memory["optimizer"]
    layers = np.maximum(stage_layers, 1)
    resident = np.minimum(RESIDENT_LAYERS / layers, 1.0)
    layer_bytes = np.where(weights_out, weights / layers, 0.0)
    rate = max(host_Bps, 1e-300)  # a system without host memory is refused before pricing
    outbound = np.where(optimizer_out, optimizer, 0.0) + np.where(weights_out, weights, 0.0)
    inbound = np.where(optimizer_out, optimizer, 0.0)
    window = np.minimum(fwd_s, bwd_s)
    return {
        "weights": np.where(weights_out, weights * resident, weights) + gathered,
        "optimizer": np.where(optimizer_out, 0.0, optimizer),
        "host_bytes": np.where(weights_out, weights, 0.0) + np.where(optimizer_out, optimizer, 0.0),
        "per_layer_s": np.where(weights_out, offload_exposed(layer_bytes, fwd_s, bwd_s, rate), 0.0),
        "step_s": np.maximum(outbound, inbound) / rate,
        "needed_Bps": np.divide(layer_bytes, window, out=np.zeros_like(layer_bytes), where=window > 0),
    }
