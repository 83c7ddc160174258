"""A layer's kernels timed on a GPU: each kernel's roofline time, at least a launch (the host issues
kernels no faster than that), the part of it that is memory-bound, and the time its HBM bytes take
(what a co-running kernel's traffic contends with)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.kernels import Kernel, stack
from commodel.compute.roofline import hbm_time, kernel_time
from commodel.hardware.schema import GPU

#: A :func:`timed` kernel: (time, memory-bound time, HBM time).
Timed = tuple[np.ndarray, np.ndarray, np.ndarray]


def timed(gpu: GPU, kernel: Kernel, units: ArrayLike | None) -> Timed:
    """(time, memory-bound time, HBM time) of a kernel; no kernel is shorter than a launch.

    HBM time is the time its HBM bytes take (:func:`~commodel.compute.roofline.hbm_time`: a GEMM's
    wave-by-wave operand panels), bound or not.
    """
    r = kernel_time(gpu, kernel, launch=False, units=units)
    time = np.maximum(r.time_s, gpu.launch_overhead.value)
    return time, np.where(r.memory_s >= r.compute_s, time, 0.0), hbm_time(gpu, kernel, units, r.tiling)


def hbm_share(priced: Timed) -> np.ndarray:
    """Of a :func:`timed` kernel's time, the part it spends moving HBM bytes: its roofline memory
    term, at most its time (what a collective beside it contends with)."""
    return np.minimum(priced[2], priced[0])


def timed_all(gpu: GPU, kernels: Sequence[Kernel], units: ArrayLike | None) -> list[Timed]:
    """:func:`timed` of each kernel, those of one dtype and kind priced in one roofline call
    (:func:`~commodel.compute.kernels.stack`): the same numbers, a call's fixed cost paid once per kind."""
    kinds: dict[tuple[str, bool, bool], list[int]] = {}
    for i, kernel in enumerate(kernels):
        kinds.setdefault((kernel.dtype, kernel.matmul, kernel.shape is None), []).append(i)
    out: dict[int, Timed] = {}
    for members in kinds.values():
        if len(members) == 1:
            out[members[0]] = timed(gpu, kernels[members[0]], units)
            continue
        priced = timed(gpu, stack([kernels[i] for i in members], np.shape(units)), units)
        out |= {i: (priced[0][j], priced[1][j], priced[2][j]) for j, i in enumerate(members)}
    return [out[i] for i in range(len(kernels))]
