"""Fitting a training job's activations in HBM: recompute some layers, or offload them to CPU memory.

``--recompute auto`` takes the cheaper of two mechanisms for the smallest share ``r`` of each stage's
layers (whole layers) that brings the GPU under its usable memory, ``(1 - r) M_none + r M_full <= C``:

- **recompute** (Megatron's ``--recompute-granularity full --recompute-method block``): those layers
  keep only their input and run their forward again in the backward pass; step time, its breakdown
  and memory mix linearly between no and full recomputation;
- **offload** (Megatron's ``--cpu-offloading``, Transformer Engine's double-buffered offload handler),
  where Megatron-Core can run it: one pipeline stage, no recomputation of any kind (no
  ``--recompute-modules``) and fewer layers than the model's (its ``TransformerConfig`` refuses
  the rest, 0.15): those layers' activations are copied to CPU memory while the next layer runs
  its forward and back while the layer after it runs its backward, so a copy of ``A`` bytes over
  ``B`` bytes/s per direction exposes ``max(0, A / B - t_fwd) + max(0, A / B - t_bwd)`` per layer
  and micro-batch (:func:`offload_exposed`). It leaves the same HBM as recomputation (a layer's input, or the layer
  in flight) and needs ``r (M_none - M_full)`` of the CPU memory each GPU may use. On a Grace system
  (NVLink-C2C, 450 GB/s per direction shared by two GPUs) the copy usually hides behind the layers;
  over PCIe it rarely does, and recomputation wins.

A job may also state the layers it offloads (``--offload-layers``, Megatron's
``--cpu-offloading-num-layers``): they are priced as above, ``r`` their share, whether or not they
are the fewest that fit; or the layers it recomputes (``--recompute-layers N``, Megatron's
``--recompute-method block --recompute-num-layers N``: the first ``N`` layers of each virtual chunk
of ``stage / vpp`` layers), ``r = min(N vpp / stage, 1)``.

Not modelled: the HBM bandwidth the copies take from the kernels (under 3% of it on GB200) and the
CPU memory bandwidth (Grace's 512 GB/s LPDDR5X carries both GPUs' copies at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from commodel.hardware.cluster import Cluster
    from commodel.workloads.parallel.layout import Layout


def offload_problem(clusters: list[Cluster], x: Layout) -> tuple[np.ndarray, str]:
    """``(mask, message)``: layouts that state CPU offloading (of activations or model states) on a
    system without CPU memory to offload to (the first such system of ``clusters`` is named)."""
    hostless = [c.name for c in clusters if c.host_offload_Bps <= 0]
    stated = (np.asarray(x.offload_layers) > 0) | (np.asarray(x.offload) > 0)
    if not hostless or not np.any(stated):
        return np.zeros(np.shape(stated), dtype=bool), ""
    return stated, (
        f"CPU offloading needs host memory, which {hostless[0]}'s record does not state ([host_memory] in "
        "hardware_db/systems)"
    )


def offload_exposed(
    layer_bytes: np.ndarray, fwd_s: np.ndarray, bwd_s: np.ndarray, host_Bps: float
) -> np.ndarray:
    """Seconds one layer's offload exposes per micro-batch: ``max(0, A / B - t_fwd) + max(0, A / B -
    t_bwd)`` (the copy out hides behind the next layer's forward, the copy back behind the backward
    of the layer after it); infinite where the system has no CPU memory to offload to."""
    if host_Bps <= 0:
        return np.full(np.shape(layer_bytes), np.inf)
    copy = np.asarray(layer_bytes, dtype=float) / host_Bps
    return np.maximum(copy - fwd_s, 0.0) + np.maximum(copy - bwd_s, 0.0)


def fit_activations(
    none: dict[str, np.ndarray],
    full: dict[str, np.ndarray],
    auto: np.ndarray,
    capacity: float,
    host_capacity: float | np.ndarray,
    x: Layout,
    layers: int,
    linear: tuple[str, ...],
) -> dict[str, np.ndarray]:
    """Train-step results of rows marked ``auto`` with just enough layers recomputed or offloaded
    to fit, whichever costs less (module docstring), and of rows that state their offloaded layers
    (``x.offload_layers``; they fit only if the CPU memory holds them), for the layouts ``x``; other
    rows keep ``none``.

    ``linear``: the outputs that add up over a stage's layers (step time and its breakdown, with
    ``offload_s``), which mix linearly with the share recomputed. ``none`` carries ``offload_all_s``,
    the seconds per step offloading every layer would expose; ``capacity`` is the GPU's HBM, which
    ``memory_per_gpu_bytes`` (the reserve included) must fit; ``host_capacity`` the CPU memory per GPU
    left beside the model states offloaded there. Returns ``recompute_share`` and
    ``offload_share`` (of the layers) and ``offloaded_bytes``, the CPU memory each GPU's offloaded
    activations take.
    """
    stage = np.ceil(layers / np.asarray(x.pp, dtype=float))
    span = none["memory_per_gpu_bytes"] - full["memory_per_gpu_bytes"]
    share = np.clip(
        np.divide(none["memory_per_gpu_bytes"] - capacity, span, out=np.ones_like(span), where=span > 0), 0, 1
    )
    share = np.where(auto, np.ceil(share * stage - 1e-9) / stage, none["recompute_share"])
    blocks = np.asarray(x.recompute_layers) > 0  # --recompute-method block: N layers of each chunk
    share = np.where(blocks, np.minimum(x.recompute_layers * x.vpp / stage, 1.0), share)
    stated = np.asarray(x.offload_layers) > 0  # Megatron's --cpu-offloading-num-layers
    share = np.where(stated, x.offload_layers / stage, share)
    offload_cost = np.multiply(share, none["offload_all_s"], out=np.zeros_like(share), where=share > 0)
    offload = stated | (
        auto
        & (np.asarray(x.pp) == 1)
        & (np.asarray(x.recompute_modules) == 0)
        & (share < 1)
        & (share * span <= host_capacity)
        & (offload_cost < share * (full["step_time_s"] - none["step_time_s"]))
    )
    recomputed = np.where(offload, 0.0, share)
    out = {k: none[k] + recomputed * (full[k] - none[k]) for k in linear}
    extra = np.where(offload, offload_cost, 0.0)
    out["offload_s"] = out["offload_s"] + extra
    out["step_time_s"] = out["step_time_s"] + extra
    memory = none["memory_per_gpu_bytes"] - share * span
    step = out["step_time_s"]
    for key in ("tokens_per_s", "tflops_per_gpu", "mfu"):
        out[key] = none[key] * none["step_time_s"] / step
    hw_work = (1 - recomputed) * none["hw_tflops_per_gpu"] * none["step_time_s"] + recomputed * full[
        "hw_tflops_per_gpu"
    ] * full["step_time_s"]
    categories = {k: none[k] for k in none if k.startswith("memory_") and k != "memory_per_gpu_bytes"}
    return {
        **out,
        **categories,
        "memory_activations_bytes": none["memory_activations_bytes"] - share * span,
        "hw_tflops_per_gpu": hw_work / step,
        "memory_per_gpu_bytes": memory,
        "fits": (memory <= capacity * (1 + 1e-9))
        & (np.asarray(host_capacity) >= 0)
        & (~stated | (share * span <= host_capacity)),
        "recompute_share": recomputed,
        "offload_share": np.where(offload, share, 0.0),
        "offloaded_bytes": np.where(offload, share * span, 0.0),
        **{
            k: none[k]
            for k in (
                "tp_domains",
                "stage_imbalance",
                "dropped_share",
                "offloaded_state_bytes",
                "offload_needed_Bps",
            )
        },
    }


def recompute_layers_problem(x: Layout) -> tuple[np.ndarray, str]:
    """Block recomputation recomputes whole layers: it goes with ``--recompute full``, as Megatron's
    ``--recompute-method block`` goes with ``--recompute-granularity full``."""
    given = np.asarray(x.recompute_layers) > 0
    return given & (np.asarray(x.recompute) != 2), (
        "--recompute-layers is block recomputation of whole layers: give it with --recompute full, as "
        "Megatron's --recompute-method block needs --recompute-granularity full"
    )
