"""How computation and communication share a GPU: the time of an overlap window.

A window is some compute ``C`` (kernels on all SMs/CUs) that may run concurrently with a collective
of duration ``M`` that starts ``d`` after the window opens. Until it starts, and after it ends, compute
runs at full speed; while both run, compute progresses ``slow`` times slower, so::

    T = d + max(M, (C - d) + M (1 - 1 / slow))          (0 <= d <= C)

which is never more than ``C + M`` (serial) and never less than ``max(C, M)`` (ideal).

Strategies (``slow`` and ``M'`` per strategy):

- ``serial``: no overlap, ``T = C + M``.
- ``ideal``: ``T = max(C, M)``, every communication hidden behind independent compute.
- ``sm-partition`` (naive overlap): the collective's CTAs (NCCL: one per channel) take ``k`` SMs; the
  compute kernels run on ``S - k`` SMs and pay wave quantization there (a one-wave GEMM of S tiles
  needs two waves: the tail effect). Without stream priority the block scheduler dispatches CTAs in
  launch order, so a collective's CTAs wait until the running compute kernel has dispatched all of
  its own, on average half a kernel: ``d = calls x kernel / 2``. Both kernels share HBM.
- ``occupancy-shaped`` (Cui & Pericas, arXiv:2606.09200): compute residency is capped so the
  collective's CTAs co-reside instead of displacing a wave, and the communication stream has priority:
  no tail, no start delay; only the shared HBM bandwidth slows compute.
- ``in-network``: the switch reduces (NVLS/SHARP), so the collective needs few CTAs
  (:data:`IN_NETWORK_CTAS`) and each GPU's HBM moves the data once instead of twice; otherwise as
  ``sm-partition``. Collectives the fabric cannot reduce in the network fall back to ``sm-partition``.

HBM interference: a collective moving ``r`` bytes/s reads and writes ``2 r`` (``r`` in the network)
of the GPU's achievable bandwidth ``B``. The bytes it moves while the window runs memory-bound
kernels (a share beta of its compute time) are bytes those kernels wait for at ``B``;
compute-bound kernels are unaffected. Over the collective's ``M`` seconds compute loses
``beta M 2r / B``, so ``slow_mem = 1 / (1 - beta 2r / B)``: the cost follows the bytes moved, and a
faster network, moving them in less time, costs no more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

STRATEGIES = ("serial", "ideal", "sm-partition", "occupancy-shaped", "in-network")

#: CTAs a collective occupies, one per NCCL channel (assumed defaults): 24 on NVLink switches (the
#: H100 all-gather of the overlap paper), 16 on xGMI meshes (RCCL's usual channel count), 4 over
#: PCIe, 8 for inter-node collectives (two channels per NIC pair) and 1 for point-to-point sends.
COMM_CTAS = {"switch": 24, "mesh": 16, "pcie": 4, "network": 8, "p2p": 1}

#: CTAs of an in-switch (NVLS) collective: NVLS issues multimem loads/stores from few SMs (assumed).
IN_NETWORK_CTAS = 4


def overlapping(strategy: str | ArrayLike) -> np.ndarray:
    """Where compute runs on the SMs a collective leaves (``sm-partition``, ``in-network``)."""
    names = np.asarray(strategy, dtype=object)
    return (names == "sm-partition") | (names == "in-network")


@dataclass(frozen=True)
class Window:
    """Compute that can overlap one collective, described on all SMs and on the SMs left to it.

    ``compute_s``: time on all SMs; ``partitioned_s``: the same kernels on ``S - k`` SMs;
    ``memory_bound_s``: the part of ``compute_s`` spent in memory-bound kernels; ``kernel_s``: mean
    duration of one of these kernels.
    """

    compute_s: np.ndarray
    partitioned_s: np.ndarray
    memory_bound_s: np.ndarray
    kernel_s: np.ndarray


def memory_slowdown(window: Window, traffic_Bps: ArrayLike, hbm_Bps: float) -> np.ndarray:
    """``1 / (1 - beta traffic / B)``: while the collective runs, the bytes it moves during the
    window's memory-bound share ``beta`` are bytes those kernels wait for at ``B``, so compute loses
    ``beta M traffic / B`` seconds over ``M``: the HBM bytes the collective moves, not its rate (a
    faster network moves the same bytes in less time and steals no more); at most 0.9 of ``B``."""
    beta = np.divide(
        window.memory_bound_s,
        window.compute_s,
        out=np.zeros_like(window.compute_s),
        where=window.compute_s > 0,
    )
    share = np.minimum(np.asarray(traffic_Bps, dtype=float) / hbm_Bps, 0.9)
    return 1 / (1 - beta * share)


def window_time(
    strategy: str | ArrayLike,
    window: Window,
    comm_s: ArrayLike,
    traffic_Bps: ArrayLike,
    hbm_Bps: float,
    calls: ArrayLike = 1,
    in_network: ArrayLike = False,
) -> np.ndarray:
    """Time of ``window`` overlapped with a collective of ``comm_s`` seconds under ``strategy`` (one
    name, or one per point).

    ``traffic_Bps``: HBM bytes/s the collective moves per GPU while it runs (send + receive);
    ``calls``: how many collective launches the window holds (each may wait for a running kernel);
    ``in_network``: whether the fabric reduces this collective in the switch.
    """
    args = (window, comm_s, traffic_Bps, hbm_Bps, calls, in_network)
    if isinstance(strategy, str):
        return _window_time(strategy, *args)
    names = np.asarray(strategy, dtype=object)
    time = np.nan
    for name in dict.fromkeys(names.ravel().tolist()):
        time = np.where(names == name, _window_time(name, *args), time)
    return time


def _window_time(
    strategy: str,
    window: Window,
    comm_s: ArrayLike,
    traffic_Bps: ArrayLike,
    hbm_Bps: float,
    calls: ArrayLike,
    in_network: ArrayLike,
) -> np.ndarray:
    """:func:`window_time` under one strategy."""
    C, M, partitioned, memory_bound, kernel = np.broadcast_arrays(
        *(
            np.asarray(v, dtype=float)
            for v in (window.compute_s, comm_s, window.partitioned_s, window.memory_bound_s, window.kernel_s)
        )
    )
    window = Window(C, partitioned, memory_bound, kernel)
    if strategy == "serial":
        return C + M
    if strategy == "ideal":
        return np.maximum(C, M)
    if strategy == "occupancy-shaped":
        slow = memory_slowdown(window, traffic_Bps, hbm_Bps)
        delay = np.zeros_like(C)
    else:
        switch = np.asarray(in_network, dtype=bool) & (strategy == "in-network")
        traffic = np.where(switch, 0.5 * np.asarray(traffic_Bps, dtype=float), traffic_Bps)
        tail = np.divide(window.partitioned_s, C, out=np.ones_like(C), where=C > 0)
        slow = tail * memory_slowdown(window, traffic, hbm_Bps)
        delay = np.where(M > 0, np.minimum(np.asarray(calls) * window.kernel_s / 2, C), 0.0)
    return delay + np.maximum(M, C - delay + M * (1 - 1 / slow))


def exposed(strategy: str | ArrayLike, window: Window, comm_s: ArrayLike, **kwargs: object) -> np.ndarray:
    """Time the collective adds to its window: ``window_time - compute_s`` (>= 0)."""
    return np.maximum(window_time(strategy, window, comm_s, **kwargs) - window.compute_s, 0.0)  # type: ignore[arg-type]


def ctas(strategy: str | ArrayLike, domain: ArrayLike, in_network: ArrayLike = False) -> np.ndarray:
    """SMs/CUs a collective takes from compute under ``strategy`` in ``domain`` (a COMM_CTAS key);
    an in-network collective under the ``in-network`` strategy takes :data:`IN_NETWORK_CTAS`."""
    domain = np.asarray(domain)
    base = np.select([domain == name for name in COMM_CTAS], list(COMM_CTAS.values()), np.nan).astype(float)
    switch = (np.asarray(strategy, dtype=object) == "in-network") & np.asarray(in_network, dtype=bool)
    return np.where(switch, float(IN_NETWORK_CTAS), base)
