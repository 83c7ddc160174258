"""A collective's results in nccl-tests' own layout (size, count, type, algorithm, protocol, time,
algbw, busbw), with a note where the library's choice trails the fastest path it offers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commodel.comm.collectives import P2P_OPS
from commodel.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd


def nccl_tests_table(frame: pd.DataFrame, system: str, dtype_bytes: int = 4) -> str:
    """Format collective results like nccl-tests' output (size, count, type, time, algbw, busbw)."""
    first = frame.iloc[0]
    lines = [
        f"# commodel collective {first.op} on {system}: {first.gpus} GPUs over {first.nodes} node(s)",
        f"# {'size':>12} {'count':>12} {'type':>6} {'algo':>18} {'proto':>6} "
        f"{'time':>10} {'algbw':>8} {'busbw':>8}",
        f"# {'(B)':>12} {'(elements)':>12} {'':>6} {'':>18} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}",
    ]
    for row in frame.itertuples(index=False):
        lines.append(
            f"  {row.size_bytes:>12d} {row.size_bytes // dtype_bytes:>12d} {'float':>6} {row.algo:>18} "
            f"{row.protocol:>6} {row.time_s * 1e6:>10.2f} {row.algbw_GBps:>8.2f} {row.busbw_GBps:>8.2f}"
        )
    big = frame[frame.size_bytes >= 2**20]
    if len(big):
        lines.append(
            f"# Avg bus bandwidth for sizes >= {format_bytes(2**20)}: {big.busbw_GBps.mean():.2f} GB/s"
        )
    return "\n".join([*lines, *_tuner_headroom(frame)])


#: How much slower than the fastest path a choice must be for the table to point it out.
HEADROOM_NOTED = 0.05


def _tuner_headroom(frame: pd.DataFrame) -> list[str]:
    """A note where the library's choice is at least :data:`HEADROOM_NOTED` slower than the fastest path
    it offers: how many sizes, the largest gap and what takes it (NCCL sizes point-to-point protocols
    itself, :data:`~commodel.comm.collectives.P2P_OPS`; a tuner plugin or NCCL_ALGO/NCCL_PROTO the rest)."""
    gap = 1 - frame.fastest_time_s / frame.time_s.where(frame.time_s > 0)
    slow = frame[gap >= HEADROOM_NOTED]
    if slow.empty:
        return []
    worst = slow.loc[gap[slow.index].idxmax()]
    knob = "NCCL_P2P_LL_THRESHOLD" if worst.op in P2P_OPS else "a tuner plugin or NCCL_ALGO/NCCL_PROTO"
    return [
        f"# the library's choice trails its fastest path at {len(slow)} of {len(frame)} sizes; most at "
        f"{format_bytes(worst.size_bytes)}: {worst.algo}/{worst.protocol} {worst.time_s * 1e6:.1f} us where "
        f"{worst.fastest} takes {worst.fastest_time_s * 1e6:.1f} us ({gap[worst.name]:.0%} less; {knob} "
        "would take it)"
    ]
