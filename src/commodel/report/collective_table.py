"""A collective's results in nccl-tests' own layout (size, count, type, algorithm, protocol, time,
algbw, busbw), with a note where the library's choice trails the fastest path it offers."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from commodel.comm.collectives import P2P_OPS
from commodel.units import format_bytes


def nccl_tests_table(table: Mapping[str, ArrayLike], system: str, dtype_bytes: int = 4) -> str:
    """Format collective results (:func:`commodel.comm.calls.run_columns`' columns, or its
    DataFrame) like nccl-tests' output (size, count, type, time, algbw, busbw)."""
    col = {name: np.asarray(table[name]) for name in (
        "op", "gpus", "nodes", "size_bytes", "algo", "protocol", "time_s", "algbw_GBps", "busbw_GBps",
        "fastest", "fastest_time_s",
    )}  # fmt: skip
    lines = [
        f"# commodel collective {col['op'][0]} on {system}: {col['gpus'][0]} GPUs over {col['nodes'][0]} node(s)",
        f"# {'size':>12} {'count':>12} {'type':>6} {'algo':>18} {'proto':>6} "
        f"{'time':>10} {'algbw':>8} {'busbw':>8}",
        f"# {'(B)':>12} {'(elements)':>12} {'':>6} {'':>18} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}",
    ]
    for size, algo, protocol, time, algbw, busbw in zip(
        col["size_bytes"].tolist(), col["algo"], col["protocol"], col["time_s"].tolist(),
        col["algbw_GBps"].tolist(), col["busbw_GBps"].tolist(), strict=True,
    ):  # fmt: skip
        lines.append(
            f"  {size:>12d} {size // dtype_bytes:>12d} {'float':>6} {algo:>18} "
            f"{protocol:>6} {time * 1e6:>10.2f} {algbw:>8.2f} {busbw:>8.2f}"
        )
    big = col["size_bytes"] >= 2**20
    if big.any():
        lines.append(
            f"# Avg bus bandwidth for sizes >= {format_bytes(2**20)}: {col['busbw_GBps'][big].mean():.2f} GB/s"
        )
    return "\n".join([*lines, *_tuner_headroom(col)])


#: How much slower than the fastest path a choice must be for the table to point it out.
HEADROOM_NOTED = 0.05


def _tuner_headroom(col: Mapping[str, np.ndarray]) -> list[str]:
    """A note where the library's choice is at least :data:`HEADROOM_NOTED` slower than the fastest path
    it offers: how many sizes, the largest gap and what takes it (NCCL sizes point-to-point protocols
    itself, :data:`~commodel.comm.collectives.P2P_OPS`; a tuner plugin or NCCL_ALGO/NCCL_PROTO the rest)."""
    time = col["time_s"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.where(time > 0, 1 - col["fastest_time_s"] / time, np.nan)
    slow = gap >= HEADROOM_NOTED
    if not slow.any():
        return []
    worst = int(np.nanargmax(np.where(slow, gap, np.nan)))
    knob = (
        "NCCL_P2P_LL_THRESHOLD" if col["op"][worst] in P2P_OPS else "a tuner plugin or NCCL_ALGO/NCCL_PROTO"
    )
    return [
        f"# the library's choice trails its fastest path at {int(slow.sum())} of {len(time)} sizes; most at "
        f"{format_bytes(int(col['size_bytes'][worst]))}: {col['algo'][worst]}/{col['protocol'][worst]} "
        f"{time[worst] * 1e6:.1f} us where {col['fastest'][worst]} takes {col['fastest_time_s'][worst] * 1e6:.1f} "
        f"us ({gap[worst]:.0%} less; {knob} would take it)"
    ]
