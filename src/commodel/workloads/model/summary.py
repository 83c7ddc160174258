"""A model in a few numbers: its sizes, parameters, active parameters and FLOPs per token."""

from __future__ import annotations

from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import attention_dims, model_flops_per_token, parameters

#: The fields that shape a model's kernels beyond its sizes, shown where a model sets them away from
#: their default (whether its MLP is gated, always).
ARCHITECTURE = ("gated_mlp", "activation", "activation_clamp", "expert_bias", "qk_norm", "rotary_scaling",
                "sliding_window", "sliding_window_layers", "tied_embeddings", "dropout", "fp4_scope")  # fmt: skip


def model_summary(name: str, config: Transformer, seq: int | None = None) -> dict[str, object]:
    """``config``'s sizes and costs: parameters and active parameters (billions, norms and embeddings
    included) and training FLOPs per token at ``seq`` (default: the model's own; the MFU convention
    of :func:`~commodel.workloads.model.transformer.model_flops_per_token`), the longest request it
    serves (``context``; ``None``: not stated), and the :data:`ARCHITECTURE` fields it sets."""
    p = parameters(config)
    seq = seq or config.seq
    summary: dict[str, object] = {
        "name": name,
        "description": config.description,
        "source": config.source,
        "aliases": list(config.aliases),
        "layers": config.layers,
        "hidden": config.hidden,
        "heads": config.heads,
        "kv_heads": config.kv_heads or config.heads,
        "head_dim": attention_dims(config)[0],
        "ffn_hidden": config.ffn_hidden,
        **{
            field: getattr(config, field)
            for field in ARCHITECTURE
            if getattr(config, field) != Transformer.model_fields[field].default
        },
        "vocab": config.vocab,
        "seq": config.seq,
        "context": config.context,
        "parameters_B": p["total"] / 1e9,
        "active_parameters_B": p["active"] / 1e9,
        "training_flops_per_token": float(model_flops_per_token(config, seq)),
        "flops_seq": seq,
    }
    if config.moe is not None:
        moe = config.moe
        summary |= {"experts": moe.experts, "top_k": moe.top_k, "expert_ffn_hidden": moe.expert_ffn_hidden,
                    "shared_experts": moe.shared_experts, "dense_layers": moe.dense_layers}  # fmt: skip
    if config.mla is not None:
        summary |= {"mla_kv_lora_rank": config.mla.kv_lora_rank, "mla_q_lora_rank": config.mla.q_lora_rank,
                    "mla_v_head_dim": config.mla.v_head_dim}  # fmt: skip
    return summary
