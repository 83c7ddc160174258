"""The overlap job (``commodel overlap``'s options, the ``overlap`` evaluator's inputs): one GEMM
(or elementwise pass) beside one collective on the same GPUs, under one strategy (:mod:`commodel.overlap.pair`).

The GEMM is priced by the roofline on all SMs and on those the collective's CTAs leave; the
collective by the NCCL/RCCL model (NCCL's choice, or NVLS for ``in-network``); the two share HBM
(:mod:`commodel.overlap.interference`). Outputs: each side alone and together, its slowdown, the
pair's time, the serial and ideal times, and the share of the ideal gain reached
``(serial - T) / (serial - max(C, M))`` (negative where the strategy is slower than serial). Serial
and ideal are every strategy's common baseline: the GEMM, then the collective as NCCL chooses it
(``M``); ``in-network`` forces NVLS, which NCCL may not have chosen, so its gain may also exceed the
ideal's (NVLS faster than NCCL's choice) or fall below zero (slower).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from commodel.comm.calls import run_columns, too_small
from commodel.compute.kernels import DTYPE_BYTES, Kernel, elementwise, gemm
from commodel.compute.roofline import hbm_time, kernel_time
from commodel.errors import CommodelError
from commodel.hardware import HardwareDB
from commodel.hardware import cluster as make_cluster
from commodel.hardware.cluster import check_held
from commodel.overlap.interference import busbw_load, memory_of
from commodel.overlap.pair import GEMM_ONLY, PAIR_STRATEGIES, Pair, comm_ctas, pair_times
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.gemm import MAX_DIM
from commodel.pricing.job import MAX_GPUS, SYSTEM, Choices, Job
from commodel.units import format_bytes

#: Collectives an overlap job pairs with a GEMM: those with a ring or in-switch schedule whose
#: traffic per GPU is twice the bus bandwidth (send and receive).
PAIRED_OPS = ("allgather", "reducescatter", "allreduce")


class OverlapJob(Job):
    """A GEMM and a collective on the same GPUs, and how they are run together."""

    noun = "overlap"
    system: Annotated[str, SYSTEM] = Field(
        "dgx-h100", description="System (node) name from the hardware database."
    )
    gpus: int = Field(
        8,
        ge=2,
        le=MAX_GPUS,
        description="GPUs in the collective (within one scale-up domain: a node, an NVL72 rack).",
    )
    m: int = Field(8192, ge=1, le=MAX_DIM, description="Rows of the GEMM's A and C (per GPU).")
    n: int = Field(8192, ge=1, le=MAX_DIM, description="Columns of B and C (per GPU).")
    k: int = Field(8192, ge=1, le=MAX_DIM, description="Inner dimension.")
    dtype: Annotated[str, Choices("dtype", tuple(DTYPE_BYTES))] = Field("bf16", description="GEMM precision.")
    kernel: Annotated[str, Choices("compute kernel", ("gemm", "elementwise"))] = Field(
        "gemm", description="gemm (m x n x k), or elementwise (one pass reading and writing m x n elements)."
    )
    op: Annotated[str, Choices("collective", PAIRED_OPS)] = Field(
        "allgather", description="allgather, reducescatter or allreduce."
    )
    size_bytes: float = Field(
        2**28, gt=0, le=2**40, description="Bytes per collective call (nccl-tests' size)."
    )
    strategy: Annotated[str, Choices("overlap strategy", PAIR_STRATEGIES)] = Field(
        "sm-partition",
        description="serial, sm-partition (concurrent streams), occupancy-shaped (priority, co-resident), "
        "copy-engine, in-network (NVLS), fused (Flux, one kernel) or decomposed (async TP).",
    )
    collective_first: bool = Field(
        False, description="The collective is already running when the GEMM starts (else launched after it)."
    )


OUTPUTS = (
    "compute_s", "comm_s", "compute_together_s", "comm_together_s", "compute_slowdown", "comm_slowdown",
    "time_s", "serial_s", "ideal_s", "gain_share", "comm_ctas", "problem", "valid",
)  # fmt: skip


def compute_kernel(kind: str, m: int, n: int, k: int, dtype: str) -> Kernel:
    """The job's compute kernel: a GEMM, or one elementwise pass over an m x n tensor."""
    return gemm(m, n, k, dtype) if kind == "gemm" else elementwise(m * n, dtype)


def price_overlap(job: OverlapJob, db: HardwareDB | None = None) -> dict[str, float]:
    """The job's pair of kernels on its system in ``db`` (module docstring)."""
    if job.kernel != "gemm" and job.strategy in GEMM_ONLY:
        raise CommodelError(
            f"{job.strategy} cuts the collective into a GEMM's output tiles, which an elementwise pass does not have"
        )
    node = make_cluster(job.system, 1, db)
    if job.gpus > node.domain_gpus:
        raise CommodelError(
            f"an overlap job runs within one scale-up domain: {job.system}'s has {node.domain_gpus} GPUs, asked "
            f"for {job.gpus}"
        )
    where = make_cluster(job.system, -(-job.gpus // node.gpus_per_node), db)
    gpu = where.gpu
    kernel = compute_kernel(job.kernel, job.m, job.n, job.k, job.dtype)
    what = f"the {job.kernel}'s operands and the {job.op}'s {format_bytes(job.size_bytes)} buffer"
    check_held(gpu, float(kernel.bytes) + job.size_bytes, what)
    if why := too_small(job.op, job.size_bytes, job.gpus):
        raise CommodelError(why)
    in_network = job.strategy == "in-network"
    choice = run_columns(job.op, where, [job.size_bytes], job.gpus, algo="auto")
    call = run_columns(job.op, where, [job.size_bytes], job.gpus, algo="nvls") if in_network else choice
    comm_s, busbw = float(call["time_s"][0]), 1e9 * float(call["busbw_GBps"][0])
    baseline_s = float(choice["time_s"][0])
    sms = gpu.compute_units.value
    ctas = comm_ctas(job.strategy, float(call["channels"][0]))
    alone, partitioned = kernel_time(gpu, kernel, launch=False), kernel_time(gpu, kernel, False, sms - ctas)
    floor = gpu.launch_overhead.value  # no kernel is shorter than a launch, back to back or not
    compute_s = max(float(alone.time_s), floor)
    cut = compute_kernel(job.kernel, max(job.m // job.gpus, 1), job.n, job.k, job.dtype)
    memory = memory_of(gpu)
    chunk = kernel_time(gpu, cut, launch=False)
    pair = Pair(
        compute_s=compute_s,
        partitioned_s=max(float(partitioned.time_s), floor),
        waves=float(max(alone.tiling.tiles / (sms * alone.split_k), 1.0)),
        compute_load=min(float(hbm_time(gpu, kernel, tiling=alone.tiling)) / compute_s, 1.0),
        comm_s=comm_s,
        comm_load=float(busbw_load(busbw, memory, in_network)),
        memory=memory,
        chunk_s=max(float(chunk.time_s), floor),
        chunks=job.gpus,
        in_order=gpu.vendor == "nvidia",
        collective_first=job.collective_first,
    )
    ends = pair_times(job.strategy, pair)
    serial, ideal = compute_s + baseline_s, max(compute_s, baseline_s)
    comm_together = ends.comm - ends.comm_start
    return {
        "compute_s": compute_s, "comm_s": comm_s, "compute_together_s": ends.compute,
        "comm_together_s": comm_together, "compute_slowdown": ends.compute / compute_s,
        "comm_slowdown": comm_together / comm_s, "time_s": ends.total, "serial_s": serial, "ideal_s": ideal,
        "gain_share": (serial - ends.total) / (serial - ideal), "comm_ctas": ctas,
    }  # fmt: skip


def _row(row: object) -> dict:
    values = vars(row) | {name: int(getattr(row, name)) for name in ("gpus", "m", "n", "k")}
    return price_overlap(OverlapJob.model_construct(**values))


def overlap() -> Evaluator:
    return Evaluator.row_by_row(
        "overlap",
        "a GEMM beside a collective under one strategy: each side alone and together, total, gain share",
        OverlapJob,
        OUTPUTS,
        _row,
        ("problem",),
    )
