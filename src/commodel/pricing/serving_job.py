"""The serving deployment as a user states it (:class:`ServingJob`): model, system, replicas and
their layout, precision, request shape, batch or SLO, engine limits, facility and price. ``commodel
serve``'s options, :func:`commodel.pricing.run.serve` and the ``serving`` evaluator's inputs are its
fields."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field, field_validator, model_validator

from commodel.compute.precision import SERVING_RECIPES
from commodel.hardware import default_db
from commodel.pricing.job import (
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_SEQ,
    MODEL,
    Choices,
    Job,
    PowerLimit,
    Pue,
    make_job,
)
from commodel.workloads.serving.batch import PHASES
from commodel.workloads.serving.engine import HOST_SCHEDULES, KV_DTYPES
from commodel.workloads.serving.experts import DISPATCHERS, EP_OVERLAPS
from commodel.workloads.serving.memory import KV_RESERVE


def _systems() -> list[str]:
    """The systems of the hardware database in use (an overlay may add some)."""
    return list(default_db().systems)


class ServingJob(Job):
    """A serving deployment as a user states it: model, system, GPUs and their parallel layout per
    replica, precision, the request shape, how many requests are in flight (or the latency SLO that
    decides it), the engine's limits, and the facility and price figures."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, coerce_numbers_to_str=True, defer_build=True
    )  # batch = 8 or "8"
    noun: ClassVar[str] = "serving"
    together: ClassVar[tuple[str, ...]] = ("batch", "slo_ttft", "slo_tpot")

    model: Annotated[str, MODEL] = Field(
        description="Model name (workloads/): llama3-70b, qwen3-30b-a3b, ..., or a model file (commodel .toml, Hugging Face config.json)"
    )
    system: Annotated[str, Choices("system", _systems)] = Field(
        description="System (node) name from the hardware database."
    )
    gpus: int | None = Field(
        None, ge=1, le=MAX_GPUS, description="Total GPUs, in replicas of tp x pp (default: one replica)."
    )
    power_limit: PowerLimit = None
    tp: int = Field(1, ge=1, description="Tensor-parallel size of a replica.")
    pp: int = Field(1, ge=1, description="Pipeline-parallel size of a replica.")
    ep: int = Field(
        1, ge=1, description="Expert-parallel size (MoE; divides tp: experts over ep, tp / ep each)."
    )
    attention_dp: bool = Field(
        False,
        description="Attention data parallelism (TensorRT-LLM's enable_attention_dp) with --ep equal to --tp: "
        "each GPU runs attention and dense layers on its own requests with its own whole KV cache, the "
        "experts spread over the ep GPUs and reached by all-to-alls; requests in flight are per GPU.",
    )
    dispatcher: Annotated[str, Choices("serving dispatcher", DISPATCHERS)] = Field(
        "alltoall",
        description="How a MoE layer's tokens reach their experts' GPUs: alltoall (NCCL's all-to-all of every "
        "routed copy) or deepep (DeepEP: its normal kernels in iterations with prompts, its low-latency ones "
        "in decode-only iterations, as SGLang's --moe-a2a-backend deepep).",
    )
    ep_overlap: Annotated[str, Choices("serving expert overlap", EP_OVERLAPS)] = Field(
        "none",
        description="What hides a MoE layer's dispatch and combine: none, or two-batch (SGLang's "
        "--enable-two-batch-overlap, with --dispatcher deepep: each iteration split into two micro-batches, "
        "one's dispatch and combine beside the other's layer on the SMs DeepEP leaves).",
    )
    dtype: Annotated[str, Choices("serving precision", SERVING_RECIPES)] = Field(
        "bf16", description="Linear layers' weights and activations: bf16, fp8, fp4 (NVFP4)."
    )
    kv_dtype: Annotated[str, Choices("KV-cache dtype", KV_DTYPES)] = Field(
        "auto", description="KV cache: bf16, fp8, or auto (fp8 with fp8/fp4 weights)."
    )
    prompt: int = Field(1024, ge=1, le=MAX_SEQ, description="Prompt (input) tokens per request.")
    output: int = Field(1024, ge=1, le=MAX_SEQ, description="Output tokens per request.")
    prompt_cv: float = Field(
        0.0, ge=0, le=10, description="Spread of prompt lengths (coefficient of variation)."
    )
    output_cv: float = Field(
        0.0, ge=0, le=10, description="Spread of output lengths (coefficient of variation)."
    )
    batch: str = Field(
        "max",
        description="Requests in flight: a number, or max (all the KV cache holds: trtllm-bench's offline run).",
    )
    slo_ttft: float | None = Field(
        None, gt=0, description="Time-to-first-token SLO (s): the largest batch meeting it."
    )
    slo_tpot: float | None = Field(
        None, gt=0, description="Time-per-output-token SLO (s): the largest batch meeting it."
    )
    phase: Annotated[str, Choices("serving phase", PHASES)] = Field(
        "both",
        description="What every replica runs: both phases (continuous batching), or one alone as a "
        "prefill/decode-disaggregated pool does with the other pool never short of work: prefill (whole "
        "prompts, as many as --max-num-tokens holds) or decode (--batch queries over the mean context, prompt + "
        "output / 2).",
    )
    prefill_gpus: int = Field(
        0,
        ge=0,
        description="GPUs serving prompts only (prefill/decode disaggregation); 0: every replica does both.",
    )
    max_batch_size: int = Field(
        2048, ge=1, le=MAX_GLOBAL_BATCH, description="Engine limit on requests in flight."
    )
    max_num_tokens: int = Field(8192, ge=1, le=MAX_SEQ, description="Engine limit on tokens per iteration.")
    kv_reserve: Annotated[str, Choices("KV reservation", KV_RESERVE)] = Field(
        "full",
        description="How a request holds KV blocks: full (prompt plus the whole output from admission: "
        "TensorRT-LLM's guaranteed-no-evict scheduler) or paged (only the tokens it has so far: "
        "max-utilization, vLLM).",
    )
    kv_fraction: float = Field(0.9, gt=0, le=1, description="Share of free HBM given to the KV cache.")
    host_schedule: Annotated[str, Choices("host schedule", HOST_SCHEDULES)] = Field(
        "serial",
        description="The engine's host loop against the GPU: serial (each iteration prepared after the last "
        "ends: GPU + host) or overlapped (TensorRT-LLM's overlap scheduler, vLLM's async scheduling: "
        "max(GPU, host)).",
    )
    pue: Pue = Field(1.0, description="Facility PUE for energy (1.0: IT energy only).")
    price_per_gpu_hour: float = Field(0.0, ge=0, description="Price per GPU-hour (USD), for cost per token.")

    @field_validator("batch")
    @classmethod
    def _batch(cls, value: str) -> str:
        if value != "max" and not (value.isdigit() and 0 < int(value) <= MAX_GLOBAL_BATCH):
            raise ValueError(f"a number of requests (1 to {MAX_GLOBAL_BATCH}) or max; got '{value}'")
        return value

    @model_validator(mode="after")
    def _batch_or_slo(self) -> ServingJob:
        if self.batch != "max" and (self.slo_ttft is not None or self.slo_tpot is not None):
            raise ValueError("give a batch or a latency SLO, not both (the SLO chooses the batch)")
        return self


def serving_job(**values: object) -> ServingJob:
    """A validated :class:`ServingJob`."""
    return make_job(ServingJob, **values)
