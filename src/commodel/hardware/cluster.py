"""A cluster: N nodes of one system joined by its scale-out fabric, with records resolved."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from commodel.errors import CommodelError
from commodel.hardware.loader import HardwareDB, default_db
from commodel.hardware.schema import GPU, Link, System, power_limit_problem
from commodel.units import format_bytes


@dataclass(frozen=True)
class Cluster:
    """``nodes`` nodes of ``system`` with the GPU and link records it names.

    ``partition``: GPUs per scale-up domain when a rack-scale domain is partitioned (GB200 NVL72 run
    as NVL4 trays or NVL8 pairs over the scale-out network); ``None`` uses the whole domain.
    ``host_memory_link``: the link to the CPU memory activations may be offloaded to, if any.
    ``pod_gpus`` and ``oversubscription``: the scale-out network's pods and its core tier's
    downlinks per uplink above them (the system's record, or a job's; ``None``: one pod).
    ``rack_nodes``: the nodes (trays) a rack-scale domain holds as deployed, where fewer than its
    record's (GB200 NVL72 racks of 16 of their 18 trays, as some clouds run them).
    """

    name: str
    system: System
    gpu: GPU
    scale_up: Link
    scale_out: Link
    nodes: int
    partition: int | None = None
    host_memory_link: Link | None = None
    pod_gpus: int | None = None
    oversubscription: float = 1.0
    rack_nodes: int | None = None

    @property
    def gpus_per_node(self) -> int:
        return int(self.system.gpus_per_node.value)

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def full_domain(self) -> int:
        """GPUs one scale-up fabric joins: the system's NVLink domain (its racks as deployed), or one
        node."""
        if self.rack_nodes is not None:
            return self.rack_nodes * self.gpus_per_node
        domain = self.system.scale_up.domain
        return int(domain.value) if domain is not None else self.gpus_per_node

    @property
    def domain_gpus(self) -> int:
        """GPUs per scale-up domain as this cluster runs (a partition, or the full domain)."""
        return self.partition or self.full_domain

    @property
    def op_issue_s(self) -> float:
        """Host seconds to issue one operator: the framework's dispatch (``initiation.op_dispatch``, by
        CPU) and the driver's launch (the GPU record's ``launch_overhead``)."""
        return self.system.initiation.op_dispatch.value + self.gpu.launch_overhead.value

    @property
    def host_link_Bps(self) -> float:
        """Achievable bytes/s of a GPU's link to its host (PCIe, at the link's measured efficiency)."""
        link = default_db().link(self.gpu.host_link)
        return link.bandwidth.value * link.efficiency.value

    @property
    def host_memory_per_gpu(self) -> float:
        """Bytes of CPU memory each GPU may offload to (0 where the system states none)."""
        host = self.system.host_memory
        return 0.0 if host is None else host.capacity.value / self.gpus_per_node

    @property
    def host_offload_Bps(self) -> float:
        """Achievable bytes/s per direction between one GPU and the CPU memory while every GPU copies
        (the link's measured efficiency, shared by the GPUs on it; 0 where the system states none)."""
        host, link = self.system.host_memory, self.host_memory_link
        if host is None or link is None:
            return 0.0
        return link.bandwidth.value * link.efficiency.value / host.gpus_per_link.value

    def fabric_tiers(self, nodes: ArrayLike) -> np.ndarray:
        """Switch tiers ``nodes`` nodes span: 2 (leaf and spine) within one pod, 3 (a core above the
        pods) beyond it; a pod is the stated ``pod_gpus``, else what two tiers of the scale-out
        switches hold (``radix^2 / 2`` NICs; unbounded where the record states no radix)."""
        nodes = np.asarray(nodes, dtype=float)
        radix = self.scale_out.switch_radix
        nics = nodes * self.system.scale_out.nics_per_node.value
        beyond = nics > (radix.value**2 / 2 if radix else np.inf)
        if self.pod_gpus is not None:
            beyond = nodes * self.gpus_per_node > self.pod_gpus
        return np.where(beyond, 3, 2)

    def switch_ports_per_nic(self, nodes: ArrayLike) -> np.ndarray:
        """Switch ports one NIC uses: leaf down, leaf up and spine down (3) in a non-blocking pod; above
        it a spine uplink and a core port for every ``oversubscription`` NICs (``3 + 2 / o``)."""
        return np.where(self.fabric_tiers(nodes) == 3, 3 + 2 / self.oversubscription, 3.0)

    @property
    def nvls(self) -> bool:
        """Whether the scale-up switches reduce in the network (NVLink SHARP)."""
        return self.scale_up.in_network_reduction


def _limited(gpu: GPU, watts: float | None) -> GPU:
    """``gpu`` with its board limited to ``watts`` (None: as its record states), which must lie above
    its idle power and at most its TDP."""
    if watts is None:
        return gpu
    problem = power_limit_problem(watts, gpu.idle_power.value, gpu.tdp.value)
    if problem:
        raise CommodelError(f"a power limit on {gpu.description}: {problem}")
    limit = gpu.tdp.model_copy(
        update={"value": float(watts), "source": "the run's power limit (nvidia-smi -pl)"}
    )
    return gpu.model_copy(update={"power_limit": limit})


def check_held(gpu: GPU, held: float, what: str) -> None:
    """An error saying that ``what`` (``held`` bytes, each held once) does not fit ``gpu``'s memory,
    where it does not: a job that cannot run has no time."""
    if held > gpu.memory_capacity.value:
        raise CommodelError(
            f"{what} take {format_bytes(held)}, more than the {format_bytes(gpu.memory_capacity.value)} of "
            f"{gpu.description}: it does not fit"
        )


def nodes_for(system: str, gpus: int, db: HardwareDB | None = None) -> int:
    """The fewest nodes of ``system`` that hold ``gpus`` GPUs (at least one)."""
    per_node = int((db or default_db()).system(system).gpus_per_node.value)
    return max(1, -(-int(gpus) // per_node))


def cluster(
    system: str,
    nodes: int = 1,
    db: HardwareDB | None = None,
    scale_out: str | None = None,
    partition: int | None = None,
    pod_gpus: int | None = None,
    oversubscription: float | None = None,
    trays_per_rack: int | None = None,
    nics: int | None = None,
    power_limit: float | None = None,
) -> Cluster:
    """Resolve ``system`` (a name in the hardware database) into a cluster of ``nodes`` nodes,
    optionally joined by another scale-out fabric than the system's own (same NICs per node) and
    with its scale-up domain cut into partitions of ``partition`` GPUs or racks of ``trays_per_rack``
    of its nodes, and its scale-out network's pods and oversubscription
    (:class:`~commodel.hardware.schema.ScaleOut`) as the record states them unless given; ``nics``:
    the NICs per node a run uses, where it uses fewer than the node has (NCCL_IB_HCA); ``power_limit``:
    the watts its GPUs' boards are limited to (``nvidia-smi -pl``), over the record's
    (:func:`commodel.compute.power.clock_share`)."""
    db = db or default_db()
    if nodes < 1:
        raise CommodelError(f"a cluster needs at least one node, got {nodes}")
    record = db.system(system)
    if nics is not None:
        held = record.scale_out.nics_per_node
        if not 1 <= nics <= held.value:
            raise CommodelError(
                f"a {system} node has {held.value:.0f} NICs; a run uses 1 to {held.value:.0f}, not {nics}"
            )
        used = held.model_copy(
            update={"value": float(nics), "source": f"the run's {nics} of {held.value:.0f} NICs"}
        )
        record = record.model_copy(
            update={"scale_out": record.scale_out.model_copy(update={"nics_per_node": used})}
        )
    fabric = db.link(scale_out or record.scale_out.link)
    if fabric.endpoint_power is None:
        raise CommodelError(f"'{scale_out}' is not a scale-out fabric (it has no endpoint_power)")
    built = Cluster(
        name=system,
        system=record,
        gpu=_limited(db.gpu(record.gpu), power_limit),
        scale_up=db.link(record.scale_up.link),
        scale_out=fabric,
        nodes=int(nodes),
        host_memory_link=None if record.host_memory is None else db.link(record.host_memory.link),
        pod_gpus=_pods(record, pod_gpus),
        oversubscription=_oversubscription(record, oversubscription),
    )
    if trays_per_rack is not None:
        full = built.full_domain // built.gpus_per_node
        if full <= 1:
            raise CommodelError(
                f"{system}'s scale-up domain is one node: trays per rack apply to rack-scale domains"
            )
        if not 1 <= trays_per_rack <= full:
            raise CommodelError(f"a {system} rack holds 1 to {full} trays, not {trays_per_rack}")
        built = Cluster(**{**built.__dict__, "rack_nodes": int(trays_per_rack)})
    radix = fabric.switch_radix
    if built.pod_gpus is not None and radix is not None:
        nics = built.pod_gpus / built.gpus_per_node * record.scale_out.nics_per_node.value
        if nics > radix.value**2 / 2:
            raise CommodelError(
                f"a pod of {built.pod_gpus} GPUs has {nics:.0f} NICs, more than two tiers of "
                f"{radix.value:.0f}-port switches hold ({radix.value**2 / 2:.0f})"
            )
    if partition is not None:
        full = built.full_domain
        if full <= built.gpus_per_node:
            raise CommodelError(
                f"{system}'s scale-up domain is one node: partitions cut a rack-scale domain (e.g. gb200-nvl72)"
            )
        if partition < 1 or full % partition:
            raise CommodelError(
                f"a partition of {partition} GPUs does not divide {system}'s {full}-GPU scale-up domain; "
                f"use a divisor of {full}"
            )
        built = Cluster(**{**built.__dict__, "partition": int(partition)})
    return built


def _pods(record: System, pod_gpus: int | None) -> int | None:
    """GPUs per pod: ``pod_gpus``, else the record's; whole scale-up domains (nodes, or racks of
    NVL72), which the scale-out network joins."""
    stated = record.scale_out.pod_gpus
    pod = pod_gpus if pod_gpus is not None else None if stated is None else int(stated.value)
    domain = record.scale_up.domain
    unit = int(domain.value if domain is not None else record.gpus_per_node.value)
    if pod is not None and (pod < unit or pod % unit):
        raise CommodelError(
            f"a pod of {pod} GPUs is not whole {unit}-GPU scale-up domains; use a multiple of {unit}"
        )
    return pod


def _oversubscription(record: System, ratio: float | None) -> float:
    """Downlinks per uplink above the pods: ``ratio``, else the record's, else 1."""
    stated = record.scale_out.oversubscription
    value = ratio if ratio is not None else 1.0 if stated is None else stated.value
    if not 1 <= value < float("inf"):
        raise CommodelError(f"oversubscription is downlinks per uplink, at least 1 and finite, got {value}")
    return float(value)


def job_size(c: Cluster, gpus: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """A job's GPUs and nodes on ``c``'s kind of node (NaN: not given): nodes just enough for the GPUs,
    GPUs every GPU of the nodes; and ``(mask, message)`` for each placement rule a job breaks (its
    GPUs must fit its nodes, and fill whole nodes beyond one)."""
    per_node = c.gpus_per_node
    nodes = np.where(np.isnan(nodes), np.where(np.isnan(gpus), 1, np.ceil(gpus / per_node)), nodes)
    gpus = np.where(np.isnan(gpus), nodes * per_node, gpus)
    problems = [
        (gpus > nodes * per_node, f"the GPUs do not fit in the nodes ({per_node} GPUs per node)"),
        (
            (gpus > per_node) & (np.mod(gpus, per_node) != 0),
            f"the GPUs do not fill whole {c.name} nodes of {per_node} GPUs",
        ),
        (np.mod(gpus, nodes) != 0, "the GPUs do not spread evenly over the nodes"),
    ]
    return gpus, nodes, problems
