"""Communication models: point-to-point (Hockney, LogGP, NCCL protocols) and collectives."""

from commodel.comm.algorithms import ALGORITHMS, OPS, SUPPORTED
from commodel.comm.collectives import collective_time, run, tune
from commodel.comm.fabric import Fabric, fabric_of

__all__ = [
    "ALGORITHMS",
    "OPS",
    "SUPPORTED",
    "Fabric",
    "collective_time",
    "fabric_of",
    "run",
    "tune",
]
