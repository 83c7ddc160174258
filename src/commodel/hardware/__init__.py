"""Hardware records (GPUs, links, systems) and the cluster they form."""

from commodel.hardware.cluster import Cluster, cluster, nodes_for
from commodel.hardware.loader import HardwareDB, default_db, load_database
from commodel.hardware.schema import GPU, Link, System

__all__ = [
    "GPU",
    "Cluster",
    "HardwareDB",
    "Link",
    "System",
    "cluster",
    "default_db",
    "load_database",
    "nodes_for",
]
