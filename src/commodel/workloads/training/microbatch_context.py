"""What every part of one micro-batch's pricing shares (:class:`MicroBatch`): the layouts, the
fabric and the parallel groups on it, and a layer's work on all SMs or on those a collective leaves."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from commodel.comm.fabric import Fabric, fabric_of
from commodel.compute.precision import Precision
from commodel.hardware.cluster import Cluster
from commodel.overlap import Window, exposed, overlapping
from commodel.overlap.interference import Memory, memory_of
from commodel.workloads.layer.work import Work, either, layer_work_of
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import bytes_per
from commodel.workloads.parallel.groups import Group, group, job_domain, shared_nics
from commodel.workloads.parallel.layout import Layout


@dataclass
class MicroBatch:
    """What every part of a micro-batch's pricing shares: the layouts, the fabric and its groups
    (ranks tp-first, the expert grid folded over the same ranks), a layer's work on all SMs, and
    the layer's work on the SMs a collective leaves where the strategy partitions them; ``cut``: the
    layer's tensor-parallel GEMMs are also priced as userbuffers cuts them (its TP mechanism)."""

    model: Transformer
    cluster: Cluster
    x: Layout
    recipe: Precision
    strategy: str | np.ndarray
    attention_impl: str
    cut: bool = False
    fab: Fabric = field(init=False)
    full: Work = field(init=False)
    _on_sms: dict[bytes, Work] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.fab = shared_nics(fabric_of(self.cluster))
        self.full = layer_work_of(
            self.model, self.gpu, self.x, self.recipe, self.attention_impl, cut=self.cut
        )
        self.partitioning = overlapping(self.strategy)
        x, gpn = self.x, job_domain(self.x.gpus, self.fab.domain)
        self.tp, self.cp, self.dp = group(x.tp, 1, gpn), group(x.cp, x.tp, gpn), group(x.dp * x.cp, x.tp, gpn)
        self.etp, self.ep = group(x.expert_tp, 1, gpn), group(x.ep, x.expert_tp, gpn)
        self.edp = group(x.expert_dp, x.expert_tp * x.ep, gpn)
        pp_nodes = np.where(x.tp * x.cp * x.dp >= gpn, 2.0, 1.0)
        self.pp = Group(np.full_like(pp_nodes, 2.0), 2.0 / pp_nodes)

    @property
    def gpu(self) -> object:
        return self.cluster.gpu

    @property
    def size(self) -> float:
        """Bytes per element of activations and gradients on the wire (BF16)."""
        return bytes_per(self.recipe.other)

    @cached_property
    def memory(self) -> Memory:
        """The GPU's HBM as a collective beside the compute meets it."""
        return memory_of(self.gpu)

    @property
    def hbm(self) -> float:
        return self.memory.Bps

    @property
    def units(self) -> float:
        return self.gpu.compute_units.value

    def partitioned(self, k: np.ndarray) -> Work:
        """The layer's compute on the SMs a collective of ``k`` CTAs leaves where the strategy
        partitions them (priced once per ``k``), on all SMs elsewhere."""
        if not np.any(self.partitioning):
            return self.full
        key = np.asarray(k, dtype=float).tobytes()
        if key not in self._on_sms:
            m = self
            self._on_sms[key] = layer_work_of(m.model, m.gpu, m.x, m.recipe, m.attention_impl, m.units - k)
        return either(self.partitioning, self._on_sms[key], self.full)

    def exposed(self, layer: Window, comm_s: np.ndarray, **kwargs: object) -> np.ndarray:
        return exposed(self.strategy, layer, comm_s, memory=self.memory, **kwargs)
