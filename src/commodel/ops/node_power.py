"""The energy of a batch partition's nodes, and Slurm's power saving (``slurm.conf(5)``: SuspendTime,
ResumeTimeout; Slurm's Power Saving Guide).

A node draws ``P_idle + (P_busy - P_idle) u``, ``u`` the share of its most-used resource its jobs
use: power follows use, not allocation, so a node-exclusive job of 4 cores draws little more than
idle. With power saving, a node empty for ``suspend_after`` powers down and draws ``P_off``; a job
placed on it waits ``resume`` while it boots (at idle power). Slurm places jobs on powered nodes
before suspended ones. Without power saving, packing jobs onto fewer nodes saves no energy (every
empty node still idles); with it, the nodes packing empties sleep, and every job that wakes one
waits for its boot: the trade-off the scheduling sweep shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commodel.errors import CommodelError
from commodel.workloads.model.schema import NodePowerSpec


@dataclass(frozen=True)
class PowerSaving:
    """Slurm's power saving: nodes empty ``suspend_after_h`` hours power down (``inf``: never), and
    take ``resume_h`` hours to boot."""

    suspend_after_h: float = np.inf
    resume_h: float = 0.0

    def __post_init__(self) -> None:
        if not self.suspend_after_h > 0 or self.resume_h < 0:
            raise CommodelError("power saving needs a positive suspend time and a non-negative resume time")

    @property
    def on(self) -> bool:
        return bool(np.isfinite(self.suspend_after_h))


#: No power saving: empty nodes idle.
ALWAYS_ON = PowerSaving()


class NodeLedger:
    """Each node's power state over a simulation, and the joules it draws inside ``window`` (hours)."""

    def __init__(self, nodes: int, power: NodePowerSpec, saving: PowerSaving, window: tuple[float, float]):
        self.power, self.saving, self.window = power, saving, window
        self.use = np.zeros(nodes)  # share of the most-used resource in use
        self.since = np.zeros(nodes)  # when the current use level began
        self.empty_since = np.zeros(nodes)
        self.awake_at = np.zeros(nodes)  # when a booting node is up
        self.joules, self.boots = 0.0, 0

    def _charge(self, t0: float, t1: float, watts: float) -> None:
        low, high = max(t0, self.window[0]), min(t1, self.window[1])
        if high > low:
            self.joules += watts * (high - low) * 3600

    def _charge_empty(self, node: int, until: float) -> None:
        """An empty node's idle hours, then its suspended ones."""
        asleep = self.empty_since[node] + self.saving.suspend_after_h
        self._charge(self.empty_since[node], min(until, asleep), self.power.idle)
        self._charge(asleep, until, self.power.off)

    def _watts(self, node: int) -> float:
        return self.power.idle + (self.power.busy - self.power.idle) * min(self.use[node], 1.0)

    def powered(self, now: float) -> np.ndarray:
        """Nodes awake at ``now``: in use, or empty for less than the suspend time."""
        return (self.use > 0) | (now - self.empty_since < self.saving.suspend_after_h)

    def first_awake(self, fits: np.ndarray, now: float) -> int:
        """The first of the nodes ``fits`` that is awake at ``now``, else the first of them (Slurm
        places jobs on powered nodes before suspended ones)."""
        awake = fits[self.powered(now)[fits]]
        return int((awake if awake.size else fits)[0])

    def occupy(self, node: int, now: float, share: float) -> float:
        """A job using ``share`` of ``node`` placed at ``now``: the hours it waits for the node to boot."""
        if self.use[node] > 0:
            self._charge(self.since[node], now, self._watts(node))
        else:
            self._charge_empty(node, now)
            if not self.powered(now)[node]:
                self.boots += 1
                self.awake_at[node] = now + self.saving.resume_h
                self._charge(now, self.awake_at[node], self.power.idle)
        self.since[node] = max(now, self.awake_at[node])
        self.use[node] += share
        return self.since[node] - now

    def release(self, node: int, now: float, share: float) -> None:
        """A job using ``share`` of ``node`` ends at ``now``."""
        self._charge(self.since[node], now, self._watts(node))
        self.use[node] = max(self.use[node] - share, 0.0)
        self.since[node] = now
        if self.use[node] < 1e-9:
            self.use[node], self.empty_since[node] = 0.0, now

    def close(self, end: float) -> float:
        """Charge every node to ``end``; the joules drawn in the window."""
        for node in range(self.use.size):
            if self.use[node] > 0:
                self._charge(self.since[node], end, self._watts(node))
            else:
                self._charge_empty(node, end)
        return self.joules


def steady_power_W(power: NodePowerSpec, nodes: float, used_nodes: float) -> float:
    """Mean power of ``nodes`` always-on nodes whose jobs use ``used_nodes`` nodes' worth of their
    most-used resource: every node idles, the use adds ``P_busy - P_idle`` per node used."""
    return power.idle * nodes + (power.busy - power.idle) * used_nodes
