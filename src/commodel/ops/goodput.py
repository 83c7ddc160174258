"""Goodput of a long training job under failures: checkpoints, restarts and the work lost between them.

Failures arrive as a Poisson process at ``G x lambda`` per hour for ``G`` GPUs (``lambda`` per GPU-hour
from a failure model, :class:`commodel.workloads.model.schema.FailureModel`); the job's MTBF is
``M = 1 / (G lambda)``. A checkpoint holds the model state, ``S`` bytes (weights and optimizer).

- ``sync``: training stops while the state is written: ``C = S / B_write``.
- ``async``: training stops only while each GPU copies its shard to host memory,
  ``C = (S / G) / B_pcie``; the write to storage, ``P = S / B_write``, runs in the background, so
  checkpoints come no closer than ``P`` and a failure also loses the write in flight (``P`` more of
  work). It beats ``sync`` whenever the GPUs' host links outrun the storage, as they do at scale.
- The write bandwidth ``B_write`` is what a checkpoint burst gets (:func:`checkpoint_bandwidth`):
  the file system's bandwidth less what other tenants and the job's own reads take, and at most
  what the job's nodes' links to storage carry; a small job is bound by its links, a large one by
  its share of the file system, and Daly's interval grows as ``sqrt(1 / B_write)``.
- Restart: ``R = R0 + S / B_read``, plus, for the hardware share of failures, the repair time when no
  spare node is at hand.

Expected wall time per unit of work with a checkpoint every ``tau`` of work (Daly, "A higher order
estimate of the optimum checkpoint interval for restart dumps", FGCS 2006, exponential failures):
``T_wall / T_work = (M / tau) e^{(R + P) / M} (e^{(tau + C) / M} - 1)``; goodput is its inverse. The
interval is the given one, or Daly's optimum ``sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + C / 18M) - C``
(``M`` when ``C >= 2M``), at least ``P``, in whole training steps (checkpoints fall between steps).
Exact for ``sync``; for ``async``, where a failure in the next segment's first ``P`` seconds loses
that segment too, the ``P`` charged to every failure approximates it: a seeded event simulation of
both processes agrees within 1.5% (``tests/test_goodput.py``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.errors import unknown

CHECKPOINT_MODES = ("sync", "async")

#: Checkpointed bytes per parameter: BF16 weights (2), FP32 master weights, momentum and variance (12).
STATE_BYTES_PER_PARAM = 14.0


def daly_interval(checkpoint_s: ArrayLike, mtbf_s: ArrayLike) -> np.ndarray:
    """Daly's higher-order optimum checkpoint interval (seconds of work between checkpoints)."""
    c, m = np.asarray(checkpoint_s, dtype=float), np.asarray(mtbf_s, dtype=float)
    ratio = c / (2 * m)
    tau = np.sqrt(2 * c * m) * (1 + np.sqrt(ratio) / 3 + ratio / 9) - c
    return np.where(c < 2 * m, tau, m)


def checkpoint_bandwidth(
    storage_Bps: ArrayLike, share: ArrayLike, nodes: ArrayLike, node_Bps: ArrayLike
) -> np.ndarray:
    """Bytes/s a checkpoint burst writes: ``min(share x B_fs, nodes x B_node)``, the share of the file
    system's bandwidth ``B_fs`` the job gets against what its ``nodes`` links to storage carry."""
    fs = np.asarray(storage_Bps, dtype=float) * np.asarray(share, dtype=float)
    return np.minimum(fs, np.asarray(nodes, dtype=float) * np.asarray(node_Bps, dtype=float))


def goodput(
    mode: str,
    rate_per_gpu_h: ArrayLike,
    gpus: ArrayLike,
    state_bytes: ArrayLike,
    write_Bps: ArrayLike,
    pcie_Bps: ArrayLike,
    restart_s: ArrayLike,
    interval_s: ArrayLike = np.nan,
    step_s: ArrayLike = 0.0,
) -> dict[str, np.ndarray]:
    """Goodput (work / wall time) and what sets it (module docstring): ``job_mtbf_s``,
    ``checkpoint_s`` (training stopped per checkpoint), ``interval_s`` (work between checkpoints).
    ``restart_s``: everything a failure costs before work resumes except reading the checkpoint.
    ``interval_s`` NaN: Daly's optimum. A rate of 0 means no failures: goodput 1 (less the
    checkpoints, if an interval is given). ``step_s``: a training step; checkpoints fall between
    steps, so the interval is a whole number of them (at least one)."""
    if mode not in CHECKPOINT_MODES:
        raise unknown("checkpoint mode", mode, CHECKPOINT_MODES)
    g = np.asarray(gpus, dtype=float)
    state = np.asarray(state_bytes, dtype=float)
    rate = np.asarray(rate_per_gpu_h, dtype=float) * g / 3600
    mtbf = np.divide(1.0, rate, out=np.full(np.broadcast(rate, g).shape, np.inf), where=rate > 0)
    write = state / np.asarray(write_Bps, dtype=float)
    stop = write if mode == "sync" else state / g / np.asarray(pcie_Bps, dtype=float)
    in_flight = 0.0 if mode == "sync" else write
    recover = np.asarray(restart_s, dtype=float) + write
    given = np.asarray(interval_s, dtype=float)
    tau = np.maximum(np.where(np.isnan(given), daly_interval(stop, mtbf), given), in_flight)
    step = np.asarray(step_s, dtype=float)
    tau = np.where(step > 0, np.maximum(np.ceil(tau / np.where(step > 0, step, 1.0) - 1e-9), 1) * step, tau)
    finite = np.isfinite(tau) & np.isfinite(mtbf)
    m = np.where(finite, mtbf, 1.0)
    t = np.where(finite, tau, 1.0)
    with np.errstate(over="ignore"):  # a job that cannot outrun its failures: goodput 0
        wall = m / t * np.exp((recover + in_flight) / m) * np.expm1((t + stop) / m)
    plain = np.where(np.isfinite(tau), (tau + stop) / np.where(np.isfinite(tau), tau, 1.0), 1.0)
    return {
        "goodput": 1 / np.where(finite, wall, plain),
        "job_mtbf_s": mtbf,
        "checkpoint_s": stop,
        "interval_s": tau,
    }
