"""Communication models: point-to-point (Hockney, LogGP, NCCL protocols) and collectives."""

from commodel.comm.calls import run
from commodel.comm.collectives import ALGORITHMS, collective_time, tune
from commodel.comm.fabric import Fabric, fabric_of
from commodel.comm.mpi import OPS

__all__ = ["ALGORITHMS", "OPS", "Fabric", "collective_time", "fabric_of", "run", "tune"]
