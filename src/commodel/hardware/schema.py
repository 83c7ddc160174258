"""Typed, validated hardware records: GPUs, links (and fabrics), systems (nodes).

Every number is a :class:`Sourced` quantity: its value in SI units plus the ``source`` it came from
(a datasheet, a measurement row id, or an explicit assumption). Records reject unknown keys.
"""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from commodel.records import (
    Bandwidth,
    ByteSize,
    Count,
    Duration,
    FlopRate,
    Fraction,
    Power,
    Strict,
)

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")


class GPU(Strict):
    """One accelerator (or one GCD of a multi-die package, as the runtime sees it)."""

    description: str
    vendor: Literal["nvidia", "amd"]
    architecture: str
    peak_flops: dict[Literal[DTYPES], FlopRate]  # type: ignore[valid-type]
    memory_capacity: ByteSize
    memory_bandwidth: Bandwidth
    compute_units: Count
    tdp: Power
    idle_power: Power
    host_link: str
    matmul_efficiency: Fraction
    memory_efficiency: Fraction
    launch_overhead: Duration

    @field_validator("peak_flops")
    @classmethod
    def _has_bf16(cls, v: dict) -> dict:
        if "bf16" not in v and "fp16" not in v:
            raise ValueError("needs at least a bf16 or fp16 peak")
        return v


class StepLatency(Strict):
    """Per-step latency of each NCCL protocol over one hop of this link kind."""

    ll: Duration
    ll128: Duration
    simple: Duration

    def __getitem__(self, protocol: str) -> float:
        return getattr(self, protocol).value


class Link(Strict):
    """A link or fabric port: bandwidth per direction, latencies, achievable efficiency.

    ``endpoint_power`` (scale-out fabrics): the switch power one endpoint adds in a two-tier fat tree
    (three ports: leaf down, leaf up, spine, with optics); the NIC itself is in the node's power.
    """

    description: str
    kind: Literal["nvlink", "xgmi", "pcie", "infiniband", "slingshot", "roce", "ethernet"]
    bandwidth: Bandwidth
    latency: Duration
    efficiency: Fraction
    step_latency: StepLatency
    switch: str = ""
    endpoint_power: Power | None = None
    in_network_reduction: bool = False
    reduction_efficiency: Fraction | None = None

    @model_validator(mode="after")
    def _reduction_needs_efficiency(self) -> Link:
        if self.in_network_reduction and self.reduction_efficiency is None:
            raise ValueError("in_network_reduction = true needs a reduction_efficiency")
        return self


class ScaleUp(Strict):
    """The fabric inside a node.

    ``switch``: each GPU has ``links_per_gpu`` links to a switch (NVSwitch).
    ``mesh``: each pair of GPUs has ``links_per_gpu`` direct links (xGMI / Infinity Fabric).
    ``pcie``: GPUs talk through the host's PCIe hierarchy, ``links_per_gpu`` x16 ports each.
    """

    topology: Literal["switch", "mesh", "pcie"]
    link: str
    links_per_gpu: Count


class ScaleOut(Strict):
    """The fabric between nodes: ``nics_per_node`` ports of ``link``, rail-aligned."""

    link: str
    nics_per_node: Count


class System(Strict):
    """A node: GPUs of one kind, their scale-up fabric, and its ports to the scale-out fabric.

    ``node_other_power``: everything in the node but its GPUs (CPUs, memory, NVSwitches, fans, power
    supply losses) at its rated value: the node's maximum power minus its GPUs' TDPs.
    """

    description: str
    gpu: str
    gpus_per_node: Count
    node_other_power: Power
    scale_up: ScaleUp
    scale_out: ScaleOut
