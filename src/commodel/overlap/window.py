"""How computation and communication share a GPU: the time of an overlap window.

A window is some compute ``C`` (kernels on all SMs/CUs) that may run concurrently with a collective
of duration ``M`` that starts ``d`` after the window opens. Until it starts, and after it ends, compute
runs at full speed; while both run, compute progresses ``slow`` times slower, so::

    T = d + max(M, (C - d) + M (1 - 1 / slow))          (0 <= d <= C)

which is never more than ``C + M`` (serial) and never less than ``max(C, M)`` (ideal). A window may
also hold ``I`` seconds in which the GPU runs no compute kernel (it waits for the host to issue the
next, or runs a collective of the layer's own that nothing hides): a collective on its own stream
runs on meanwhile at its own rate, so ``T = I + T(C, max(M - I, 0))`` under every strategy that
overlaps (``serial`` runs the collective after the window: ``C + I + M``). Two collectives on the
same link would share it then; that is not priced.

Strategies (the compute's slowdown ``f_c``, the collective's ``f_m`` and its start ``d``; the pair's
time is :func:`commodel.overlap.interference.corun_end`):

- ``serial``: no overlap, ``T = C + M``.
- ``ideal``: ``T = max(C, M)``, every communication hidden behind independent compute.
- ``sm-partition`` (concurrent streams, default residency, no priority): the collective's CTAs (NCCL:
  one per channel) take ``k`` SMs; the compute kernels run on ``S - k`` SMs and pay wave quantization
  there (a one-wave GEMM of S tiles needs two waves: the tail effect). Without stream priority the
  block scheduler dispatches CTAs in launch order, so a collective's CTAs wait until the running
  compute kernel has dispatched all of its own, on average half a kernel: ``d = calls x kernel / 2``.
- ``occupancy-shaped`` (Cui & Pericas, arXiv:2606.09200): compute residency is capped so the
  collective's CTAs co-reside instead of displacing a wave, and the communication stream has priority:
  no tail, no start delay.
- ``copy-engine``: the collective's copies run on the DMA engines (ConCCL, arXiv:2412.14335; PyTorch
  SymmetricMemory): no SMs taken, no start delay.
- ``in-network``: the switch reduces (NVLS/SHARP), so the collective needs few CTAs
  (:data:`IN_NETWORK_CTAS`) and each GPU's HBM moves the data once instead of twice; otherwise as
  ``sm-partition``. Collectives the fabric cannot reduce in the network fall back to ``sm-partition``.

Under every strategy but ``serial`` and ``ideal`` the two share HBM
(:mod:`commodel.overlap.interference`): the window's kernels load it with their roofline memory terms
(``hbm_s / C`` of the bandwidth), the collective with the bytes it sends and receives; each slows the
other by the rise in memory latency or the bandwidth it loses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.overlap.interference import Memory, collective_load, corun_end, slowdowns

STRATEGIES = ("serial", "ideal", "sm-partition", "occupancy-shaped", "in-network", "copy-engine")

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

    ``compute_s``: time on all SMs; ``partitioned_s``: the same kernels on ``S - k`` SMs; ``hbm_s``:
    the part of ``compute_s`` its kernels spend moving HBM bytes (their roofline memory terms, each at
    most its kernel's time); ``kernel_s``: mean duration of one of these kernels; ``idle_s``: time
    beside the compute in which the GPU runs no compute kernel (waiting for the host, or running a
    collective nothing hides).
    """

    compute_s: np.ndarray
    partitioned_s: np.ndarray
    hbm_s: np.ndarray
    kernel_s: np.ndarray
    idle_s: np.ndarray | float = 0.0

    @property
    def load(self) -> np.ndarray:
        """The window's HBM load alone: ``hbm_s / compute_s`` (0 for an empty window)."""
        C = np.asarray(self.compute_s, dtype=float)
        return np.divide(self.hbm_s, C, out=np.zeros_like(C), where=C > 0)


def window_time(
    strategy: str | ArrayLike,
    window: Window,
    comm_s: ArrayLike,
    traffic_Bps: ArrayLike,
    memory: Memory,
    calls: ArrayLike = 1,
    in_network: ArrayLike = False,
) -> np.ndarray:
    """Time of ``window`` (its compute and its idle time) overlapped with a collective of ``comm_s``
    seconds under ``strategy`` (one name, or one per point).

    ``traffic_Bps``: bytes/s the collective sends and receives per GPU while it runs;
    ``calls``: how many collective launches the window holds (each may wait for a running kernel);
    ``in_network``: whether the fabric reduces this collective in the switch; ``memory``: the GPU's
    HBM, whose bandwidth the two share and whose power the collective's traffic takes from the
    compute's clock.
    """
    args = (window, comm_s, traffic_Bps, memory, calls, in_network)
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
    memory: Memory,
    calls: ArrayLike,
    in_network: ArrayLike,
) -> np.ndarray:
    """:func:`window_time` under one strategy: the idle time carries what it can of the collective,
    the compute the rest."""
    idle = np.asarray(window.idle_s, dtype=float)
    if strategy == "serial":
        return np.asarray(window.compute_s, dtype=float) + idle + np.asarray(comm_s, dtype=float)
    C, M, partitioned, hbm, kernel = np.broadcast_arrays(
        *(
            np.asarray(v, dtype=float)
            for v in (window.compute_s, np.maximum(comm_s - idle, 0.0), window.partitioned_s, window.hbm_s,
                      window.kernel_s)
        )
    )  # fmt: skip
    return idle + _busy_time(strategy, C, M, partitioned, hbm, kernel, traffic_Bps, memory, calls, in_network)


def _busy_time(
    strategy: str,
    C: np.ndarray,
    M: np.ndarray,
    partitioned: np.ndarray,
    hbm: np.ndarray,
    kernel: np.ndarray,
    traffic_Bps: ArrayLike,
    memory: Memory,
    calls: ArrayLike,
    in_network: ArrayLike,
) -> np.ndarray:
    """Time of compute ``C`` beside a collective of ``M`` under one overlapping strategy."""
    if strategy == "ideal":
        return np.maximum(C, M)
    switch = np.asarray(in_network, dtype=bool) & (strategy == "in-network")
    traffic = np.where(switch, 0.5, 1.0) * np.asarray(traffic_Bps, dtype=float)
    compute_slow, comm_slow = slowdowns(
        Window(C, partitioned, hbm, kernel).load, collective_load(traffic, memory), memory
    )
    if strategy in ("occupancy-shaped", "copy-engine"):
        return corun_end(C, M, 0.0, compute_slow, comm_slow)
    tail = np.divide(partitioned, C, out=np.ones_like(C), where=C > 0)
    delay = np.where(M > 0, np.asarray(calls) * kernel / 2, 0.0)
    return corun_end(C, M, delay, tail * compute_slow, comm_slow)


def exposed(strategy: str | ArrayLike, window: Window, comm_s: ArrayLike, **kwargs: object) -> np.ndarray:
    """Time the collective adds to its window: ``window_time - compute_s - idle_s`` (>= 0). A window without
    a collective (``comm_s`` 0: no data parallelism, no context, no pipeline) exposes nothing under
    every strategy, so only the windows that hold one are priced."""
    M = np.asarray(comm_s, dtype=float)
    held = M != 0
    if M.ndim == 0 or held.all():
        time = window_time(strategy, window, comm_s, **kwargs)  # type: ignore[arg-type]
        return np.maximum(time - window.compute_s - window.idle_s, 0.0)
    out = np.zeros(np.broadcast_shapes(M.shape, *(np.shape(v) for v in vars(window).values())))
    if held.any():
        pick = np.broadcast_to(held, out.shape)
        rows = Window(*(_rows(v, pick) for v in vars(window).values()))
        some = {k: v if isinstance(v, Memory) else _rows(v, pick) for k, v in kwargs.items()}
        out[pick] = exposed(_rows(strategy, pick), rows, _rows(M, pick), **some)
    return out


def _rows(value: object, pick: np.ndarray) -> object:
    """``value`` at the rows ``pick`` selects (a value every row shares stays one)."""
    return value if np.ndim(value) == 0 else np.broadcast_to(value, pick.shape)[pick]


def ctas(strategy: str | ArrayLike, domain: ArrayLike, in_network: ArrayLike = False) -> np.ndarray:
    """SMs/CUs a collective takes from compute under ``strategy`` in ``domain`` (a COMM_CTAS key);
    an in-network collective under the ``in-network`` strategy takes :data:`IN_NETWORK_CTAS`, one on
    the copy engines none."""
    domain = np.asarray(domain)
    base = np.select([domain == name for name in COMM_CTAS], list(COMM_CTAS.values()), np.nan).astype(float)
    names = np.asarray(strategy, dtype=object)
    switch = (names == "in-network") & np.asarray(in_network, dtype=bool)
    return np.where(names == "copy-engine", 0.0, np.where(switch, float(IN_NETWORK_CTAS), base))
