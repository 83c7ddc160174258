"""What a GPU's board power leaves its clock.

A GPU running compute-bound kernels draws its whole board power: its clock is set by the power
limit, not the other way round (H100, B200 and MI300X GEMMs run at their limits; MI300X's BF16 GEMM
runs at a median 1207 of its 2100 MHz). Its power above idle grows with the clock as
``P - P_idle = c f^a`` (dynamic power ``f V^2``, the voltage rising with the clock). Two
consequences:

- **A power limit below the TDP** (``nvidia-smi -pl``), where the record's rates were measured at the
  TDP ``P_tdp``, runs the clock-bound rates at (:func:`clock_share`)::

      clock_share = ((P_lim - P_idle) / (P_tdp - P_idle)) ** (1 / a)

- **Watts drawn beside a compute-bound kernel** come out of its clock: a collective moving HBM bytes
  beside a GEMM adds ``e_HBM`` per byte (:data:`HBM_J_PER_BYTE`) to a board already at its limit. With
  ``p`` the share of the board's dynamic power (``P_board - P_idle``) the HBM draws at its achievable
  bandwidth (:func:`hbm_power_share`) and ``u`` the collective's HBM load, the kernel's clock falls to
  ``(1 - p u) ** (1 / a)`` of its clock alone (:func:`shared_clock`). Lee et al. (arXiv:2507.03114)
  report the compute slowing beside communication with its power.

Memory bandwidth is the HBM's own clock and does not change.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.hardware.schema import GPU

#: ``a`` of the power law above. Calibrated on AMD's Max-Achievable-FLOPs table (measurements
#: mi300x-maf-bf16 and mi325x-maf-bf16; rocm-blogs "Measuring Max-Achievable FLOPs, Part 2", Table 1):
#: the same CDNA3 die runs one BF16 GEMM at a median 1207 MHz at MI300X's 750 W and 1447 MHz at
#: MI325X's 1000 W; with their records' idle powers (127 W and 170 W),
#: ``a = ln(830 / 623) / ln(1447 / 1207) = 1.58``. The same table's FP16 clocks (1115 and 1354 MHz)
#: give 1.47 and its FP8 clocks (1230 and 1464 MHz) 1.65: the FP16 and FP8 clock ratios are predicted
#: within 1.2% and 0.7%.
POWER_CLOCK_EXPONENT = 1.58

#: Energy of moving one byte between HBM and the SMs when a memory-bound kernel streams it: about
#: 6 pJ/bit, the DRAM access and its I/O (HBM2: 3.9 pJ/bit, O'Connor et al., "Fine-Grained DRAM",
#: MICRO 2017) plus as much again on chip (crossbar, L2, shared memory and registers; Dally,
#: "Evolution of the Graphics Processing Unit", IEEE Micro 2021, puts on-chip transport at ~1 pJ/bit
#: per 10 mm). An assumption with a factor-of-1.5 uncertainty: no published inference power is in
#: data/measurements.csv to check it against.
HBM_J_PER_BYTE = 6e-12 * 8

#: The least clock a board's limit can force (a guard: no load in the models comes near it).
MIN_SHARED_CLOCK = 0.1


def clock_share(gpu: GPU) -> float:
    """The share of its TDP clock ``gpu`` runs clock-bound work at under its power limit (module
    formula); 1 without a limit."""
    if gpu.power_limit is None:
        return 1.0
    idle = gpu.idle_power.value
    return ((gpu.power_limit.value - idle) / (gpu.tdp.value - idle)) ** (1 / POWER_CLOCK_EXPONENT)


def hbm_power_share(gpu: GPU, hbm_Bps: float) -> float:
    """What ``gpu``'s HBM draws at its achievable bandwidth ``hbm_Bps``, as a share of its board's
    dynamic power: ``e_HBM B / (P_board - P_idle)`` (0.25 on an H100 at 700 W)."""
    return HBM_J_PER_BYTE * hbm_Bps / (gpu.board_power - gpu.idle_power.value)


def shared_clock(hbm_power: ArrayLike, load: ArrayLike) -> np.ndarray:
    """The clock of a compute-bound kernel, as a share of its clock alone, beside HBM traffic of
    ``load`` (of the achievable bandwidth) on a board whose HBM draws ``hbm_power`` of its dynamic
    power at full load: ``(1 - p u) ** (1 / a)`` (module docstring)."""
    drawn = np.asarray(hbm_power, dtype=float) * np.asarray(load, dtype=float)
    return np.maximum(1 - drawn, MIN_SHARED_CLOCK**POWER_CLOCK_EXPONENT) ** (1 / POWER_CLOCK_EXPONENT)
