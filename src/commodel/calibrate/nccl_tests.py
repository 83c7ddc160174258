"""Read nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ...) into a table.

The format users know::

    # nccl-tests version 2.13.10 nccl-headers=22304 nccl-library=22304
    # Collective test starting: all_reduce_perf
    #  Rank  0 Group  0 Pid  12345 on   node-a device  0 [0x18] NVIDIA H100 80GB HBM3
    #                                                              out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
               8             2     float     sum      -1    38.25    0.00    0.00      0    36.86    0.00    0.00      0

Older versions have no ``root`` column and call ``#wrong`` ``error``. The collective comes from ``--op``,
else the "Collective test starting" line, else the columns themselves (each ``*_perf`` binary prints
its own operator, root, element count and bus bandwidth factor: :data:`SIGNATURES`), else the file
name (``all_reduce_perf.log``); whichever names it must agree with the columns. The ranks, nodes and
device names come from the ``Rank`` lines (else the ranks from busbw / algbw); CUDA graph replay and
GPUs per process from the ``nThread ... nGpus ... graph:`` line; a forced algorithm from NCCL's
``NCCL_ALGO set by environment to X`` line (printed with ``NCCL_DEBUG=INFO``).

A line must be a healthy run's and agree with itself: a non-zero ``#wrong`` (the collective's results
were wrong; ``N/A``, a run without checking, reads) or an algbw that is not its size over its time
is refused, naming the line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from commodel.errors import CommodelError
from commodel.io import read_text

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
#: How far a line's algbw may sit from its size over its time: the 0.005 GB/s of its two printed
#: decimals, and the time's own rounding (nccl-tests prints at least four significant digits).
ALGBW_PRINTED, ALGBW_AGREEMENT = 0.006, 0.002
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\w+?)_perf")
_RANK = re.compile(r"#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^]]*\]\s*(.*)")
_THREADS = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_GRAPH = re.compile(r"#\s*nThread\s.*?graph:\s*(\d+)")
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
#: Bytes per element of the data types nccl-tests prints.
TYPE_BYTES = {
    "int8": 1, "uint8": 1, "char": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "f8e4m3": 1, "f8e5m2": 1,
    "half": 2, "float16": 2, "bfloat16": 2, "bf16": 2,
    "float": 4, "float32": 4, "int32": 4, "uint32": 4, "int": 4,
    "double": 8, "float64": 8, "int64": 8, "uint64": 8,
}  # fmt: skip


@dataclass(frozen=True)
class Signature:
    """What a collective's rows look like in nccl-tests (its ``*_perf`` source): whether it prints a
    reduction operator, a root rank, a per-rank element count (size / ranks), and its bus bandwidth
    factor busbw / algbw as a function of the rank count n."""

    reduces: bool | None  # None: either (sendrecv prints one it does not apply)
    rooted: bool
    per_rank_count: bool
    factor: Callable[[int], float]


SIGNATURES = {
    "allreduce": Signature(True, False, False, lambda n: 2 * (n - 1) / n),
    "reducescatter": Signature(True, False, True, lambda n: (n - 1) / n),
    "allgather": Signature(False, False, True, lambda n: (n - 1) / n),
    "alltoall": Signature(False, False, True, lambda n: (n - 1) / n),
    "broadcast": Signature(False, True, False, lambda n: 1.0),
    "reduce": Signature(True, True, False, lambda n: 1.0),
    "sendrecv": Signature(None, False, False, lambda n: 1.0),
}


@dataclass(frozen=True)
class NcclTestsLog:
    """One log: its collective, the ranks and nodes it ran on and their device names (None or empty
    where the log does not say), whether it replayed CUDA graphs (``-G``), the GPUs per process
    (``-g``), and a row per size with the out-of-place and in-place times (s) and bandwidths (GB/s)."""

    path: Path
    op: str
    ranks: int | None
    nodes: int | None
    rows: pd.DataFrame
    algo: str | None = None
    devices: tuple[str, ...] = ()
    graph: bool | None = None
    gpus_per_process: int | None = None


def ops_the_rows_fit(rows: pd.DataFrame, ranks: int | None) -> list[str]:
    """The collectives whose nccl-tests signature (:data:`SIGNATURES`) the rows match: the operator,
    the root, the element count against the size, and busbw / algbw at ``ranks`` (or at any count)."""
    width = rows["type"].map(TYPE_BYTES)
    observed = {
        "reduces": bool((rows.redop != "none").all()),
        "rooted": bool((rows.root >= 0).all()) if rows.root.notna().all() else None,
        "per_rank_count": bool((rows["count"] * width < rows.size_bytes).all())
        if width.notna().all()
        else None,
    }
    sized = rows[rows.algbw_GBps >= 1.0]  # two printed decimals: a ratio good to 1%
    factor = float((sized.busbw_GBps / sized.algbw_GBps).median()) if len(sized) else None
    fits = []
    for op, sig in SIGNATURES.items():
        if any(v is not None and getattr(sig, k) not in (None, v) for k, v in observed.items()):
            continue
        counts = np.array([ranks] if ranks else np.arange(2, 100_000))
        if factor is not None and not np.any(np.abs(sig.factor(counts) - factor) <= 0.02 * factor):
            continue
        fits.append(op)
    return fits


def ranks_from_factor(op: str, rows: pd.DataFrame) -> int | None:
    """The rank count busbw / algbw implies for ``op`` (None where the factor does not depend on it)."""
    sized = rows[rows.algbw_GBps >= 1.0]
    if op in ("broadcast", "reduce", "sendrecv") or sized.empty:
        return None
    factor = float((sized.busbw_GBps / sized.algbw_GBps).median())
    per = factor / 2 if op == "allreduce" else factor  # (n - 1) / n
    return round(1 / (1 - per)) if per < 0.999 else None


def _op_of(path: Path, text: str, rows: pd.DataFrame, ranks: int | None, given: str | None) -> str:
    """The collective: ``given`` (--op), else the log's "Collective test starting" line, else the only
    collective its columns fit, else its file name; any of them that the columns contradict is an
    error naming both."""
    fits = ops_the_rows_fit(rows, ranks)
    match = _STARTING.search(text)
    named = _binary_op(match[1]) if match else _binary_op(path.stem.removesuffix("_perf").split(".")[0])
    said, where = (given, "--op") if given else (named, "its header" if match else "its file name")
    evidence = f"its columns (redop, root, count, busbw/algbw) fit {' or '.join(fits) or 'no collective'}"
    if not fits:  # whatever its name says: no nccl-tests binary prints these columns
        raise CommodelError(f"{path}: {evidence}; not the output of an nccl-tests collective")
    if said is not None and said not in fits:
        raise CommodelError(f"{path}: {where} says {said} but {evidence}; give the right --op")
    if said is not None:
        return said
    if len(fits) == 1:
        return fits[0]
    raise CommodelError(f"{path}: cannot tell which collective this is: {evidence}; name it with --op")


def _binary_op(name: str) -> str | None:
    for binary, op in BINARIES.items():
        if name == binary or name.startswith(binary + "_perf"):
            return op
    return None


def read(path: str | Path, op: str | None = None) -> NcclTestsLog:
    """Parse one nccl-tests log; a file that is not one is a :class:`CommodelError` naming it. ``op``
    names the collective where the log cannot (and must agree with its columns)."""
    path = Path(path)
    text = read_text(path, "nccl-tests log")
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise CommodelError(f"{path}: empty file, not an nccl-tests log")
    headers = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    header = headers[0] if headers else None
    if len(headers) > 1:  # runs pasted one after another: each may have its own ranks and settings
        at = ", ".join(str(i + 1) for i in headers)
        raise CommodelError(
            f"{path}: {len(headers)} runs in one file (results headers at lines {at}); give each run its own file"
        )
    if header is None:
        raise CommodelError(
            f"{path}: not nccl-tests output (no '#  size  count  type  redop ...' header line; "
            "run all_reduce_perf or another *_perf binary and save its standard output)"
        )
    columns = lines[header].lstrip("#").split()
    has_root, counts_wrong = "root" in columns, "#wrong" in columns
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
        rows.append(_row(path, number, fields, has_root, counts_wrong))
    if not rows:
        raise CommodelError(f"{path}: line {header + 1}: a results header but no result rows under it")
    frame = pd.DataFrame(rows)
    ranked = [m for m in (_RANK.match(line) for line in lines) if m]
    ranks = len(ranked) or None
    op = _op_of(path, text, frame, ranks, op)
    forced = _FORCED.search(text)
    threads, graph = _THREADS.search(text), _GRAPH.search(text)
    return NcclTestsLog(
        path,
        op,
        ranks or ranks_from_factor(op, frame),
        len({m[1] for m in ranked}) or None,
        frame,
        NCCL_ALGO_NAMES.get(forced[1].lower()) if forced else None,
        tuple(m[2].strip() for m in ranked),
        bool(int(graph[1])) if graph else None,
        int(threads[1]) * int(threads[2]) if threads else None,
    )


def _row(path: Path, number: int, fields: list[str], has_root: bool, counts_wrong: bool) -> dict[str, float]:
    """One result line: size, count, type, redop, [root], then (time, algbw, busbw, #wrong) twice
    (older versions print an ``error`` column, the largest relative error, where ``#wrong`` counts
    wrong elements: only a count is checked)."""
    start = 5 if has_root else 4
    values = fields[start : start + 8]
    if len(values) < 8:
        raise CommodelError(
            f"{path}: line {number}: expected size, count, type, redop{', root' if has_root else ''} and "
            f"two groups of time, algbw, busbw, #wrong; got {len(fields)} fields"
        )
    try:
        numbers = [float(v) for v in values[:3] + values[4:7]]
        size, count = int(fields[0]), int(fields[1])
        root = int(fields[4]) if has_root else None
    except ValueError:
        raise CommodelError(
            f"{path}: line {number}: a result field is not a number: {' '.join(fields)}"
        ) from None
    if size <= 0 or min(numbers[0], numbers[3]) <= 0:
        raise CommodelError(f"{path}: line {number}: sizes and times must be positive")
    if not all(math.isfinite(v) and v >= 0 for v in numbers):  # 0.00 GB/s: a tiny size, as printed
        raise CommodelError(f"{path}: line {number}: times and bandwidths must be finite and not negative")
    for wrong in (values[3], values[7]) if counts_wrong else ():  # N/A: run without checking (-c 0)
        if wrong.upper() != "N/A" and wrong != "0":
            raise CommodelError(
                f"{path}: line {number}: #wrong {wrong}: the collective's results were wrong, "
                "so its times are not a healthy run's (fix the run, then time it)"
            )
    for time_us, algbw in ((numbers[0], numbers[1]), (numbers[3], numbers[4])):
        if abs(algbw - size / time_us / 1e3) > ALGBW_PRINTED + ALGBW_AGREEMENT * algbw:
            raise CommodelError(
                f"{path}: line {number}: algbw {algbw:g} GB/s is not its {size} B over {time_us:g} us "
                f"({size / time_us / 1e3:.2f} GB/s): an edited or mixed log"
            )
    return {
        "size_bytes": size,
        "count": count,
        "type": fields[2].lower(),
        "redop": fields[3].lower(),
        "root": root,
        "time_s": numbers[0] * 1e-6,
        "algbw_GBps": numbers[1],
        "busbw_GBps": numbers[2],
        "inplace_time_s": numbers[3] * 1e-6,
        "inplace_busbw_GBps": numbers[5],
    }
