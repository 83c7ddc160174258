"""A model from a file: commodel's own TOML (:class:`~commodel.workloads.model.schema.Transformer`) or a
Hugging Face ``config.json`` of a supported architecture, translated field by field.

Hugging Face's names (``transformers`` configuration classes): ``num_hidden_layers``, ``hidden_size``,
``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``intermediate_size``, ``vocab_size``,
``tie_word_embeddings``; mixture-of-experts ``num_local_experts`` / ``num_experts`` /
``n_routed_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``, ``n_shared_experts``,
``n_group``, ``topk_group`` and the layers that keep a dense MLP (``first_k_dense_replace``,
``moe_layer_freq``, ``mlp_only_layers``, ``decoder_sparse_step``); DeepSeek's latent attention
``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``; banded
layers (``sliding_window`` with ``layer_types``, or Qwen's ``use_sliding_window`` from
``max_window_layers``). Every supported architecture runs a gated MLP: SwiGLU, or
gpt-oss's clamped quick-GeGLU (``activation``, clamped at ``swiglu_limit``: ``activation_clamp``).

A config states the context a model was built for, not the sequence a job trains at: the model's
default ``seq`` is the pre-extension context where the config gives one (``initial_context_length``,
``rope_scaling.original_max_position_embeddings``), else ``max_position_embeddings``, at most
:data:`DEFAULT_SEQ_CAP`; a job's ``--seq`` sets its own. The model's ``context``, the most tokens a
served request may hold, is ``max_position_embeddings``, or the context ``rope_scaling`` extends to
(``factor`` x ``original_max_position_embeddings``) where that is longer.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from commodel.errors import CommodelError, unknown
from commodel.io import read_text, regular_file
from commodel.records import read_toml, validate_record
from commodel.workloads.model.schema import MAX_TOKENS, Transformer

#: Architectures (``model_type``) whose ``config.json`` translates.
ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss")

#: The key holding the routed experts' count in each mixture-of-experts architecture's config.
EXPERT_COUNTS = {
    "qwen3_moe": "num_experts",
    "mixtral": "num_local_experts",
    "deepseek_v3": "n_routed_experts",
    "gpt_oss": "num_local_experts",
}

#: Suffixes a model file may have.
SUFFIXES = (".toml", ".json")

#: The longest default training sequence taken from a config (a job's ``--seq`` overrides it).
DEFAULT_SEQ_CAP = 8192

#: Largest model file read, bytes (a config is a few kB).
MAX_BYTES = 1 << 20


def is_model_file(name: str) -> bool:
    """Whether ``name`` names a model file: a ``.toml`` or ``.json`` path that exists."""
    return name.endswith(SUFFIXES) and Path(name).is_file()


def readable_model_file(name: str) -> bool:
    """Whether ``name`` is a path to a model file (a ``.toml`` or ``.json`` name), checked by reading it:
    a missing, oversized or malformed file is a :class:`CommodelError` saying which and why."""
    if not name.endswith(SUFFIXES):
        return False
    load_model_file(name)
    return True


def load_model_file(path: str | Path) -> Transformer:
    """The model in ``path`` (commodel TOML or Hugging Face ``config.json``); errors name the file and
    the field."""
    path = Path(path)
    stat = _checked(path)
    return _load(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


def _checked(path: Path) -> os.stat_result:
    """The file's stat, or a clear error: it must be a regular file of at most :data:`MAX_BYTES`."""
    if path.suffix not in SUFFIXES:
        raise CommodelError(f"{path}: a model file is a commodel .toml or a Hugging Face config .json")
    return regular_file(path, "model file", MAX_BYTES).stat()


@lru_cache(maxsize=64)
def _load(path: str, mtime_ns: int, size: int) -> Transformer:
    """Parse and validate one model file (cached while it is unchanged)."""
    if path.endswith(".toml"):
        return validate_record(read_toml(Path(path)), Transformer, path)
    try:
        config = json.loads(read_text(path, "model config", MAX_BYTES))
    except json.JSONDecodeError as exc:
        raise CommodelError(f"{path}: not a JSON config ({exc.__class__.__name__}: {exc})") from None
    except RecursionError:
        raise CommodelError(f"{path}: arrays or objects nested too deeply to be a config.json") from None
    if not isinstance(config, dict):
        raise CommodelError(f"{path}: a config.json holds one JSON object")
    return validate_record(from_hf_config(config, path), Transformer, path)


#: The config fields read as counts: each, where present (and not null), must be a whole number.
WHOLE_FIELDS = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "vocab_size", "max_position_embeddings", "initial_context_length", "head_dim", "num_experts",
    "num_local_experts", "n_routed_experts", "num_experts_per_tok", "experts_per_token", "moe_intermediate_size",
    "n_shared_experts", "first_k_dense_replace", "n_group", "topk_group", "q_lora_rank", "kv_lora_rank",
    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "sliding_window", "moe_layer_freq",
    "decoder_sparse_step", "max_window_layers",
)  # fmt: skip


#: Counts a config may set to 0 to mean none (every other count, where present, is at least 1: a zero
#: experts, heads or window is an error, never "no MoE" or "no window").
MAY_BE_ZERO = ("n_shared_experts", "first_k_dense_replace", "n_group", "topk_group", "max_window_layers")

#: Activation names ``hidden_act`` may hold (transformers' ``activations.ACT2CLS``): read to catch a
#: misspelling only, since a gated MLP's FLOPs and bytes are the same whichever it applies.
ACTIVATIONS = (
    "gelu", "gelu_10", "gelu_accurate", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh", "laplace",
    "leaky_relu", "linear", "mish", "prelu", "quick_gelu", "relu", "relu2", "relu6", "sigmoid", "silu", "swish",
    "tanh", "xielu",
)  # fmt: skip

#: Qwen's configuration classes' default ``max_window_layers`` (transformers' ``Qwen2Config``,
#: ``Qwen3Config``, ``Qwen3MoeConfig``): with ``use_sliding_window``, the layers from it on are banded.
QWEN_MAX_WINDOW_LAYERS = 28


def _check_types(config: dict[str, Any], where: str) -> None:
    """Counts that are whole numbers (positive but for :data:`MAY_BE_ZERO`), flags that are booleans,
    a clamp that is a finite number and tables that are tables, or an error naming the field."""
    for name in WHOLE_FIELDS:
        value = config.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise CommodelError(f"{where}: '{name}' must be a whole number, got {value!r}")
        if value is not None and value < (0 if name in MAY_BE_ZERO else 1):
            least = "0" if name in MAY_BE_ZERO else "1 (leave it out where the model has none)"
            raise CommodelError(f"{where}: '{name}' must be at least {least}, got {value}")
    for name in ("tie_word_embeddings", "use_sliding_window"):
        if config.get(name) is not None and not isinstance(config[name], bool):
            raise CommodelError(f"{where}: '{name}' must be true or false, got {config[name]!r}")
    limit = config.get("swiglu_limit")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int | float) or not 0 < limit < 1e6
    ):
        raise CommodelError(f"{where}: 'swiglu_limit' must be a positive finite number, got {limit!r}")
    act = config.get("hidden_act")
    if act is not None and act not in ACTIVATIONS:
        raise CommodelError(f"{where}: 'hidden_act': {unknown('activation', str(act), ACTIVATIONS)}")
    for name in ("rope_scaling",):
        if config.get(name) is not None and not isinstance(config[name], dict):
            raise CommodelError(f"{where}: '{name}' must be a JSON object, got {config[name]!r}")
    for name in ("layer_types", "mlp_only_layers"):
        if config.get(name) is not None and not isinstance(config[name], list):
            raise CommodelError(f"{where}: '{name}' must be a list, got {config[name]!r}")


def _field(config: dict[str, Any], where: str, *names: str) -> Any:
    """The first of ``names`` the config has, or an error naming them."""
    for name in names:
        if config.get(name) is not None:
            return config[name]
    raise CommodelError(f"{where}: missing '{names[0]}' (a {config.get('model_type')} config needs it)")


def _seq(config: dict[str, Any]) -> int:
    scaling = config.get("rope_scaling") or {}
    context = (
        config.get("initial_context_length")
        or scaling.get("original_max_position_embeddings")
        or config.get("max_position_embeddings")
        or DEFAULT_SEQ_CAP
    )
    return min(int(context), DEFAULT_SEQ_CAP)


def _context(config: dict[str, Any]) -> int | None:
    """The most tokens a served request may hold (the module's formula), ``None`` where none is stated."""
    scaling = config.get("rope_scaling") or {}
    factor, original = scaling.get("factor"), scaling.get("original_max_position_embeddings")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (factor, original))
    extended = factor * original if numbers and math.isfinite(factor * original) else 0
    longest = max(config.get("max_position_embeddings") or 0, extended)
    return min(int(longest), MAX_TOKENS) if longest >= 1 else None


def from_hf_config(config: dict[str, Any], where: str = "config.json") -> dict[str, Any]:
    """A Hugging Face ``config.json`` as a commodel model record (a dict to validate)."""
    kind = config.get("model_type")
    if kind not in ARCHITECTURES:
        raise CommodelError(
            f"{where}: model_type {kind!r} is not one commodel translates; supported: {', '.join(ARCHITECTURES)}"
        )
    _check_types(config, where)
    heads = int(_field(config, where, "num_attention_heads"))
    hidden = int(_field(config, where, "hidden_size"))
    record: dict[str, Any] = {
        "description": f"{config.get('_name_or_path') or kind} (from {Path(where).name})",
        "source": f"Hugging Face config.json: {where}",
        "layers": _field(config, where, "num_hidden_layers"),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": config.get("num_key_value_heads") or heads,
        "ffn_hidden": _field(config, where, "intermediate_size"),
        "gated_mlp": True,
        "vocab": _field(config, where, "vocab_size"),
        "seq": _seq(config),
        "context": _context(config),
        "tied_embeddings": bool(config.get("tie_word_embeddings", False)),
    }
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim * heads != hidden:
        record["head_dim"] = head_dim
    experts = next(
        (config[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if k in config), None
    )
    if experts is None and kind in EXPERT_COUNTS:  # a mixture-of-experts architecture without its experts
        _field(config, where, EXPERT_COUNTS[kind])
    if experts is not None:
        record["moe"] = {
            "experts": experts,
            "top_k": _field(config, where, "num_experts_per_tok", "experts_per_token"),
            "expert_ffn_hidden": config.get("moe_intermediate_size") or record["ffn_hidden"],
            "shared_experts": config.get("n_shared_experts") or 0,
            "dense_layers": _dense_layers(config, where, record["layers"]),
            "router_groups": config.get("n_group") or 0 if config.get("topk_group") else 0,
            "router_group_top_k": config.get("topk_group") or 0 if config.get("n_group") else 0,
        }
    if kind in ("qwen3", "qwen3_moe"):
        record["qk_norm"] = True  # q_norm and k_norm: an RMSNorm per head
    if kind == "gpt_oss":
        record["activation"] = "quick-gelu"
        if config.get("swiglu_limit"):
            record["activation_clamp"] = float(config["swiglu_limit"])
        record["expert_bias"] = True  # the experts' gate_up_proj_bias and down_proj_bias
        record["fp4_scope"] = "experts"  # its MXFP4 release quantizes the experts only (the model card)
    if kind == "deepseek_v3":
        record.pop("kv_heads")
        record["mla"] = {
            name: _field(config, where, name)
            for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        }
    scaling = config.get("rope_scaling") or {}
    if kind == "gpt_oss" and (scaling.get("rope_type") or scaling.get("type")) == "yarn":
        record["rotary_scaling"] = "yarn"
    banded = _banded_layers(config, where, kind, record["layers"])
    if banded:  # the window its banded layers need (a missing one is an error, not "no window")
        window = _field(config, where, "sliding_window")
        record |= {"sliding_window": window, "sliding_window_layers": banded}
    return record


def _dense_layers(config: dict[str, Any], where: str, layers: int) -> int:
    """Layers that run a dense MLP, not the routed experts, as Hugging Face's modeling code picks them:
    DeepSeek-V3's (``DeepseekV3DecoderLayer``) the first ``first_k_dense_replace`` and after them every
    layer ``i`` with ``i % moe_layer_freq != 0``; Qwen-MoE's (``Qwen3MoeDecoderLayer``) those listed in
    ``mlp_only_layers`` and every layer with ``(i + 1) % decoder_sparse_step != 0``; none in the other
    architectures. A listed layer the model does not have is an error naming it."""
    only = config.get("mlp_only_layers") or []
    outside = [i for i in only if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers]
    if outside:
        raise CommodelError(
            f"{where}: 'mlp_only_layers' names layer {outside[0]!r}; the model's layers are 0 to {layers - 1}"
        )
    first = config.get("first_k_dense_replace") or 0
    freq, step = config.get("moe_layer_freq") or 1, config.get("decoder_sparse_step") or 1
    routed = [
        i for i in range(layers) if i not in only and i >= first and i % freq == 0 and (i + 1) % step == 0
    ]
    return layers - len(routed)


def _banded_layers(config: dict[str, Any], where: str, kind: str, layers: int) -> int:
    """Layers of banded (sliding-window) attention: those ``layer_types`` marks ``sliding_attention``
    (one entry per layer); with none listed, Qwen's layers from ``max_window_layers`` on where
    ``use_sliding_window`` is set (its configuration classes build ``layer_types`` so), and every
    layer of a Mixtral whose ``sliding_window`` is set (``MixtralAttention`` bands them all)."""
    types = config.get("layer_types")
    if types is not None:
        if len(types) != layers:
            raise CommodelError(f"{where}: 'layer_types' lists {len(types)} layers; the model has {layers}")
        return sum(t == "sliding_attention" for t in types)
    if kind.startswith("qwen") and config.get("use_sliding_window"):
        first = config.get("max_window_layers")
        return max(layers - (QWEN_MAX_WINDOW_LAYERS if first is None else first), 0)
    return layers if kind == "mixtral" and config.get("sliding_window") else 0
