"""The rules that make a parallel layout (:class:`~commodel.workloads.parallel.layout.Layout`) valid: each a
mask of the layouts that break it and the message saying why, checked only where some layout uses
the rule's mechanism."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.workloads.model.recompute import RECOMPUTE_MODULES, has_module
from commodel.workloads.model.schema import Transformer
from commodel.workloads.parallel.layout import Layout


def heads_problem(model: Transformer, tp: ArrayLike) -> tuple[np.ndarray, str]:
    """Tensor parallelism splits the attention heads: ``tp`` must divide them (training and serving)."""
    return np.mod(model.heads, tp) != 0, f"attention heads ({model.heads}) must be divisible by tp"


def layout_problems(model: Transformer, layout: Layout, gpus: ArrayLike) -> list[tuple[np.ndarray, str]]:
    """Every rule as ``(violated mask, message)``, the masks broadcastable against the layout; a
    layout is valid where no mask is true."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _rules(layout, model, gpus)


def _rules(x: Layout, model: Transformer, gpus: ArrayLike) -> list[tuple[np.ndarray, str]]:
    """The layout's rules, each group checked only where some layout uses its mechanism."""
    kv = model.n_kv_heads
    rules = [
        (x.dp < 1, "tp x pp x cp exceeds the number of GPUs"),
        ((x.dp >= 1) & (x.gpus != np.asarray(gpus)), "tp x pp x cp x dp must equal the number of GPUs"),
        heads_problem(model, x.tp),
        (
            (np.mod(kv, x.tp) != 0) & (np.mod(x.tp, kv) != 0),
            f"kv heads ({kv}) and tp must divide one another",
        ),
        (
            x.pp * x.vpp > model.layers + 2 * x.ends_as_layers,
            f"pp x vpp must not exceed the {model.layers} layers (2 more with the embedding and loss as layers)",
        ),
        ((x.vpp > 1) & (x.pp < 2), "virtual stages (vpp > 1) need pipeline parallelism (pp > 1)"),
        (
            (x.vpp > 1) & (x.dp >= 1) & (x.microbatches < x.pp),
            "virtual stages (vpp > 1) need at least pp micro-batches per step (Megatron-Core's "
            "interleaved schedule runs them in groups of pp)",
        ),
        (
            (x.dp >= 1) & (np.mod(x.global_batch, x.dp * x.micro_batch) != 0),
            "global batch must be a multiple of dp x micro batch",
        ),
        *_sequence_rules(x),
    ]
    return rules + _schedule_rules(x, model) + _expert_rules(x, model) + _memory_rules(x, model)


def _sequence_rules(x: Layout) -> list[tuple[np.ndarray, str]]:
    """How the ranks split a sequence: context parallelism cuts it into ``2 cp`` chunks, each rank
    taking one from each end to balance causal attention (Megatron-Core's
    ``get_batch_on_this_cp_rank`` views it as ``2 cp`` equal chunks), and sequence parallelism
    splits each rank's ``seq / cp`` tokens over the tensor-parallel ranks (``_split_along_first_dim``
    asserts they divide)."""
    return [
        ((x.cp > 1) & (np.mod(x.seq, 2 * x.cp) != 0), "seq must be divisible by 2 x cp (context "
         "parallelism splits it into 2 cp equal chunks, two per rank)"),
        (x.sequence_parallel & (x.tp > 1) & (np.mod(x.seq, x.cp * x.tp) != 0),
         "with sequence parallelism seq / cp must be divisible by tp (each tensor-parallel rank holds "
         "an equal share of the sequence)"),
    ]  # fmt: skip


def _schedule_rules(x: Layout, model: Transformer) -> list[tuple[np.ndarray, str]]:
    """DualPipe's, and those of stated first and last stages and of the ends counted as layers."""
    rules = []
    if np.any(x.dualpipe):
        rules += [
            (x.dualpipe & ((x.pp < 2) | (np.mod(x.pp, 2) != 0)), "DualPipe needs an even pp of at least 2"),
            (x.dualpipe & (x.vpp > 1), "DualPipe has no virtual stages (vpp 1): each GPU holds two stages"),
            (
                x.dualpipe & ((np.mod(x.microbatches, 2) != 0) | (x.microbatches < 2 * x.pp)),
                "DualPipe needs its micro-batches even, at least 2 x pp",
            ),
        ]
    stated = (x.first_stage_layers > 0) | (x.last_stage_layers > 0)
    if np.any(stated) or np.any(x.ends_as_layers):
        rules += [
            (stated & (x.pp < 2), "first and last stage layers need pipeline parallelism (pp > 1)"),
            (
                _uneven_split_broken(x, model.layers),
                f"first and last stage layers must leave the other "
                f"stages an equal whole number (>= 1) of the {model.layers} layers",
            ),
            (
                x.ends_as_layers & ((x.pp < 2) | x.dualpipe | stated),
                "the embedding and loss as layers need 1F1B pipeline parallelism (pp > 1) and no first or "
                "last stage layers",
            ),
            (
                x.ends_as_layers & (np.mod(model.layers + 2, x.pp * x.vpp) != 0),
                f"with the embedding and loss as layers, layers + 2 ({model.layers + 2}) must be divisible "
                "by pp x vpp",
            ),
        ]
    return rules


#: Layout settings only a mixture-of-experts model uses: (field, its value when unset, the option).
EXPERT_SETTINGS = (
    ("fp8_dispatch", False, "--fp8-dispatch"),
    ("expert_load", 1.0, "--expert-load"),
    ("etp", 0.0, "--etp"),
    ("ep_sms", 0.0, "--ep-sms"),
    ("permute_fusion", False, "--permute-fusion"),
)


def _expert_rules(x: Layout, model: Transformer) -> list[tuple[np.ndarray, str]]:
    """Expert parallelism's: a MoE model, experts divided by ep, the expert grid folding over the ranks."""
    if model.moe is None:
        return [
            (x.ep > 1, "expert parallelism (ep > 1) needs a mixture-of-experts model"),
            (x.flex, "the deepep and hybridep dispatchers need a mixture-of-experts model"),
            *[
                (np.asarray(getattr(x, name)) != off, f"{flag} needs a mixture-of-experts model")
                for name, off, flag in EXPERT_SETTINGS
            ],
        ]
    return [
        (
            x.expert_load > x.ep,
            "--expert-load cannot exceed ep: the busiest of ep ranks receives at most all the tokens, ep "
            "times the mean",
        ),
        (np.mod(model.moe.experts, x.ep) != 0, f"experts ({model.moe.experts}) must be divisible by ep"),
        (
            np.mod(x.tp * x.cp * x.dp, x.expert_tp * x.ep) != 0,
            "expert tp x ep must divide tp x cp x dp (the expert grid folds over the same ranks; with "
            "etp 1, ep may span the tensor-parallel ranks)",
        ),
        (
            (x.expert_tp < x.tp) & ~x.sequence_parallel,
            "experts with less tensor parallelism than attention need sequence parallelism",
        ),
    ]


def _memory_rules(x: Layout, model: Transformer) -> list[tuple[np.ndarray, str]]:
    """CPU offloading's (as Megatron-Core allows it) and the recompute modules' (as the model has them)."""
    rules = []
    if np.any(x.offload_layers):  # Megatron-Core's TransformerConfig (0.15) refuses the rest
        offloads = x.offload_layers > 0
        rules += [
            (offloads & (x.pp > 1), "CPU offloading needs one pipeline stage (pp 1), as in Megatron-Core"),
            (
                offloads & ((x.recompute != 0) | (x.recompute_modules != 0)),
                "CPU offloading runs without recomputation (recompute none, no recompute modules)",
            ),
            (
                x.offload_layers >= model.layers,
                f"offloaded layers must be fewer than the model's {model.layers}",
            ),
        ]
    if np.any(x.recompute_modules):  # checked only where some layout recomputes modules
        rules += [
            (
                (model.moe is None) & has_module(x.recompute_modules, "moe_act"),
                "recompute module moe_act needs a mixture-of-experts model",
            ),
            (
                (model.mla is None) & has_module(x.recompute_modules, "mla_up_proj"),
                "recompute module mla_up_proj needs multi-head latent attention (MLA)",
            ),
            (
                (model.moe_layers == model.layers) & has_module(x.recompute_modules, "mlp"),
                "recompute module mlp needs dense MLP layers (a MoE layer's is moe)",
            ),
            (
                (model.moe is None) & has_module(x.recompute_modules, "moe"),
                "recompute module moe needs a mixture-of-experts model",
            ),
            (
                (model.moe is None or not model.moe.shared_experts)
                & (np.floor(x.recompute_modules / RECOMPUTE_MODULES["shared_experts"]) % 2 == 1),
                "recompute module shared_experts needs shared experts",
            ),
            (
                has_module(x.recompute_modules, "ops") & (model.moe is not None or model.mla is not None),
                "recompute module ops (torchtitan's per-op checkpointing) needs a dense model with "
                "Llama-style attention",
            ),
            (
                has_module(x.recompute_modules, "ops") & (x.recompute_modules != RECOMPUTE_MODULES["ops"]),
                "recompute module ops is torchtitan's whole policy: give it alone",
            ),
            (
                has_module(x.recompute_modules, "ops") & (x.recompute == 1),
                "recompute module ops saves attention's output: run it with --recompute none",
            ),
        ]
    return rules


def _uneven_split_broken(x: Layout, layers: int) -> np.ndarray:
    """Where stated first and last stage layers do not leave the other stages an equal whole number
    of layers (at least one each), or leave none when there are no other stages."""
    first_set, last_set = x.first_stage_layers > 0, x.last_stage_layers > 0
    if not np.any(first_set | last_set):
        return np.zeros(np.shape(first_set), dtype=bool)
    others = x.pp - first_set - last_set
    rest = layers - x.first_stage_layers - x.last_stage_layers
    per_stage = rest / np.maximum(others, 1)
    broken = np.where(others > 0, (per_stage < 1) | (np.mod(rest, np.maximum(others, 1)) != 0), rest != 0)
    return (first_set | last_set) & (x.pp >= 2) & broken


def valid(model: Transformer, layout: Layout, gpus: ArrayLike) -> np.ndarray:
    """Mask of valid layouts."""
    problems = layout_problems(model, layout, gpus)
    broken = np.zeros(np.broadcast_shapes(*(np.shape(mask) for mask, _ in problems)), dtype=bool)
    for mask, _ in problems:
        broken |= mask
    return ~broken
