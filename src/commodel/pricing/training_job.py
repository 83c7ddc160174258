"""The training job as a user states it (:class:`TrainingJob`): model, system, parallel layout,
batch, software settings, and the facility and price figures its energy and cost use. ``commodel
train``'s options, :func:`commodel.pricing.run.train` and the ``training`` evaluator's inputs are its
fields; cross-field rules of a layout are the model's (:func:`commodel.workloads.parallel.layout_rules.layout_problems`)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from commodel.choice_bits import module_names
from commodel.comm.cross_vendor import TRANSPORTS
from commodel.compute.precision import PRECISIONS
from commodel.hardware import default_db
from commodel.ops.goodput import CHECKPOINT_MODES
from commodel.overlap import STRATEGIES
from commodel.pricing.job import (
    FABRIC,
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_NODES,
    MAX_SEQ,
    MODEL,
    Choices,
    Job,
    Oversubscription,
    PodGpus,
    PowerLimit,
    Pue,
    TraysPerRack,
    listed_once,
    make_job,
)
from commodel.pricing.pipeline_fields import readable_layout, with_pipeline_layout
from commodel.workloads.layer.kernel_traffic import ELEMENTWISE
from commodel.workloads.model.catalog import failure_models
from commodel.workloads.model.recompute import RECOMPUTE_MODULES, module_bits
from commodel.workloads.model.transformer import ATTENTION_IMPLEMENTATIONS
from commodel.workloads.parallel.layout import (
    DISPATCHERS,
    OFFLOAD_STATES,
    RECOMPUTE,
    SCHEDULES,
    offload_bits,
)
from commodel.workloads.training.hetero import parse_node_groups
from commodel.workloads.training.host_issue import GRAPH_SCOPES, graph_bits
from commodel.workloads.training.step import EP_OVERLAP
from commodel.workloads.training.tensor_parallel import TP_OVERLAP


def _systems() -> list[str]:
    """The systems of the hardware database in use (an overlay may add some)."""
    return list(default_db().systems)


def _failure_models() -> list[str]:
    return ["", *failure_models()]


def _node_group_names(value: str) -> list[str]:
    """The systems a ``system`` input names: one, or node groups (``mi300x-8:2,dgx-h100:2``)."""
    return [name for name, _ in parse_node_groups(value)] if ":" in value else [value]


class TrainingJob(Job):
    """A training job as a user states it: model, system, parallel layout, batch, software settings,
    and the facility and price figures its energy and cost use."""

    noun: ClassVar[str] = "training"
    together: ClassVar[tuple[str, ...]] = (
        "model", "pp", "pipeline_layout", "vpp", "mtp_layers", "ends_as_layers", "first_stage_layers", "last_stage_layers",
        "failures", "mtbf_gpu_hours",
    )  # fmt: skip

    model: Annotated[str, MODEL] = Field(
        description="Model name (workloads/): llama3-70b, deepseek-v3, qwen3-30b-a3b, ..., or a model file (commodel .toml, Hugging Face config.json)"
    )
    system: Annotated[str, Choices("system", _systems, split=_node_group_names)] = Field(
        description="System (node) name from the hardware database, or node groups SYSTEM:NODES,... "
        "(pipeline stages across unlike nodes, e.g. mi300x-8:1,dgx-h100:1)."
    )
    gpus: int | None = Field(
        None, ge=1, le=MAX_GPUS, description="Total GPUs (default: nodes x GPUs per node)."
    )
    nodes: int | None = Field(
        None, ge=1, le=MAX_NODES, description="Nodes (default: just enough for the GPUs)."
    )
    fabric: Annotated[str, FABRIC] = Field(
        "", description="Scale-out fabric instead of the system's own (a link name)."
    )
    pod_gpus: PodGpus = None
    oversubscription: Oversubscription = None
    trays_per_rack: TraysPerRack = None
    power_limit: PowerLimit = None
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
    schedule: Annotated[str, Choices("pipeline schedule", SCHEDULES, group=False)] = Field(
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
    pipeline_layout: Annotated[str, AfterValidator(readable_layout)] = Field(
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
    capacity_factor: float | None = Field(
        None,
        gt=0,
        le=64,
        description="Token-drop MoE (Megatron's --moe-expert-capacity-factor with "
        "--moe-pad-expert-input-to-capacity): each expert takes at most this many times its mean tokens, "
        "drops the rest and pads to it (static shapes: no dispatcher sync, CUDA graphs may capture moe). "
        "Default: dropless.",
    )
    global_batch: int = Field(1024, ge=1, le=MAX_GLOBAL_BATCH, description="Sequences per step.")
    micro_batch: int = Field(1, ge=1, le=MAX_GLOBAL_BATCH, description="Sequences per micro-batch.")
    seq: int | None = Field(None, ge=1, le=MAX_SEQ, description="Sequence length (default: the model's).")
    recompute: Annotated[str, Choices("recompute mode", (*RECOMPUTE, "auto"), group=False)] = Field(
        "none",
        description="Activation recomputation: none, selective (the attention core: saves memory with "
        "unfused attention only), full, or auto (the cheapest way to fit: recompute, or offload to CPU "
        "memory where Megatron-Core can, with one pipeline stage and no other recomputation, the fewest "
        "layers that must).",
    )
    recompute_layers: int = Field(
        0,
        ge=0,
        le=1024,
        description="Block recomputation (Megatron's --recompute-method block --recompute-num-layers N, with "
        "--recompute full): the first N layers of each pipeline stage (of each virtual chunk) recomputed in "
        "full, the others not. 0: every layer, as --recompute says.",
    )
    offload_layers: int = Field(
        0,
        ge=0,
        le=1024,
        description="Layers whose activations go to CPU memory while the next layers run (Megatron's "
        "--cpu-offloading-num-layers; Megatron-Core: one pipeline stage, no recomputation, fewer than all "
        "layers). recompute auto chooses its own.",
    )
    offload: Annotated[str, Choices("offloaded state", OFFLOAD_STATES, module_names, False, offload_bits)] = (
        Field(
            "",
            description="Model states kept in CPU memory, comma-separated: optimizer (FP32 master weights and "
            "moments, streamed in and out for the optimizer step: ZeRO-Offload, Megatron's "
            "--optimizer-cpu-offload) and weights (two layers resident, each fetched before its forward and "
            "backward: Calculon's weight offload), over the system's host link; the output says what "
            "bandwidth would hide them.",
        )
    )
    recompute_modules: Annotated[
        str, Choices("recompute module", RECOMPUTE_MODULES, module_names, False, module_bits)
    ] = Field(
        "",
        description="Parts of every layer not recomputed in full that run their forward again in the backward "
        "(Megatron's --recompute-modules, comma-separated; its core_attn is --recompute selective): layernorm, "
        "moe_act (MoE), mla_up_proj (MLA) drop their outputs; mlp (dense layers), moe (the MoE layer with its "
        "all-to-alls), shared_experts keep only their input; ops is torchtitan's per-op selective "
        "checkpointing (with --recompute none; dense Llama-style models): every op of a block runs again "
        "but the matmuls it saves (all but wk, wo, w3) and attention. "
        "Under FP8, layernorm and moe_act free only a MoE router's BF16 input (the linear layers keep FP8 copies).",
    )
    sequence_parallel: bool = Field(False, description="Sequence parallelism (with tensor parallelism).")
    ep_sms: int | None = Field(
        None,
        ge=1,
        description="SMs the expert all-to-all kernels hold while they overlap compute (--ep-overlap): "
        "DeepEP's (Megatron's --moe-deepep-num-sms; DeepSeek-V3: 20); default: NCCL's CTAs, 20 with "
        "--dispatcher deepep, 16 with hybridep.",
    )
    dispatcher: Annotated[str, Choices("expert dispatcher", DISPATCHERS, group=False)] = Field(
        "alltoall",
        description="Expert token dispatcher: alltoall (Megatron's, over NCCL: every routed copy to its "
        "expert's GPU), deepep (Megatron's flex dispatcher with DeepEP: a token crosses RDMA once per remote "
        "group of 8 NVLink peers its experts are in, then NVLink; on 20 SMs unless --ep-sms) or hybridep "
        "(the flex dispatcher with HybridEP: NVLink across the whole NVLink domain, RDMA once per remote "
        "domain; on 16 SMs).",
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
    cuda_graphs: Annotated[
        str, Choices("CUDA-graph scope", GRAPH_SCOPES, module_names, False, graph_bits)
    ] = Field(
        "",
        description="Scopes captured in CUDA graphs, comma-separated (Megatron's --cuda-graph-scope): attn, mlp, "
        "moe_router, moe_preprocess, moe, full_iteration, or none. A captured scope costs one graph replay per "
        "pass instead of issuing each of its kernels from the host; dropless experts cannot be captured.",
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
    reshard_after_forward: bool = Field(
        True,
        description="ZeRO-3 (FSDP): free each layer's gathered parameters after its forward and gather them "
        "again for its backward (PyTorch FSDP2's reshard_after_forward; torchtitan's default without "
        "pipeline parallelism); off: one gather per micro-batch, every layer of the stage held whole from "
        "its forward to its backward. No effect below ZeRO-3.",
    )
    dtype: Annotated[str, Choices("training precision", PRECISIONS)] = Field(
        "bf16",
        description="Training precision: bf16, fp16, fp8 (TE current scaling), mxfp8, fp8-block (TE blockwise, DeepSeek-V3's).",
    )
    overlap: Annotated[str, Choices("overlap strategy", STRATEGIES, group=False)] = Field(
        "serial",
        description="Compute/communication overlap: serial, ideal, sm-partition, occupancy-shaped, in-network.",
    )
    tp_overlap: Annotated[str, Choices("tensor-parallel overlap", TP_OVERLAP)] = Field(
        "none",
        description="Tensor-parallel communication: none (between the GEMMs), async (Megatron-Core's and "
        "TE's default: the backward's column collectives beside their GEMMs), t3 (fused GEMM+RS), cais, "
        "userbuffers (Transformer Engine's comm+GEMM overlap; needs --sequence-parallel).",
    )
    ep_overlap: Annotated[str, Choices("expert-parallel overlap", EP_OVERLAP)] = Field(
        "none",
        description="Expert all-to-alls: none (on the critical path, Megatron's default), 1f1b (one "
        "micro-batch's dispatch and combine under another's compute, Megatron's "
        "--overlap-moe-expert-parallel-comm) or shared-experts (beside the layer's own shared experts, "
        "Megatron's --moe-shared-expert-overlap).",
    )
    attention: Annotated[str, Choices("attention implementation", ATTENTION_IMPLEMENTATIONS)] = Field(
        "flash", description="Attention kernel: flash or unfused."
    )
    elementwise: Annotated[str, Choices("elementwise kernels", ELEMENTWISE)] = Field(
        "fused",
        description="Memory-bound kernels: fused (Transformer Engine's and Megatron's, or torch.compile's) or eager "
        "(PyTorch eager mode, torchtitan without --compile: RMSNorm and SwiGLU as a kernel per operation).",
    )
    transport: Annotated[str, Choices("cross-vendor transport", TRANSPORTS, group=False)] = Field(
        "device-direct",
        description="Across node groups of different vendors: device-direct (GPUDirect RDMA), cpu-forwarding "
        "(Gloo across vendors only) or gloo (Gloo for all communication, gradient reductions included).",
    )
    nics: int | None = Field(
        None, ge=1, description="NICs per node carrying cross-vendor traffic (default: all the node's NICs)."
    )
    stage_layers: str = Field(
        "",
        description="Layers per pipeline stage across node groups, e.g. 18,14 (default: balanced by speed).",
    )
    failures: Annotated[str, Choices("failure model", _failure_models)] = Field(
        "",
        description="Failure model (workloads/failures/): llama3-h100, bloom-a100 or opt-a100, each a "
        "fleet's published interruptions; empty: no failures, goodput 1.",
    )
    mtbf_gpu_hours: float | None = Field(
        None, gt=0, description="MTBF of one GPU's share of the cluster, hours (instead of a failure model)."
    )
    checkpoint: Annotated[str, Choices("checkpoint mode", CHECKPOINT_MODES)] = Field(
        "sync", description="Checkpoints: sync (training stops) or async (background write)."
    )
    checkpoint_interval_min: float | None = Field(
        None, gt=0, description="Minutes of training between checkpoints (default: Daly's optimum)."
    )
    storage_GBps: float = Field(
        2000.0, gt=0, description="The file system's checkpoint write and read bandwidth, GB/s."
    )
    storage_share: float = Field(
        1.0, gt=0, le=1, description="Share of it a checkpoint burst gets (other tenants and the job's own reads "
        "take the rest).",
    )  # fmt: skip
    storage_node_GBps: float = Field(
        100.0, gt=0, description="Each node's link to storage, GB/s (assumed: two 400 Gb/s storage ports, as DGX "
        "H100 and B200 have).",
    )  # fmt: skip
    restart_min: float = Field(
        10.0, ge=0, description="Minutes from a failure to training again (less reload)."
    )
    spares: bool = Field(
        True, description="Hot spare nodes replace failed ones (else repairs stall the job)."
    )
    repair_hours: float = Field(4.0, ge=0, description="Hours to repair a node when no spare is at hand.")
    pue: Pue = Field(1.0, description="Facility PUE for energy (1.0: IT energy only).")
    carbon_g_per_kWh: float = Field(0.0, ge=0, description="Grid carbon intensity (g CO2 per kWh).")
    price_per_gpu_hour: float = Field(0.0, ge=0, description="Price per GPU-hour (USD).")
    train_tokens: float = Field(
        1e12,
        gt=0,
        description="Tokens to train on (time to train, energy, cost), in whole steps of the global batch.",
    )

    @model_validator(mode="after")
    def _one_failure_rate(self) -> TrainingJob:
        """A failure model states its own failure rates: a per-GPU MTBF beside it would be ignored."""
        if self.failures and self.mtbf_gpu_hours is not None:
            raise ValueError(
                "give --failures or --mtbf-gpu-hours, not both (the failure model states its rates)"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _from_pipeline_layout(cls, data: Any) -> Any:
        return with_pipeline_layout(data)

    @field_validator("cuda_graphs", "offload", mode="before")
    @classmethod
    def _each_name_once(cls, value: Any, info: ValidationInfo) -> Any:
        """Of CUDA graph scopes, ``none`` and ``full_iteration`` stand alone (Megatron asserts the latter)."""
        return listed_once(value, ("none", "full_iteration") if info.field_name == "cuda_graphs" else ())

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _modules(cls, value: Any) -> Any:
        """``" layernorm , moe_act"`` -> ``"layernorm,moe_act"``: each name once (as the other lists of
        names, :func:`~commodel.pricing.job.listed_once`); Megatron's ``core_attn`` is ``--recompute
        selective`` here."""
        if not isinstance(value, str):
            return value
        names = module_names(listed_once(value))
        if "core_attn" in names:
            raise ValueError("core_attn is --recompute selective here (the attention core), not a module")
        return ",".join(names)


def training_job(**values: Any) -> TrainingJob:
    """A validated :class:`TrainingJob`."""
    return make_job(TrainingJob, **values)
