"""Typed, validated hardware records: GPUs, links (and fabrics), systems (nodes).

Every number is a :class:`Sourced` quantity: its value in SI units plus the ``source`` it came from
(a datasheet, a measurement row id, or an explicit assumption). Records reject unknown keys.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationInfo, field_validator, model_validator

from commodel.errors import suggest
from commodel.hardware.gpu_sections import ExpertDispatch, GemmTiles, MemoryContention, Multiprocessor
from commodel.records import (
    Bandwidth,
    ByteSize,
    Count,
    Duration,
    FlopRate,
    Fraction,
    Power,
    Rate,
    Sourced,
    Strict,
)

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")

#: The GPU architectures the collective library's tables know, per vendor: NCCL's rows (its index from
#: the compute capability, :mod:`commodel.comm.tables`) and RCCL's xGMI generations. A GPU of another
#: architecture would be priced with some other generation's constants, so it is refused instead.
ARCHITECTURES = {"nvidia": ("volta", "ampere", "hopper", "blackwell"), "amd": ("cdna2", "cdna3")}


class GPU(Strict):
    """One accelerator (or one GCD of a multi-die package, as the runtime sees it).

    ``matmul_efficiency``: the share of the datasheet peak the best GEMM shape reaches, per dtype
    (MAMF-style measurements; a dtype without an entry takes bf16's). ``exp_rate``: exponentials per
    second the special-function units deliver at the datasheet clock (they bound softmax in fused
    attention); absent: no such bound is applied. ``multiprocessor``: one SM's resident limits
    (:class:`Multiprocessor`); absent: kernels sharing the GPU cannot be placed block by block.
    ``power_limit``: the board power limit a deployment sets below the ``tdp`` (``nvidia-smi -pl``);
    the record's rates are measured at the TDP, and under a lower limit its clock-bound rates fall
    (:func:`commodel.compute.power.clock_share`); absent: the TDP. ``gemm_tiles``: the GEMM
    library's output tiles (:class:`GemmTiles`); absent: CUTLASS/cuBLAS's 128 x 256 alone.
    ``memory_contention``: how its HBM serves a collective beside compute (:class:`MemoryContention`);
    absent: the values calibrated on A100. ``expert_dispatch``: what DeepEP's kernels sustain on it
    (:class:`ExpertDispatch`); absent: the values calibrated on H800.
    """

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
    matmul_efficiency: dict[Literal[DTYPES], Fraction]  # type: ignore[valid-type]
    memory_efficiency: Fraction
    launch_overhead: Duration
    exp_rate: Rate | None = None
    multiprocessor: Multiprocessor | None = None
    power_limit: Power | None = None
    gemm_tiles: GemmTiles | None = None
    memory_contention: MemoryContention = MemoryContention()
    expert_dispatch: ExpertDispatch = ExpertDispatch()

    @property
    def board_power(self) -> float:
        """Watts the board may draw: its power limit, else its TDP."""
        return (self.power_limit or self.tdp).value

    @model_validator(mode="after")
    def _known_architecture(self) -> GPU:
        known = ARCHITECTURES[self.vendor]
        if self.architecture not in known:
            raise ValueError(
                f"unknown architecture '{self.architecture}' for an {self.vendor} GPU{suggest(self.architecture, known)}; "
                f"known: {', '.join(known)} (the generations whose collective-library tables commodel carries)"
            )
        if self.idle_power.value >= self.tdp.value:
            raise ValueError(
                f"idle power {self.idle_power.value:g} W is not below the TDP {self.tdp.value:g} W"
            )
        return self

    @field_validator("power_limit")
    @classmethod
    def _below_tdp(cls, limit: Power | None, info: ValidationInfo) -> Power | None:
        idle, tdp = info.data.get("idle_power"), info.data.get("tdp")
        if limit is not None and idle is not None and tdp is not None:
            problem = power_limit_problem(limit.value, idle.value, tdp.value)
            if problem:
                raise ValueError(problem)
        return limit

    @field_validator("peak_flops", "matmul_efficiency")
    @classmethod
    def _has_bf16(cls, v: dict) -> dict:
        if "bf16" not in v and "fp16" not in v:
            raise ValueError("needs at least a bf16 or fp16 entry")
        return v

    def efficiency(self, dtype: str) -> float:
        """Best-GEMM share of the datasheet peak in ``dtype`` (bf16's where the dtype has none)."""
        table = self.matmul_efficiency
        entry = table.get(dtype) or table.get("bf16") or table["fp16"]
        return entry.value


def power_limit_problem(watts: float, idle: float, tdp: float) -> str:
    """What is wrong with a board limit of ``watts`` on a GPU of ``idle`` and ``tdp`` watts ("" if
    nothing): it must lie above the idle power and at most the TDP."""
    if idle < watts <= tdp:
        return ""
    side = f"above the TDP {tdp:g} W" if watts > tdp else f"not above the idle power {idle:g} W"
    return (
        f"{watts:g} W is {side}: a limit lies above the idle power {idle:g} W and at most the TDP {tdp:g} W"
    )


class NicInitiation(Strict):
    """How a scale-out NIC takes work (:mod:`commodel.comm.initiation`): ``processing`` per message on
    each side, switch ``hops`` between two nodes, the ``message_rate`` it sustains with many queues
    (default: one over its processing), and which initiation it supports: operations the
    host pre-stages and a GPU write triggers (``triggered_ops``: libfabric CXI on Slingshot) and work
    requests a GPU thread builds and rings itself (``device_initiated``: IBGDA / GDAKI on ConnectX)."""

    processing: Duration
    hops: Count
    message_rate: Rate | None = None
    triggered_ops: bool = False
    device_initiated: bool = False


def _assumed(microseconds: float, why: str) -> Duration:
    """A documented default (given in microseconds; stored in seconds, so no unit parsing at import)."""
    return Duration(value=microseconds * 1e-6, source=f"assumed: {why}")


class HostCosts(Strict):
    """Software costs of driving communication from a node's host and GPUs (defaults are documented
    assumptions; a system record may state its own under ``[initiation]``)."""

    host_sync: Duration = _assumed(2.0, "a spinning host thread sees a stream's kernel end")
    host_call: Duration = _assumed(1.0, "a small-message MPI or libfabric call, or a completion poll")
    proxy_poll: Duration = _assumed(1.0, "a proxy thread picks an entry off a lock-free GPU-to-host queue")
    stream_memop: Duration = _assumed(2.0, "the GPU front end runs a stream write- or wait-value operation")
    device_poll: Duration = _assumed(0.5, "a GPU thread polling memory sees a flag the NIC wrote")
    wqe_build: Duration = _assumed(0.5, "a GPU thread writes a 64-byte work request and fences it")
    doorbell: Duration = _assumed(
        1.0, "a GPU's uncached write to a NIC register crosses PCIe (as a PCIe transaction)"
    )
    progress: Duration = _assumed(
        1.0, "a pass of the library's progress engine: poll the completion queue, match, post the next"
    )
    reclaim: Duration = _assumed(
        1.0, "returning a completed operation's NIC resources (event-queue entries, counters) to the pool"
    )
    trigger_store: Duration = _assumed(
        0.2, "a GPU thread's release fence and posted store into a pre-staged operation's trigger counter"
    )
    queue_lock: Duration = _assumed(
        1.0, "GPU threads sharing a send queue: an atomic reserving a slot and a system-scope fence"
    )
    op_dispatch: Duration = Duration(
        value=10.5e-6,
        source="calibrated: measurement te2053-h100-torch-linear (a torch.nn.Linear forward, one operator, "
        "takes 13.48 us of host time on a DGX H100's Xeon 8480C, less the GPU's 3.0 us launch): PyTorch "
        "eager's host time per operator on an x86 server core (Python module code, dispatcher, autograd), "
        "order 10 us (He, 'Making Deep Learning Go Brrrr From First Principles', 2022; 6.0 us per forward "
        "and 4.2 per backward operator of small eager layers on the reference machine's Xeon, "
        "benchmarks/measure_host_ops.py); the driver's launch is the GPU record's launch_overhead",
        range=(5.25e-6, 21e-6),
    )
    te_module_ops: Sourced = Sourced(
        value=1.69,
        source="calibrated: measurement te2053-gb200-te-linear (a Transformer Engine Linear forward takes 99.66 us "
        "of host time on Grace, torch.nn.Linear's 37.08 us, one operator there: 2.69 times, so TE's Python "
        "around the GEMM, its recipe, workspace and shape checks and its autograd function's set-up, is 1.69 "
        "operators' worth); held out, the same issue's GH200 rows give 90.53 / 33.17 = 2.73, 1.73",
        range=(1.35, 2.1),
        note="operators' worth of host time a Transformer Engine GEMM module adds to its own operators' issue",
    )
    graph_replay: Duration = Duration(
        value=20e-6,
        source="assumed: one captured scope's replay, cudaGraphLaunch plus Transformer Engine's graphed-"
        "callable wrapper in Python",
        range=(10e-6, 40e-6),
    )


class Link(Strict):
    """A link or fabric port: bandwidth per direction, latency per hop, achievable efficiency.

    ``endpoint_power`` (scale-out fabrics): the switch power one endpoint adds in a two-tier fat tree
    (three ports: leaf down, leaf up, spine, with optics); the NIC itself is in the node's power.
    ``port_cost``: USD per switch port with its optic (a network's capital cost per port it uses);
    ``switch_radix``: ports per switch, which sets how many endpoints two tiers hold (``radix^2 / 2``).
    ``net_plugin_latency``: the latency a NIC's NCCL net plugin reports (NCCL's ``latencyInter``, added
    to every inter-node step, twice for Simple); absent means unreported (0), as for InfiniBand.
    ``device_unpack``: the NCCL net plugin lands data in bounce buffers that a GPU kernel unpacks
    (GPUDirect-TCPX/TCPXO); NCCL then runs only the Simple protocol across nodes.
    ``ring_step_latency`` and ``nvls_latency``: measured latencies of a Simple ring step and of a
    zero-copy NVLS call (registered buffers, as in CUDA graphs) on this link where they differ from
    the values NCCL's tuner tables assume (the tables still choose the algorithm; these price it).
    NCCL's per-step latencies per protocol come from its tuner tables (:mod:`commodel.comm.tables`)
    by the link's class: NVLink and xGMI, PCIe, or network.
    ``nvls_channel_bandwidth`` (a switch that reduces, ``in_network_reduction``): the bytes one NVLS
    channel (a CTA issuing multimem loads and stores) moves per second through the switch, what its
    requests in flight carry over their round trip; a GPU's multimem rate is that times the channels
    NCCL gives NVLS, at most its links' rate.
    """

    description: str
    kind: Literal["nvlink", "xgmi", "pcie", "infiniband", "slingshot", "roce", "ethernet"]
    bandwidth: Bandwidth
    latency: Duration
    efficiency: Fraction
    switch: str = ""
    endpoint_power: Power | None = None
    port_cost: Sourced | None = None
    switch_radix: Count | None = None
    in_network_reduction: bool = False
    nvls_channel_bandwidth: Bandwidth | None = None
    net_plugin_latency: Duration | None = None
    device_unpack: bool = False
    ring_step_latency: Duration | None = None
    nvls_latency: Duration | None = None
    initiation: NicInitiation | None = None

    @model_validator(mode="after")
    def _reduction_needs_a_channel_rate(self) -> Link:
        if self.in_network_reduction and self.nvls_channel_bandwidth is None:
            raise ValueError("in_network_reduction = true needs an nvls_channel_bandwidth")
        return self


class ScaleUp(Strict):
    """The fabric inside a node.

    ``switch``: each GPU has ``links_per_gpu`` links to a switch (NVSwitch).
    ``mesh``: each pair of GPUs has ``links_per_gpu`` direct links (xGMI / Infinity Fabric).
    ``pcie``: GPUs talk through the host's PCIe hierarchy, ``links_per_gpu`` x16 ports each.
    ``domain``: GPUs one scale-up fabric joins when it spans several nodes (GB200 NVL72: 72 GPUs in
    18 trays of 4); absent means one node.
    ``package``: dies sharing one package (MI250X: two GCDs), joined by ``package_links`` links each;
    on such a mesh ``links_per_gpu`` counts a die's links to the dies of other packages, in all.
    ``nvls_channel_bandwidth``: one NVLS channel's multimem rate where this system's switches set it
    apart from its link's (the link's :class:`Link` field): a channel moves what its requests in
    flight carry over the switch round trip, and a rack's switch trays, reached over its spine, are a
    longer trip than a baseboard's switches.
    """

    topology: Literal["switch", "mesh", "pcie"]
    link: str
    links_per_gpu: Count
    domain: Count | None = None
    nvls_channel_bandwidth: Bandwidth | None = None
    package: Count | None = None
    package_links: Count | None = None

    @model_validator(mode="after")
    def _package(self) -> ScaleUp:
        if (self.package is None) != (self.package_links is None):
            raise ValueError("package and package_links go together: dies per package, links between them")
        if self.package is not None and self.topology != "mesh":
            raise ValueError(f"a package of dies is a mesh's; the topology here is {self.topology}")
        return self


class ScaleOut(Strict):
    """The fabric between nodes: ``nics_per_node`` ports of ``link``.

    ``rail_optimized``: GPU i of every node reaches the same leaf switch (one hop between rails);
    otherwise inter-node steps cross two more switch hops. ``pod_gpus``: GPUs under one non-blocking
    leaf-spine pod, above which a core tier joins the pods with ``oversubscription`` downlinks per
    uplink (Meta's Llama 3 cluster: 3,072-GPU pods at 1:7); absent, the cluster is one pod.
    """

    link: str
    nics_per_node: Count
    rail_optimized: bool = True
    pod_gpus: Count | None = None
    oversubscription: Sourced | None = None

    @field_validator("oversubscription")
    @classmethod
    def _at_least_one(cls, v: Sourced | None) -> Sourced | None:
        if v is not None and v.value < 1:
            raise ValueError(f"oversubscription is downlinks per uplink, at least 1, got {v.value}")
        return v


class HostMemory(Strict):
    """The CPU memory a node's GPUs can move activations to: ``capacity`` per node, reached over
    ``link`` (a Grace CPU's NVLink-C2C, or a GPU's PCIe port), which ``gpus_per_link`` GPUs share (a
    GB200 superchip's one NVLink-C2C serves its two GPUs)."""

    capacity: ByteSize
    link: str
    gpus_per_link: Count


class System(Strict):
    """A node: GPUs of one kind, their scale-up fabric, and its ports to the scale-out fabric.

    ``cpu``: the host CPU's vendor (NCCL prices network overhead and LL bandwidth by it).
    ``node_other_power``: everything in the node but its GPUs (CPUs, memory, NVSwitches, fans, power
    supply losses) at its rated value: the node's maximum power minus its GPUs' TDPs.
    ``initiation``: the software costs of driving communication from its host and GPUs.
    ``host_memory``: the CPU memory activations can be offloaded to (absent: none is modelled).
    """

    description: str
    gpu: str
    gpus_per_node: Count
    cpu: Literal["intel", "amd", "arm"]
    node_other_power: Power
    scale_up: ScaleUp
    scale_out: ScaleOut
    initiation: HostCosts = HostCosts()
    host_memory: HostMemory | None = None
