"""Transformer configurations as validated records (``workloads/*.toml``).

Group-query attention (``kv_heads``), gated MLPs (SwiGLU), multi-head latent attention (``[mla]``) and
mixture-of-experts layers (``[moe]``) are first-class.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from commodel.records import Strict

# Bounds a model file's numbers must keep: well above every published model, far below what would
# overflow a count or make a price meaningless (1e12 layers). Types are exact: ``"false"`` is not a
# boolean, ``true`` not a count, ``32.0`` not a layer count.
Layers = Annotated[int, Field(ge=1, le=4096)]
Width = Annotated[int, Field(ge=1, le=2**20)]  # hidden, FFN and head widths, latent ranks
Heads = Annotated[int, Field(ge=1, le=2**14)]
Experts = Annotated[int, Field(ge=1, le=2**14)]
MAX_TOKENS = 2**24
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]  # a vocabulary, a sequence, a window


class ModelPart(Strict):
    """A part of a model file: exact types, finite numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class MoE(ModelPart):
    """Mixture-of-experts FFN: ``experts`` routed experts, ``top_k`` per token, plus shared experts.

    The first ``dense_layers`` layers keep a dense FFN of ``ffn_hidden`` (DeepSeek-V3: 3). Group-limited
    routing (DeepSeek-V3: 8 groups, a token's experts from its best 4; Hugging Face's ``n_group`` and
    ``topk_group``, Megatron's ``--moe-router-num-groups`` and ``--moe-router-group-topk``): the
    experts form ``router_groups`` contiguous groups and a token's ``top_k`` come from
    ``router_group_top_k`` of them (0: no limit).
    """

    experts: Experts
    top_k: Experts
    expert_ffn_hidden: Width
    shared_experts: Annotated[int, Field(ge=0, le=256)] = 0
    dense_layers: Annotated[int, Field(ge=0, le=4096)] = 0
    router_groups: Annotated[int, Field(ge=0, le=2**14)] = 0
    router_group_top_k: Annotated[int, Field(ge=0, le=2**14)] = 0

    @model_validator(mode="after")
    def _top_k_fits(self) -> MoE:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        if (self.router_groups > 0) != (self.router_group_top_k > 0):
            raise ValueError("router_groups and router_group_top_k go together (both 0: no group limit)")
        if self.router_groups and (
            self.experts % self.router_groups or self.router_group_top_k > self.router_groups
        ):
            raise ValueError(
                f"router_groups ({self.router_groups}) must divide the experts ({self.experts}) and be at "
                f"least router_group_top_k ({self.router_group_top_k})"
            )
        return self


class MLA(ModelPart):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank query and key-value projections."""

    q_lora_rank: Width
    kv_lora_rank: Width
    qk_nope_head_dim: Width
    qk_rope_head_dim: Width
    v_head_dim: Width


class Transformer(ModelPart):
    """A decoder-only transformer: sizes, attention kind, FFN kind, vocabulary, training sequence.

    ``sliding_window``: keys a query attends to in the ``sliding_window_layers`` layers that use a
    banded (sliding-window) attention; the others attend to the whole causal prefix. ``dropout``:
    whether training applies dropout (GPT-3-era models did; current recipes do not), which stores a
    mask per activation. ``aliases``: other names of the same architecture (Llama 3.1 405B is Llama 3
    405B). ``activation``: the MLP's activation function where it is not the usual one (SiLU in a gated
    MLP, SwiGLU; GELU otherwise): gpt-oss's clamped quick-GeGLU is ``quick-gelu``. The kernels price
    every activation alike; sources' FLOP counts tell them apart. ``activation_clamp``: the bound a
    gated MLP's two halves are clamped to before the activation (gpt-oss: 7, Hugging Face's
    ``swiglu_limit``), which Megatron-Core runs as eager kernels beside its fused activation.
    ``expert_bias``: the routed experts' linear layers carry biases (gpt-oss), whose second one
    Megatron-Core adds per expert, weighted by the routing probability, in eager kernels.
    ``rotary_scaling``: the rotary embedding's context extension, ``yarn`` (gpt-oss), whose attention
    factor Transformer Engine's fused RoPE does not take, so Megatron-Core rotates queries and keys in
    eager operations. ``qk_norm``: each attention head's queries and keys pass an RMSNorm (Qwen3).
    ``fp4_scope``: the linear layers a 4-bit checkpoint of the model quantizes: ``linear``, every one
    in its layers (ModelOpt's NVFP4 checkpoints), or ``experts``, the routed experts only (gpt-oss's
    MXFP4 release: attention, dense and shared layers stay BF16). ``context``: the most tokens one
    request (prompt plus output) may hold when the model is served, its checkpoint's
    ``max_position_embeddings`` or the longer context its model card serves with a RoPE extension
    (YaRN); where a name and its aliases cover several checkpoints (Llama 3 and 3.1), the longest.
    ``None``: not stated, no limit. ``seq`` is the sequence it trains at by default: a training job
    may exceed ``context``, which is how a context is extended.
    """

    description: str
    source: str
    aliases: list[str] = []
    layers: Layers
    hidden: Width
    heads: Heads
    kv_heads: Heads | None = None
    head_dim: Width | None = None
    ffn_hidden: Width
    gated_mlp: bool
    activation: Literal["silu", "gelu", "quick-gelu"] | None = None
    activation_clamp: Annotated[float, Field(gt=0, le=1e6)] | None = None
    expert_bias: bool = False
    rotary_scaling: Literal["yarn"] | None = None
    qk_norm: bool = False
    fp4_scope: Literal["linear", "experts"] = "linear"
    vocab: Tokens
    seq: Tokens
    context: Tokens | None = None
    tied_embeddings: bool = False
    dropout: bool = False
    sliding_window: Tokens | None = None
    sliding_window_layers: Annotated[int, Field(ge=0, le=4096)] = 0
    mla: MLA | None = None
    moe: MoE | None = None

    @model_validator(mode="after")
    def _heads_consistent(self) -> Transformer:
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(
                f"hidden ({self.hidden}) is not a multiple of heads ({self.heads}); give head_dim"
            )
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) is not a multiple of kv_heads ({self.kv_heads})")
        if not 0 <= self.sliding_window_layers <= self.layers:
            raise ValueError(f"sliding_window_layers must be between 0 and layers ({self.layers})")
        if self.sliding_window_layers and self.sliding_window is None:
            raise ValueError("sliding_window_layers needs a sliding_window")
        if self.moe is not None and self.moe.dense_layers >= self.layers:
            raise ValueError(
                f"moe.dense_layers ({self.moe.dense_layers}) must leave at least one of the {self.layers} "
                "layers to the experts"
            )
        return self

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def windowed_layers(self) -> int:
        return self.sliding_window_layers if self.sliding_window else 0

    @property
    def moe_layers(self) -> int:
        return 0 if self.moe is None else self.layers - self.moe.dense_layers


class JobClass(Strict):
    """One class of jobs in a mix: its share of arrivals and the resources each job asks for."""

    name: str
    share: float
    demand: list[float]


class NodePowerSpec(Strict):
    """A node's draw in watts: ``busy`` (its resources fully used), ``idle`` (empty and powered) and
    ``off`` (suspended: the BMC and standby power), and where the figures come from."""

    busy: PositiveFloat
    idle: float
    off: float
    source: str

    @model_validator(mode="after")
    def _ordered(self) -> NodePowerSpec:
        if not 0 <= self.off <= self.idle <= self.busy:
            raise ValueError("node power needs 0 <= off <= idle <= busy watts")
        return self


class JobMixSpec(Strict):
    """A stated job mix and the server bundle it runs on (``workloads/job_mixes/*.toml``): mean job
    duration ``job_hours`` with coefficient of variation ``runtime_cv`` (lognormal runtimes),
    ``devices_per_job`` devices a disaggregated job composes, ``node_power`` the server's draw."""

    description: str
    source: str
    resources: list[str]
    server: list[float]
    devices_per_job: float = 1.0
    job_hours: float
    runtime_cv: float = 1.0
    classes: list[JobClass]
    node_power: NodePowerSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> JobMixSpec:
        width = len(self.resources)
        if len(self.server) != width or any(len(c.demand) != width for c in self.classes):
            raise ValueError(f"server and every demand need {width} entries, one per resource")
        total = sum(c.share for c in self.classes)
        if abs(total - 1) > 1e-9:
            raise ValueError(f"class shares must add up to 1, they add up to {total:g}")
        for c in self.classes:
            if any(d > s for d, s in zip(c.demand, self.server, strict=True)):
                raise ValueError(f"class '{c.name}' asks for more than one server has")
        return self


class FailureModel(Strict):
    """Interruptions of a large training run by root cause (``workloads/failures/*.toml``): counts
    over ``days`` on ``gpus`` GPUs, so each cause's rate per GPU-hour is ``count / (gpus x 24 days)``;
    ``software``: the causes a restart fixes without repairing a node."""

    description: str
    source: str
    gpus: PositiveInt
    days: PositiveFloat
    software: list[str] = []
    interruptions: dict[str, NonNegativeInt]

    @model_validator(mode="after")
    def _known_causes(self) -> FailureModel:
        unknown = set(self.software) - set(self.interruptions)
        if unknown:
            raise ValueError(f"software causes {sorted(unknown)} are not among the interruptions")
        return self

    @property
    def hardware_share(self) -> float:
        """Share of interruptions that take a node out until it is repaired or replaced."""
        total = sum(self.interruptions.values())
        return 1 - sum(self.interruptions[c] for c in self.software) / total if total else 0.0

    def rate_per_gpu_hour(self, causes: list[str] | None = None) -> float:
        """Interruptions per GPU-hour, over ``causes`` (default: all)."""
        chosen = self.interruptions if causes is None else {c: self.interruptions[c] for c in causes}
        return sum(chosen.values()) / (self.gpus * 24 * self.days)
