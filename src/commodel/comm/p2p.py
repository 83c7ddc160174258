"""Point-to-point message costs: Hockney (alpha-beta), LogGP, and NCCL protocol effects.

- Hockney (1994): ``t(n) = alpha + n / beta``.
- LogGP (Alexandrov et al. 1995): one n-byte message costs ``L + 2 o + (n - 1) G``; each of k - 1
  further back-to-back messages adds the larger of the gap g and its own byte stream ``(n - 1) G``.
- NCCL protocols (src/device/prims_*.h, src/graph/tuning.cc): LL sends 8 useful bytes per 16 (data plus
  flag), LL128 120 per 128, Simple all bytes but pays a fence and flag per step. The tuner scales the
  link bandwidth by 1/4 (reductions) or 1/3 (copies) for LL, by 0.92 for LL128 and 1 for Simple, and
  adds a per-step latency per protocol and link kind.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm import tables

PROTOCOLS = tables.PROTOCOLS

#: Base latency per protocol in seconds: NCCL tuning.cc ``baseLat`` (Ring row: 6.6, 14.0, 8.4 us).
BASE_LATENCY_S = dict(zip(PROTOCOLS, tables.BASE_LAT[tables.ALGOS.index("ring")] * 1e-6, strict=True))


def protocol_bandwidth_factor(protocol: str, reduces: bool) -> float:
    """Fraction of link bandwidth a protocol achieves, as NCCL's tuner models it.

    LL moves 8 useful bytes per 16 and is further limited by its 8-byte flag-and-data stores: NCCL
    prices ring LL at 1/4 of bus bandwidth for reductions and 1/3 for copies. LL128 achieves 0.92
    (about 120/128). Simple achieves the full link bandwidth.
    """
    if protocol == "ll":
        return 0.25 if reduces else 1 / 3
    if protocol == "ll128":
        return 0.92
    return 1.0


def hockney(size_bytes: ArrayLike, alpha_s: ArrayLike, bw_Bps: ArrayLike) -> np.ndarray:
    """Hockney alpha-beta time ``alpha + n / beta`` in seconds (vectorized)."""
    return np.asarray(alpha_s) + np.asarray(size_bytes, dtype=float) / np.asarray(bw_Bps)


def loggp(
    size_bytes: ArrayLike,
    latency_s: float,
    overhead_s: float,
    gap_s: float,
    gap_per_byte_s: float,
    messages: ArrayLike = 1,
) -> np.ndarray:
    """LogGP time of ``messages`` back-to-back messages of ``size_bytes`` each.

    ``t = L + 2 o + (n - 1) G + (k - 1) max(g, (n - 1) G)``: the first message pays wire latency L,
    send and receive overheads o and its byte stream; each further message waits for the larger of
    the gap g and its own byte stream.
    """
    n = np.asarray(size_bytes, dtype=float)
    k = np.asarray(messages, dtype=float)
    stream = np.maximum(n - 1, 0) * gap_per_byte_s
    return latency_s + 2 * overhead_s + stream + (k - 1) * np.maximum(gap_s, stream)
