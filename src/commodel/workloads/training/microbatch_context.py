"""What every part of one micro-batch's pricing shares (:class:`MicroBatch`): the layouts, the
fabric and the parallel groups on it, and a layer's work on all SMs or on those a collective leaves."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from commodel.comm.fabric import Fabric, fabric_of
from commodel.compute.precision import Precision
from commodel.hardware.cluster import Cluster
from commodel.overlap import Window, ctas, exposed, overlapping
from commodel.overlap.interference import Memory, memory_of
from commodel.workloads.layer.work import Work, either, layer_work_of, layer_works
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import bytes_per
from commodel.workloads.parallel.groups import Group, domain, group, in_switch, job_domain, shared_nics
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
    _on_sms: dict[bytes, Work] = field(init=False)

    def __post_init__(self) -> None:
        self.fab = shared_nics(fabric_of(self.cluster))
        self.partitioning = overlapping(self.strategy)
        x, gpn = self.x, job_domain(self.x.gpus, self.fab.domain)
        self.tp, self.cp, self.dp = group(x.tp, 1, gpn), group(x.cp, x.tp, gpn), group(x.dp * x.cp, x.tp, gpn)
        self.etp, self.ep = group(x.expert_tp, 1, gpn), group(x.ep, x.expert_tp, gpn)
        self.edp = group(x.expert_dp, x.expert_tp * x.ep, gpn)
        pp_nodes = np.where(x.tp * x.cp * x.dp >= gpn, 2.0, 1.0)
        self.pp = Group(np.full_like(pp_nodes, 2.0), 2.0 / pp_nodes)
        # The layer on all SMs, and on those the data-parallel and point-to-point collectives leave
        # where the strategy partitions them, in one call (:func:`layer_works`).
        fewer = [self.dp_ctas, self.p2p_ctas] if np.any(self.partitioning) else []
        works = layer_works(
            self.model, self.gpu, x, self.recipe, self.attention_impl,
            [(None, self.cut), *((self.units - k, False) for k in fewer)],
        )  # fmt: skip
        self.full = works[0]
        self._on_sms = {
            np.asarray(k, dtype=float).tobytes(): w for k, w in zip(fewer, works[1:], strict=True)
        }

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

    @property
    def dp_ctas(self) -> np.ndarray:
        """CTAs the data-parallel collectives take from the compute under the strategy."""
        return ctas(self.strategy, domain(self.fab, self.dp), in_switch(self.fab, self.dp))

    @property
    def p2p_ctas(self) -> np.ndarray:
        """CTAs a point-to-point exchange (pipeline sends, context parallelism's ring) takes."""
        return np.full_like(self.x.tokens, ctas(self.strategy, "p2p"))

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
