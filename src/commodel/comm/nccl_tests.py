"""Read nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ...) into a table.

The format users know::

    # nccl-tests version 2.13.10 nccl-headers=22304 nccl-library=22304
    # Collective test starting: all_reduce_perf
    #  Rank  0 Group  0 Pid  12345 on   node-a device  0 [0x18] NVIDIA H100 80GB HBM3
    #                                                              out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
               8             2     float     sum      -1    38.25    0.00    0.00      0    36.86    0.00    0.00      0

Older versions have no ``root`` column and call ``#wrong`` ``error``. The collective comes from the
"Collective test starting" line, else from the file name (``all_reduce_perf.log``); the ranks and
nodes from the ``Rank`` lines (their host names), when the log has them; a forced algorithm from
NCCL's ``NCCL_ALGO set by environment to X`` line (printed with ``NCCL_DEBUG=INFO``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from commodel.errors import CommodelError

#: nccl-tests binary name -> commodel collective.
BINARIES = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "alltoall",
    "sendrecv": "sendrecv",
}
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\w+?)_perf")
_RANK = re.compile(r"#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")
_HEADER = re.compile(r"#\s+size\s+count\s+type\s+redop\s")
_FORCED = re.compile(r"NCCL_ALGO set by environment to (\w+)\s*$", re.MULTILINE)
#: NCCL_ALGO spellings -> commodel algorithm names.
NCCL_ALGO_NAMES = {
    "ring": "ring",
    "tree": "tree",
    "nvls": "nvls",
    "nvlstree": "nvls-tree",
    "collnetdirect": "collnet-direct",
    "collnetchain": "collnet-chain",
    "pat": "pat",
}


@dataclass(frozen=True)
class NcclTestsLog:
    """One log: its collective, the ranks and nodes it ran on (None where the log does not say), and a
    row per size with the out-of-place and in-place times (s) and bus bandwidths (GB/s)."""

    path: Path
    op: str
    ranks: int | None
    nodes: int | None
    rows: pd.DataFrame
    algo: str | None = None


def _op_from(path: Path, text: str) -> str | None:
    match = _STARTING.search(text)
    name = match[1] if match else path.stem.removesuffix("_perf").split(".")[0]
    for binary, op in BINARIES.items():
        if name == binary or name.startswith(binary + "_perf"):
            return op
    return None


def read(path: str | Path) -> NcclTestsLog:
    """Parse one nccl-tests log; a file that is not one is a :class:`CommodelError` naming it."""
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        raise CommodelError(f"{path}: no such nccl-tests log") from None
    except IsADirectoryError:
        raise CommodelError(f"{path}: is a folder, not an nccl-tests log") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise CommodelError(f"{path}: empty file, not an nccl-tests log")
    header = next((i for i, line in enumerate(lines) if _HEADER.match(line)), None)
    if header is None:
        raise CommodelError(
            f"{path}: not nccl-tests output (no '#  size  count  type  redop ...' header line; "
            "run all_reduce_perf or another *_perf binary and save its standard output)"
        )
    columns = lines[header].lstrip("#").split()
    has_root = "root" in columns
    rows = []
    for number, line in enumerate(lines[header + 1 :], start=header + 2):
        stripped = line.strip()
        if "Avg bus bandwidth" in stripped:
            break
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
        if not fields[0].isdigit():
            if rows:
                break
            continue  # a warning between the header and the rows
        rows.append(_row(path, number, fields, has_root))
    if not rows:
        raise CommodelError(f"{path}: line {header + 1}: a results header but no result rows under it")
    hosts = [m[1] for m in (_RANK.match(line) for line in lines) if m]
    op = _op_from(path, text)
    if op is None:
        raise CommodelError(
            f"{path}: cannot tell which collective this is (no 'Collective test starting' line and the "
            f"file name is not like all_reduce_perf.log); name it with --op"
        )
    forced = _FORCED.search(text)
    algo = NCCL_ALGO_NAMES.get(forced[1].lower()) if forced else None
    frame = pd.DataFrame(rows)
    return NcclTestsLog(path, op, len(hosts) or None, len(set(hosts)) or None, frame, algo)


def _row(path: Path, number: int, fields: list[str], has_root: bool) -> dict[str, float]:
    """One result line: size, count, type, redop, [root], then (time, algbw, busbw, #wrong) twice."""
    start = 5 if has_root else 4
    values = fields[start : start + 8]
    if len(values) < 8:
        raise CommodelError(
            f"{path}: line {number}: expected size, count, type, redop{', root' if has_root else ''} and "
            f"two groups of time, algbw, busbw, #wrong; got {len(fields)} fields"
        )
    try:
        numbers = [float(v) for v in values[:3] + values[4:7]]
        size = int(fields[0])
    except ValueError:
        raise CommodelError(
            f"{path}: line {number}: a result field is not a number: {' '.join(fields)}"
        ) from None
    if size <= 0 or min(numbers[0], numbers[3]) <= 0:
        raise CommodelError(f"{path}: line {number}: sizes and times must be positive")
    return {
        "size_bytes": size,
        "time_s": numbers[0] * 1e-6,
        "busbw_GBps": numbers[2],
        "inplace_time_s": numbers[3] * 1e-6,
        "inplace_busbw_GBps": numbers[5],
    }
