"""Cost of a tuner policy plugin's decision, against the collective it tunes.

NCCL calls a tuner plugin's ``getCollInfo`` once per collective at enqueue (digest section 6); a
policy plugin (NCCLbpf runs verified eBPF programs there) pays a fixed dispatch to enter its program
and a cost per map operation it makes::

    decision = dispatch + lookups x lookup + updates x update

The share of the call it adds is ``decision / collective time``: negligible where the collective
takes microseconds or more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.errors import CommodelError


@dataclass(frozen=True)
class PluginCost:
    """Per-decision costs of a policy plugin, in seconds."""

    dispatch_s: float
    lookup_s: float
    update_s: float

    def decision_s(self, lookups: ArrayLike, updates: ArrayLike) -> np.ndarray:
        """Seconds one decision takes with ``lookups`` map lookups and ``updates`` map updates."""
        lookups, updates = np.asarray(lookups, dtype=float), np.asarray(updates, dtype=float)
        if np.any(lookups < 0) or np.any(updates < 0):
            raise CommodelError("map lookups and updates per decision cannot be negative")
        return self.dispatch_s + lookups * self.lookup_s + updates * self.update_s


def overhead_share(decision_s: ArrayLike, collective_s: ArrayLike) -> np.ndarray:
    """The share of a call's time its policy decision adds: ``decision / (collective + decision)``."""
    decision = np.asarray(decision_s, dtype=float)
    return decision / (np.asarray(collective_s, dtype=float) + decision)
