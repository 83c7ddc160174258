"""A cluster: N nodes of one system joined by its scale-out fabric, with records resolved."""

from __future__ import annotations

from dataclasses import dataclass

from commodel.errors import CommodelError
from commodel.hardware.loader import HardwareDB, default_db
from commodel.hardware.schema import GPU, Link, System


@dataclass(frozen=True)
class Cluster:
    """``nodes`` nodes of ``system`` with the GPU and link records it names."""

    name: str
    system: System
    gpu: GPU
    scale_up: Link
    scale_out: Link
    nodes: int

    @property
    def gpus_per_node(self) -> int:
        return int(self.system.gpus_per_node.value)

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


def cluster(
    system: str, nodes: int = 1, db: HardwareDB | None = None, scale_out: str | None = None
) -> Cluster:
    """Resolve ``system`` (a name in the hardware database) into a cluster of ``nodes`` nodes,
    optionally joined by another scale-out fabric than the system's own (same NICs per node)."""
    db = db or default_db()
    if nodes < 1:
        raise CommodelError(f"a cluster needs at least one node, got {nodes}")
    record = db.system(system)
    fabric = db.link(scale_out or record.scale_out.link)
    if fabric.endpoint_power is None:
        raise CommodelError(f"'{scale_out}' is not a scale-out fabric (it has no endpoint_power)")
    return Cluster(
        name=system,
        system=record,
        gpu=db.gpu(record.gpu),
        scale_up=db.link(record.scale_up.link),
        scale_out=fabric,
        nodes=int(nodes),
    )
