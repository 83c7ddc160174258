"""The GEMM job (``commodel roofline gemm``'s options, the ``gemm`` evaluator's inputs): one GEMM on
one GPU through the roofline (:func:`commodel.compute.roofline.gemm_summary`): its time, achieved
TFLOP/s, bound, arithmetic intensity, split-K factor and the output tile it runs at."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from commodel.compute.kernels import DTYPE_BYTES
from commodel.compute.kernels import gemm as gemm_kernel
from commodel.compute.roofline import gemm_summary
from commodel.hardware import HardwareDB, default_db
from commodel.hardware.cluster import check_held
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import GPU, Choices, Job

#: The largest GEMM dimension taken (2^31: a 32-bit index, as cuBLAS takes it).
MAX_DIM = 2**31


class GemmJob(Job):
    """``C[m, n] = A[m, k] B[k, n]`` on one GPU in one precision."""

    noun = "gemm"
    gpu: Annotated[str, GPU] = Field("h100-sxm", description="GPU name from the hardware database.")
    m: int = Field(8192, ge=1, le=MAX_DIM, description="Rows of A and C.")
    n: int = Field(8192, ge=1, le=MAX_DIM, description="Columns of B and C.")
    k: int = Field(8192, ge=1, le=MAX_DIM, description="Inner dimension.")
    dtype: Annotated[str, Choices("dtype", tuple(DTYPE_BYTES))] = Field(
        "bf16", description="fp64, fp32, tf32, bf16, fp16, fp8, fp4 or w4a16 (4-bit weights, 16-bit math)."
    )
    launch: bool = Field(
        True, description="Add the kernel's launch (a lone call); off: back-to-back kernels, as GEMM "
        "benchmarks time them."
    )  # fmt: skip


def price_gemm(job: GemmJob, db: HardwareDB | None = None) -> dict[str, object]:
    """The job's GEMM on its GPU in ``db`` (default: the hardware database in use); one whose operands
    (A, B and C, each held once: the kernel's traffic) exceed the GPU's memory is an error saying so."""
    gpu = (db or default_db()).gpu(job.gpu)
    held = float(gemm_kernel(job.m, job.n, job.k, job.dtype).bytes)
    check_held(gpu, held, f"the operands of a {job.m}x{job.n}x{job.k} {job.dtype} GEMM")
    return gemm_summary(gpu, job.m, job.n, job.k, job.dtype, job.launch)


OUTPUTS = (
    "time_s", "tflops", "bound", "intensity_flop_per_byte", "split_k", "tile", "tiles", "waves", "problem", "valid",
)  # fmt: skip


def _row(row: object) -> dict:
    record = price_gemm(GemmJob.model_construct(**vars(row) | {d: int(getattr(row, d)) for d in "mnk"}))
    return {name: record[name] for name in OUTPUTS[:-2]}


def gemm() -> Evaluator:
    return Evaluator.row_by_row(
        "gemm", "one GEMM on one GPU through the roofline: time, TFLOP/s, bound", GemmJob, OUTPUTS, _row,
        ("problem", "bound", "tile"),
    )  # fmt: skip
