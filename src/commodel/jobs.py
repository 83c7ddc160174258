"""One declaration per job kind (DESIGN principle 7): inputs, defaults, units, bounds and help text.

The CLI's options (:func:`commodel.cli` builds ``commodel train`` from :class:`TrainingJob`), the
scalar API (:func:`commodel.workloads.run.train`) and the sweep evaluator's inputs
(:mod:`commodel.explore.training_evaluator`) are all derived from this class, and a scalar call is
the evaluator on a one-row table, so every front end gives the same answer for the same job.

Fields whose default is ``None`` are derived: ``gpus`` from ``nodes`` (or the other way round),
``dp`` from the GPUs and the model-parallel sizes, ``seq`` from the model's training sequence.
Cross-field rules (a layout that does not divide the GPUs, heads not divisible by tp) are layout
rules, checked vectorized by :func:`commodel.workloads.layout.layout_problems`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from commodel.errors import CommodelError, suggest

#: Largest global batch (sequences) and sequence length a job may state: beyond, products of them
#: leave the range where float64 token counts are exact.
MAX_GLOBAL_BATCH = 2**40
MAX_SEQ = 2**25


def _choices(kind: str) -> Iterable[str]:
    """The names a categorical input may take (looked up when validated, not at import)."""
    if kind == "model":
        from commodel.workloads.catalog import models

        return models()
    if kind in ("system", "fabric"):
        from commodel.hardware import default_db

        db = default_db()
        return (
            db.systems
            if kind == "system"
            else ["", *(n for n, link in db.links.items() if link.endpoint_power)]
        )
    if kind == "dtype":
        from commodel.compute.precision import PRECISIONS

        return PRECISIONS
    if kind == "overlap":
        from commodel.overlap import STRATEGIES

        return STRATEGIES
    if kind == "tp_overlap":
        from commodel.workloads.tensor_parallel import TP_OVERLAP

        return TP_OVERLAP
    if kind == "attention":
        from commodel.workloads.transformer import ATTENTION_IMPLEMENTATIONS

        return ATTENTION_IMPLEMENTATIONS
    from commodel.workloads.layout import RECOMPUTE

    return (*RECOMPUTE, "auto")


#: What each categorical input is called in messages.
KINDS = {
    "model": "model",
    "system": "system",
    "fabric": "scale-out fabric",
    "dtype": "training precision",
    "overlap": "overlap strategy",
    "tp_overlap": "tensor-parallel overlap",
    "attention": "attention implementation",
    "recompute": "recompute mode",
}


class TrainingJob(BaseModel):
    """A training job as a user states it: model, system, parallel layout, batch, software settings,
    and the facility and price figures its energy and cost use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="Model name (workloads/): llama3-70b, deepseek-v3, qwen3-30b-a3b, ...")
    system: str = Field(description="System (node) name from the hardware database.")
    gpus: int | None = Field(None, ge=1, description="Total GPUs (default: nodes x GPUs per node).")
    nodes: int | None = Field(None, ge=1, description="Nodes (default: just enough for the GPUs).")
    fabric: str = Field("", description="Scale-out fabric instead of the system's own (a link name).")
    tp: int = Field(1, ge=1, description="Tensor-parallel size.")
    pp: int = Field(1, ge=1, description="Pipeline-parallel size.")
    dp: int | None = Field(None, ge=1, description="Data-parallel size (default: gpus / (tp pp cp)).")
    cp: int = Field(1, ge=1, description="Context-parallel size.")
    ep: int = Field(1, ge=1, description="Expert-parallel size.")
    vpp: int = Field(1, ge=1, description="Virtual pipeline stages per GPU (interleaved 1F1B).")
    global_batch: int = Field(1024, ge=1, le=MAX_GLOBAL_BATCH, description="Sequences per step.")
    micro_batch: int = Field(1, ge=1, le=MAX_GLOBAL_BATCH, description="Sequences per micro-batch.")
    seq: int | None = Field(None, ge=1, le=MAX_SEQ, description="Sequence length (default: the model's).")
    recompute: str = Field(
        "none", description="Activation recomputation: none, selective, full, or auto (the least that fits)."
    )
    sequence_parallel: bool = Field(False, description="Sequence parallelism (with tensor parallelism).")
    zero: int = Field(1, ge=0, le=3, description="ZeRO stage 0-3 (1 = distributed optimizer, 3 = FSDP).")
    dtype: str = Field("bf16", description="Training precision: bf16, fp16, fp8 (TE current scaling), mxfp8.")
    overlap: str = Field(
        "serial",
        description="Compute/communication overlap: serial, ideal, sm-partition, occupancy-shaped, in-network.",
    )
    tp_overlap: str = Field(
        "none", description="Tensor-parallel communication: none, t3 (fused GEMM+RS), cais."
    )
    attention: str = Field("flash", description="Attention kernel: flash or unfused.")
    pue: float = Field(1.0, description="Facility PUE for energy (1.0: IT energy only).")
    carbon_g_per_kWh: float = Field(0.0, ge=0, description="Grid carbon intensity (g CO2 per kWh).")
    price_per_gpu_hour: float = Field(0.0, ge=0, description="Price per GPU-hour (USD).")
    train_tokens: float = Field(
        1e12, gt=0, description="Tokens to train on (for time to train, energy, cost)."
    )

    @field_validator(*KINDS)
    @classmethod
    def _known(cls, value: str, info: Any) -> str:
        choices = list(_choices(info.field_name))
        if value not in choices:
            shown = (
                ", ".join(c for c in sorted(choices) if c) if len(choices) <= 40 else f"{len(choices)} names"
            )
            raise ValueError(
                f"unknown {KINDS[info.field_name]} '{value}'{suggest(value, choices)}; known: {shown}"
            )
        return value

    @field_validator("pue", "carbon_g_per_kWh", "price_per_gpu_hour", "train_tokens")
    @classmethod
    def _finite(cls, value: float, info: Any) -> float:
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        if info.field_name == "pue" and value < 1:
            raise ValueError(f"PUE is facility energy over IT energy, so at least 1; got {value}")
        return value


def job_error(exc: ValidationError) -> CommodelError:
    """A job's validation errors as one :class:`CommodelError` line per field, in the CLI's terms."""
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = f"not a training input{suggest(field, TrainingJob.model_fields)}"
        lines.append(f"--{field.replace('_', '-')}: {message}")
    return CommodelError("; ".join(lines))


def training_job(**values: Any) -> TrainingJob:
    """A validated :class:`TrainingJob`; bad values are a :class:`CommodelError` naming the option."""
    try:
        return TrainingJob(**values)
    except ValidationError as exc:
        raise job_error(exc) from None


def check_column(name: str, values: Iterable[Any], base: dict[str, Any]) -> None:
    """Check every distinct value a sweep gives input ``name`` with the same rules as the CLI
    (``base``: a valid job to vary one field of)."""
    for value in values:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        try:
            TrainingJob(**{**base, name: value})
        except ValidationError as exc:
            raise job_error(exc) from None
