"""One declaration per job kind (DESIGN principle 7): inputs, defaults, units, bounds and help text.

The CLI's options (:func:`commodel.cli` builds ``commodel train`` from :class:`TrainingJob` and
``commodel serve`` from :class:`ServingJob`), the scalar APIs (:mod:`commodel.pricing.run`) and
the sweep evaluators' inputs (:mod:`commodel.pricing.training`,
:mod:`commodel.pricing.serving`) are all derived from these classes, and a scalar call is
the evaluator on a one-row table, so every front end gives the same answer for the same job.

Fields whose default is ``None`` are derived: ``gpus`` from ``nodes`` (or the other way round),
``dp`` from the GPUs and the model-parallel sizes, ``seq`` from the model's training sequence.
Cross-field rules (a layout that does not divide the GPUs, heads not divisible by tp) are layout
rules, checked vectorized by :func:`commodel.workloads.layout.layout_problems`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from commodel.errors import CommodelError, suggest

#: Largest global batch (sequences) and sequence length a job may state: beyond, products of them
#: leave the range where float64 token counts are exact.
MAX_GLOBAL_BATCH = 2**40
MAX_SEQ = 2**25

J = TypeVar("J", bound="Job")


def _choices(kind: str) -> Iterable[str]:
    """The names a categorical input of ``kind`` may take (looked up when validated, not at import)."""
    if kind == "model":
        from commodel.workloads.catalog import models

        return models()
    if kind in ("system", "scale-out fabric"):
        from commodel.hardware import default_db

        db = default_db()
        return (
            db.systems
            if kind == "system"
            else ["", *(n for n, link in db.links.items() if link.endpoint_power)]
        )
    if kind == "training precision":
        from commodel.compute.precision import PRECISIONS

        return PRECISIONS
    if kind == "serving precision":
        from commodel.compute.precision import SERVING_RECIPES

        return SERVING_RECIPES
    if kind == "KV-cache dtype":
        from commodel.workloads.serving import KV_DTYPES

        return KV_DTYPES
    if kind == "failure model":
        from commodel.workloads.catalog import failure_models

        return ["", *failure_models()]
    if kind == "checkpoint mode":
        from commodel.ops.goodput import CHECKPOINT_MODES

        return CHECKPOINT_MODES
    if kind == "cross-vendor transport":
        from commodel.comm.cross_vendor import TRANSPORTS

        return TRANSPORTS
    if kind == "overlap strategy":
        from commodel.overlap import STRATEGIES

        return STRATEGIES
    if kind == "tensor-parallel overlap":
        from commodel.workloads.tensor_parallel import TP_OVERLAP

        return TP_OVERLAP
    if kind == "expert-parallel overlap":
        from commodel.workloads.training import EP_OVERLAP

        return EP_OVERLAP
    if kind == "attention implementation":
        from commodel.workloads.transformer import ATTENTION_IMPLEMENTATIONS

        return ATTENTION_IMPLEMENTATIONS
    if kind == "recompute module":
        from commodel.workloads.layout import RECOMPUTE_MODULES

        return RECOMPUTE_MODULES
    if kind == "pipeline schedule":
        from commodel.workloads.layout import SCHEDULES

        return SCHEDULES
    if kind == "expert dispatcher":
        from commodel.workloads.layout import DISPATCHERS

        return DISPATCHERS
    from commodel.workloads.layout import RECOMPUTE

    return (*RECOMPUTE, "auto")


def _names(kind: str, value: str) -> list[str]:
    """The names a categorical value holds: a system may be node groups (``mi300x-8:2,dgx-h100:2``),
    recompute modules a comma-separated list (``layernorm,mla_up_proj``)."""
    if kind == "recompute module":
        from commodel.workloads.layout import module_names

        return module_names(value)
    if kind == "system" and ":" in value:
        from commodel.workloads.hetero import parse_node_groups

        try:
            return [name for name, _ in parse_node_groups(value)]
        except CommodelError as exc:
            raise ValueError(str(exc)) from None
    return [value]


class Job(BaseModel):
    """What every job declaration shares: no unknown fields, categorical inputs checked against their
    names (``categories``: field -> what it is called), finite numbers, a PUE of at least 1."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    #: What the job's inputs are called in messages ("not a training input").
    noun: ClassVar[str] = "job"
    categories: ClassVar[dict[str, str]] = {}

    @field_validator("*")
    @classmethod
    def _known(cls, value: Any, info: Any) -> Any:
        kind = cls.categories.get(info.field_name)
        if kind is not None:
            choices = list(_choices(kind))
            for name in _names(kind, value):
                if name not in choices:
                    shown = (
                        ", ".join(c for c in sorted(choices) if c)
                        if len(choices) <= 40
                        else f"{len(choices)} names"
                    )
                    raise ValueError(f"unknown {kind} '{name}'{suggest(name, choices)}; known: {shown}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        if info.field_name == "pue" and value < 1:
            raise ValueError(f"PUE is facility energy over IT energy, so at least 1; got {value}")
        return value


class TrainingJob(Job):
    """A training job as a user states it: model, system, parallel layout, batch, software settings,
    and the facility and price figures its energy and cost use."""

    noun: ClassVar[str] = "training"
    categories: ClassVar[dict[str, str]] = {
        "model": "model",
        "system": "system",
        "fabric": "scale-out fabric",
        "dtype": "training precision",
        "overlap": "overlap strategy",
        "tp_overlap": "tensor-parallel overlap",
        "ep_overlap": "expert-parallel overlap",
        "attention": "attention implementation",
        "recompute": "recompute mode",
        "recompute_modules": "recompute module",
        "schedule": "pipeline schedule",
        "dispatcher": "expert dispatcher",
        "transport": "cross-vendor transport",
        "failures": "failure model",
        "checkpoint": "checkpoint mode",
    }

    model: str = Field(description="Model name (workloads/): llama3-70b, deepseek-v3, qwen3-30b-a3b, ...")
    system: str = Field(
        description="System (node) name from the hardware database, or node groups SYSTEM:NODES,... "
        "(pipeline stages across unlike nodes, e.g. mi300x-8:1,dgx-h100:1)."
    )
    gpus: int | None = Field(None, ge=1, description="Total GPUs (default: nodes x GPUs per node).")
    nodes: int | None = Field(None, ge=1, description="Nodes (default: just enough for the GPUs).")
    fabric: str = Field("", description="Scale-out fabric instead of the system's own (a link name).")
    tp: int = Field(1, ge=1, description="Tensor-parallel size.")
    pp: int = Field(1, ge=1, description="Pipeline-parallel size.")
    dp: int | None = Field(None, ge=1, description="Data-parallel size (default: gpus / (tp pp cp)).")
    cp: int = Field(1, ge=1, description="Context-parallel size.")
    ep: int = Field(1, ge=1, description="Expert-parallel size.")
    etp: int | None = Field(
        None,
        ge=1,
        description="Expert tensor-parallel size (Megatron's --expert-tensor-parallel-size; default: tp). "
        "The expert grid etp x ep folds over the tp x cp x dp ranks, so ep may span tensor-parallel ranks.",
    )
    vpp: int = Field(1, ge=1, description="Virtual pipeline stages per GPU (interleaved 1F1B).")
    schedule: str = Field(
        "1f1b",
        description="Pipeline schedule: 1f1b (interleaved with vpp > 1), or dualpipe (DeepSeek-V3: two "
        "stages per GPU, even pp, micro-batches even and at least 2 x pp).",
    )
    first_stage_layers: int | None = Field(
        None,
        ge=1,
        description="Layers on the first pipeline stage, the rest split evenly (Megatron's "
        "--decoder-first-pipeline-num-layers; with vpp > 1 the stage's total over its chunks; default: an "
        "even split).",
    )
    last_stage_layers: int | None = Field(
        None,
        ge=1,
        description="Layers on the last pipeline stage, the rest split evenly (Megatron's "
        "--decoder-last-pipeline-num-layers; default: an even split).",
    )
    pipeline_layout: str = Field(
        "",
        description="Megatron's --pipeline-model-parallel-layout: each chunk's layers, | between chunks, E "
        "the embedding, t a decoder layer, m a multi-token prediction module, L the loss, x*n and (...)*n "
        "repeat (DeepSeek-V3 on pp 4: Et*4|(t*4|)*14tmL); it sets vpp, the first and last stages' layers "
        "and the prediction modules.",
    )
    grad_reduce_in_fp32: bool = Field(
        True,
        description="Accumulate and reduce gradients in FP32 (4 B each; Megatron-LM's default under BF16 and "
        "Megatron-Bridge's training recipes'); off: BF16 gradients (Megatron's --grad-reduce-in-bf16; "
        "Megatron-Bridge's performance recipes).",
    )
    ends_as_layers: bool = Field(
        False,
        description="Count the embedding and the loss as one layer each in the pipeline split (Megatron's "
        "--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split; Llama 3 405B): "
        "the first and last stages hold one layer fewer; layers + 2 must divide by pp x vpp.",
    )
    mtp_layers: int = Field(
        0,
        ge=0,
        le=64,
        description="Multi-token prediction modules on the last stage (Megatron's --mtp-num-layers; "
        "DeepSeek-V3 trains with 1): a layer, a projection and the logits each.",
    )
    expert_load: float = Field(
        1.0,
        ge=1,
        description="Tokens the busiest expert-parallel rank receives over the mean: 1 = balanced "
        "(force-balanced routing, or a padded capacity factor of 1); a padded capacity factor c gives c.",
    )
    global_batch: int = Field(1024, ge=1, le=MAX_GLOBAL_BATCH, description="Sequences per step.")
    micro_batch: int = Field(1, ge=1, le=MAX_GLOBAL_BATCH, description="Sequences per micro-batch.")
    seq: int | None = Field(None, ge=1, le=MAX_SEQ, description="Sequence length (default: the model's).")
    recompute: str = Field(
        "none",
        description="Activation recomputation: none, selective (the attention core: saves memory with "
        "unfused attention only), full, or auto (the cheapest way to fit: recompute, or offload to CPU "
        "memory where Megatron-Core can, with one pipeline stage and no other recomputation, the fewest "
        "layers that must).",
    )
    offload_layers: int = Field(
        0,
        ge=0,
        le=1024,
        description="Layers whose activations go to CPU memory while the next layers run (Megatron's "
        "--cpu-offloading-num-layers; Megatron-Core: one pipeline stage, no recomputation, fewer than all "
        "layers). recompute auto chooses its own.",
    )
    recompute_modules: str = Field(
        "",
        description="Parts of every layer not recomputed in full that run their forward again in the backward "
        "(Megatron's --recompute-modules, comma-separated; its core_attn is --recompute selective): layernorm, "
        "moe_act (MoE), mla_up_proj (MLA) drop their outputs; mlp (dense layers), moe (the MoE layer with its "
        "all-to-alls), shared_experts keep only their input. "
        "Under FP8, layernorm and moe_act free only a MoE router's BF16 input (the linear layers keep FP8 copies).",
    )
    sequence_parallel: bool = Field(False, description="Sequence parallelism (with tensor parallelism).")
    ep_sms: int | None = Field(
        None,
        ge=1,
        description="SMs the expert all-to-all kernels hold while they overlap compute (--ep-overlap): "
        "DeepEP's (Megatron's --moe-deepep-num-sms; DeepSeek-V3: 20); default: NCCL's CTAs, or 20 with "
        "--dispatcher deepep.",
    )
    dispatcher: str = Field(
        "alltoall",
        description="Expert token dispatcher: alltoall (Megatron's, over NCCL: every routed copy to its "
        "expert's GPU) or deepep (Megatron's flex dispatcher with DeepEP: a token crosses the network once "
        "per remote domain its experts are in, then NVLink; on 20 SMs unless --ep-sms).",
    )
    fp8_dispatch: bool = Field(
        False,
        description="Send expert inputs, and the gradients towards the experts, in FP8 with per-128 scales "
        "(DeepSeek-V3; DeepEP); combines stay BF16.",
    )
    fp8_activation_input: bool = Field(
        False,
        description="Keep the MLP activation function's input (FC1's output) in FP8 for the backward pass "
        "(Megatron's --activation-func-fp8-input-store; DeepSeek-V3 caches SwiGLU's input so): 1 B per "
        "element where BF16 keeps 2. Memory only.",
    )
    permute_fusion: bool = Field(
        False,
        description="Permute tokens to their experts with Transformer Engine's fused kernels (Megatron's "
        "--moe-permute-fusion; Megatron-Bridge's MoE models set it): each token read once and its top_k "
        "copies written, where the unfused path reads and writes every copy.",
    )
    bf16_moments: bool = Field(
        False,
        description="Keep Adam's first and second moments in BF16 (Megatron's --use-precision-aware-optimizer "
        "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; DeepSeek-V3, and Megatron-Bridge's DeepSeek-V3 "
        "recipe): 8 B of optimizer state per parameter where FP32 moments take 12, and less traffic.",
    )
    fp8_param_gather: bool = Field(
        True,
        description="Under FP8, keep the primary weights in FP8 and gather them so (Megatron's "
        "--fp8-param-gather, as Megatron-Bridge's FP8 recipes run): 2 B of FP8 copies per parameter, 1 B "
        "(per-tensor, blockwise) or both MXFP8 copies gathered; off: BF16 primary weights, gathered at 2 B, "
        "beside their FP8 copies (4 B per parameter). No effect in BF16.",
    )
    zero: int = Field(1, ge=0, le=3, description="ZeRO stage 0-3 (1 = distributed optimizer, 3 = FSDP).")
    dtype: str = Field(
        "bf16",
        description="Training precision: bf16, fp16, fp8 (TE current scaling), mxfp8, fp8-block (TE blockwise, DeepSeek-V3's).",
    )
    overlap: str = Field(
        "serial",
        description="Compute/communication overlap: serial, ideal, sm-partition, occupancy-shaped, in-network.",
    )
    tp_overlap: str = Field(
        "none",
        description="Tensor-parallel communication: none, t3 (fused GEMM+RS), cais, "
        "userbuffers (Transformer Engine's comm+GEMM overlap; needs --sequence-parallel).",
    )
    ep_overlap: str = Field(
        "none",
        description="Expert all-to-alls: none (on the critical path, Megatron's default), 1f1b (one "
        "micro-batch's dispatch and combine under another's compute, Megatron's "
        "--overlap-moe-expert-parallel-comm) or shared-experts (beside the layer's own shared experts, "
        "Megatron's --moe-shared-expert-overlap).",
    )
    attention: str = Field("flash", description="Attention kernel: flash or unfused.")
    transport: str = Field(
        "device-direct",
        description="Across node groups of different vendors: device-direct (GPUDirect RDMA) or cpu-forwarding.",
    )
    nics: int | None = Field(
        None, ge=1, description="NICs per node carrying cross-vendor traffic (default: all the node's NICs)."
    )
    stage_layers: str = Field(
        "",
        description="Layers per pipeline stage across node groups, e.g. 18,14 (default: balanced by speed).",
    )
    failures: str = Field(
        "", description="Failure model (workloads/failures/): llama3-h100; empty: no failures, goodput 1."
    )
    mtbf_gpu_hours: float | None = Field(
        None, gt=0, description="MTBF of one GPU's share of the cluster, hours (instead of a failure model)."
    )
    checkpoint: str = Field(
        "sync", description="Checkpoints: sync (training stops) or async (background write)."
    )
    checkpoint_interval_min: float | None = Field(
        None, gt=0, description="Minutes of training between checkpoints (default: Daly's optimum)."
    )
    storage_GBps: float = Field(
        2000.0, gt=0, description="Checkpoint storage write and read bandwidth, GB/s."
    )
    restart_min: float = Field(
        10.0, ge=0, description="Minutes from a failure to training again, less the reload."
    )
    spares: bool = Field(
        True, description="Hot spare nodes replace failed ones (else repairs stall the job)."
    )
    repair_hours: float = Field(4.0, ge=0, description="Hours to repair a node when no spare is at hand.")
    pue: float = Field(1.0, description="Facility PUE for energy (1.0: IT energy only).")
    carbon_g_per_kWh: float = Field(0.0, ge=0, description="Grid carbon intensity (g CO2 per kWh).")
    price_per_gpu_hour: float = Field(0.0, ge=0, description="Price per GPU-hour (USD).")
    train_tokens: float = Field(
        1e12, gt=0, description="Tokens to train on (for time to train, energy, cost)."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_pipeline_layout(cls, data: Any) -> Any:
        """A pipeline layout states vpp, the first and last stages' layers and the prediction modules
        (:func:`commodel.workloads.pipeline_layout.stage_split`); Megatron-Core refuses it beside its
        first and last stage flags or the embedding and loss counted as layers, and so does this."""
        text = data.get("pipeline_layout") if isinstance(data, dict) else None
        if not text:
            return data
        from commodel.workloads.catalog import models
        from commodel.workloads.pipeline_layout import stage_split

        config, pp = models().get(data.get("model")), data.get("pp") or 1
        if config is None or not isinstance(pp, numbers.Integral) or pp < 1:
            return data  # the model's and pp's own checks name them
        try:
            split = stage_split(text, pp, config.layers)
        except CommodelError as exc:
            raise ValueError(str(exc)) from None
        agree = {"vpp": (1, split.vpp), "mtp_layers": (0, split.mtp), "ends_as_layers": (False,)}
        clash = [name for name in ("first_stage_layers", "last_stage_layers") if data.get(name) is not None]
        clash += [name for name, fine in agree.items() if data.get(name) not in (None, *fine)]
        if clash:
            options = ", ".join("--" + name.replace("_", "-") for name in clash)
            raise ValueError(f"a pipeline layout states the pipeline split itself: drop {options}")
        return data | {"vpp": split.vpp, "mtp_layers": split.mtp,
                       "first_stage_layers": split.first or None, "last_stage_layers": split.last or None}  # fmt: skip

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _modules(cls, value: Any) -> Any:
        """``" layernorm , moe_act,"`` -> ``"layernorm,moe_act"``: each name once, as given; Megatron's
        ``core_attn`` is ``--recompute selective`` here."""
        if not isinstance(value, str):
            return value
        from commodel.workloads.layout import module_names

        names = module_names(value)
        if "core_attn" in names:
            raise ValueError("core_attn is --recompute selective here (the attention core), not a module")
        return ",".join(dict.fromkeys(names))


class ServingJob(Job):
    """A serving deployment as a user states it: model, system, GPUs and their parallel layout per
    replica, precision, the request shape, how many requests are in flight (or the latency SLO that
    decides it), the engine's limits, and the facility and price figures."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, coerce_numbers_to_str=True, defer_build=True
    )  # batch = 8 or "8"
    noun: ClassVar[str] = "serving"
    categories: ClassVar[dict[str, str]] = {
        "model": "model",
        "system": "system",
        "dtype": "serving precision",
        "kv_dtype": "KV-cache dtype",
    }

    model: str = Field(description="Model name (workloads/): llama3-70b, qwen3-30b-a3b, ...")
    system: str = Field(description="System (node) name from the hardware database.")
    gpus: int | None = Field(
        None, ge=1, description="Total GPUs, in replicas of tp x pp (default: one replica)."
    )
    tp: int = Field(1, ge=1, description="Tensor-parallel size of a replica.")
    pp: int = Field(1, ge=1, description="Pipeline-parallel size of a replica.")
    ep: int = Field(
        1, ge=1, description="Expert-parallel size (MoE; divides tp: experts over ep, tp / ep each)."
    )
    dtype: str = Field("bf16", description="Linear layers' weights and activations: bf16, fp8, fp4 (NVFP4).")
    kv_dtype: str = Field("auto", description="KV cache: bf16, fp8, or auto (fp8 with fp8/fp4 weights).")
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
    prefill_gpus: int = Field(
        0,
        ge=0,
        description="GPUs serving prompts only (prefill/decode disaggregation); 0: every replica does both.",
    )
    max_batch_size: int = Field(
        2048, ge=1, le=MAX_GLOBAL_BATCH, description="Engine limit on requests in flight."
    )
    max_num_tokens: int = Field(8192, ge=1, le=MAX_SEQ, description="Engine limit on tokens per iteration.")
    kv_fraction: float = Field(0.9, gt=0, le=1, description="Share of free HBM given to the KV cache.")
    pue: float = Field(1.0, description="Facility PUE for energy (1.0: IT energy only).")
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


def job_error(exc: ValidationError, schema: type[Job]) -> CommodelError:
    """A job's validation errors as one :class:`CommodelError` line per field, in the CLI's terms."""
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = f"not a {schema.noun} input{suggest(field, schema.model_fields)}"
        lines.append(f"--{field.replace('_', '-')}: {message}" if field else message)
    return CommodelError("; ".join(lines))


def make_job(schema: type[J], **values: Any) -> J:
    """A validated job of ``schema``; bad values are a :class:`CommodelError` naming the option."""
    try:
        return schema(**values)
    except ValidationError as exc:
        raise job_error(exc, schema) from None


def training_job(**values: Any) -> TrainingJob:
    """A validated :class:`TrainingJob`."""
    return make_job(TrainingJob, **values)


def serving_job(**values: Any) -> ServingJob:
    """A validated :class:`ServingJob`."""
    return make_job(ServingJob, **values)


def check_column(schema: type[Job], name: str, values: Iterable[Any], base: dict[str, Any]) -> None:
    """Check every distinct value a sweep gives input ``name`` with the same rules as the CLI
    (``base``: a valid job to vary one field of)."""
    for value in values:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        make_job(schema, **{**base, name: value})
