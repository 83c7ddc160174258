"""Parallel layouts: tensor (tp), pipeline (pp, virtual stages vpp, or DualPipe), context (cp), data (dp)
and expert (ep) parallelism, as broadcastable arrays, with the rules that make a layout valid.

Ranks are ordered tp fastest, then cp, then dp, then pp (Megatron-LM's order), so tensor-parallel
groups fill a node first, data-parallel groups come next and pipeline stages span nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from commodel.errors import CommodelError, unknown
from commodel.workloads.schema import Transformer

RECOMPUTE = ("none", "selective", "full")
#: Recomputation codes a layout may carry: RECOMPUTE's, and 3 = auto (the least that fits).
RECOMPUTE_CODES = {**{name: code for code, name in enumerate(RECOMPUTE)}, "auto": 3}
#: Megatron-Core's submodule recomputations (``--recompute-modules``), each a bit of
#: ``Layout.recompute_modules``. Output-discarding checkpoints: the two norms, the MoE experts'
#: activation function, MLA's query and key-value up-projections (with their RoPE), whose outputs are
#: dropped after use. Whole-module checkpoints, which keep the module's input and run its forward
#: again: the dense MLP (``mlp``), the MoE layer with its dispatch and combine (``moe``), the shared
#: experts (``shared_experts``). Megatron's ``core_attn`` is ``--recompute selective``.
RECOMPUTE_MODULES = {
    "layernorm": 1,
    "moe_act": 2,
    "mla_up_proj": 4,
    "mlp": 8,
    "moe": 16,
    "shared_experts": 32,
}
#: Modules another one's checkpoint already covers: recomputing the MoE layer runs its activation again.
COVERED_BY = {"moe_act": "moe", "shared_experts": "moe"}
#: Pipeline schedules: 1F1B (interleaved with vpp > 1; Narayanan et al. 2021) and DualPipe
#: (DeepSeek-AI 2024, the DeepSeek-V3 report's section 3.2.1).
SCHEDULES = ("1f1b", "dualpipe")
#: Expert token dispatchers: Megatron-Core's all-to-all (NCCL; every routed copy travels to its
#: expert's GPU) and its flex dispatcher's DeepEP backend (one copy per remote scale-up domain over
#: the network, forwarded over NVLink once per GPU holding its experts;
#: :func:`commodel.workloads.moe_dispatch.high_throughput_s`).
DISPATCHERS = ("alltoall", "deepep")


@dataclass(frozen=True)
class Layout:
    """One or many training layouts (every field broadcasts against the others).

    ``expert_load``: tokens the busiest expert-parallel rank receives over the mean (1 = balanced);
    ``dualpipe``: the DualPipe schedule instead of 1F1B; ``first_layers``, ``last_layers``: layers of
    the first and last pipeline stage (0: an even split, see :func:`stage_split`); ``ends_as_layers``:
    the embedding and the loss each take a layer's place in the split; ``fp32_grads``: gradients held
    and reduced in FP32 (:func:`~commodel.workloads.memory.gradient_bytes`), else in BF16; ``mtp``:
    multi-token prediction modules (on the last stage); ``etp``: the experts' tensor-parallel size
    (0: tp, Megatron's default; :attr:`expert_tp`); ``fp8_dispatch``: expert inputs dispatched in FP8;
    ``fp8_param_gather``: under FP8, primary weights kept and gathered in FP8 (Megatron's
    ``--fp8-param-gather``); ``fp8_activation_input``: the MLP activation's input kept in FP8 for the
    backward pass (Megatron's ``--activation-func-fp8-input-store``);
    ``deepep``: experts dispatched by DeepEP (:data:`DISPATCHERS`) instead of NCCL's all-to-all;
    ``ep_sms``: SMs the expert all-to-all kernels hold (0: the collective library's CTAs, or
    DeepEP's :data:`~commodel.workloads.moe_dispatch.DEEPEP_SMS`);
    ``recompute_modules``: the sum of the :data:`RECOMPUTE_MODULES` bits recomputed in every layer
    that ``recompute`` does not recompute in full; ``offload_layers``: layers whose activations go to
    CPU memory (Megatron's ``--cpu-offloading-num-layers``; 0: none, or ``auto``'s choice);
    ``bf16_moments``: Adam's moments kept in BF16 (:func:`~commodel.workloads.memory.optimizer_bytes`);
    ``permute_fusion``: Transformer Engine's fused token permute (Megatron's ``--moe-permute-fusion``).
    """

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vpp: np.ndarray
    micro_batch: np.ndarray
    global_batch: np.ndarray
    seq: np.ndarray
    recompute: np.ndarray
    sequence_parallel: np.ndarray
    zero: np.ndarray
    expert_load: np.ndarray
    dualpipe: np.ndarray
    first_layers: np.ndarray
    last_layers: np.ndarray
    ends_as_layers: np.ndarray
    fp32_grads: np.ndarray
    mtp: np.ndarray
    etp: np.ndarray
    fp8_dispatch: np.ndarray
    fp8_param_gather: np.ndarray
    fp8_activation_input: np.ndarray
    ep_sms: np.ndarray
    recompute_modules: np.ndarray
    deepep: np.ndarray
    offload_layers: np.ndarray
    bf16_moments: np.ndarray
    permute_fusion: np.ndarray

    def select(self, mask: np.ndarray) -> Layout:
        """The layouts where ``mask`` is true (fields broadcast to the mask's shape first)."""
        shape = np.shape(mask)
        if np.all(mask) and all(np.shape(getattr(self, f.name)) == shape for f in fields(Layout)):
            return self  # every layout, each field already of the mask's shape
        return Layout(**{f.name: np.broadcast_to(getattr(self, f.name), shape)[mask] for f in fields(Layout)})

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape the fields broadcast to."""
        return np.broadcast_shapes(*(np.shape(getattr(self, f.name)) for f in fields(Layout)))

    def stacked(self, *recompute: ArrayLike) -> Layout:
        """These layouts once per ``recompute`` setting, one after another (flattened): one pricing
        of several recomputation choices of the same jobs."""
        shape = self.shape
        columns = {f.name: np.broadcast_to(getattr(self, f.name), shape).ravel() for f in fields(Layout)}
        columns["recompute"] = np.concatenate([np.broadcast_to(r, shape).ravel() for r in recompute])
        times = len(recompute)
        return Layout(**{k: v if k == "recompute" else np.tile(v, times) for k, v in columns.items()})

    @property
    def gpus(self) -> np.ndarray:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def microbatches(self) -> np.ndarray:
        """Micro-batches per pipeline per step: global batch / (dp x micro batch)."""
        return self.global_batch / (self.dp * self.micro_batch)

    @property
    def busiest_expert_rank(self) -> np.ndarray:
        """Tokens the busiest expert-parallel rank handles over the mean: ``expert_load``, at most
        ``ep`` (every token), and 1 without expert parallelism (one rank holds every expert)."""
        return np.where(self.ep > 1, np.minimum(self.expert_load, self.ep), 1.0)

    @cached_property
    def expert_tp(self) -> np.ndarray:
        """Tensor-parallel size of the experts: ``etp``, or tp where it is not set. Megatron-Core folds
        the expert grid (etp x ep x expert-dp) over the same tp x cp x dp ranks as attention, so ep
        may span tensor-parallel ranks (MoE parallel folding; etp 1 keeps every expert whole)."""
        return np.where(self.etp > 0, self.etp, self.tp)

    @cached_property
    def expert_dp(self) -> np.ndarray:
        """Data-parallel replicas of each expert: ``tp x cp x dp / (etp x ep)``."""
        return self.tp * self.cp * self.dp / (self.expert_tp * self.ep)

    @property
    def tokens(self) -> np.ndarray:
        """Tokens per micro-batch on one GPU: micro batch x seq / cp."""
        return self.micro_batch * self.seq / self.cp


def make_layout(
    tp: ArrayLike = 1,
    pp: ArrayLike = 1,
    dp: ArrayLike = 1,
    cp: ArrayLike = 1,
    ep: ArrayLike = 1,
    vpp: ArrayLike = 1,
    micro_batch: ArrayLike = 1,
    global_batch: ArrayLike = 1,
    seq: ArrayLike = 2048,
    recompute: ArrayLike = 0,
    sequence_parallel: ArrayLike = False,
    zero: ArrayLike = 0,
    expert_load: ArrayLike = 1,
    dualpipe: ArrayLike = False,
    first_layers: ArrayLike = 0,
    last_layers: ArrayLike = 0,
    ends_as_layers: ArrayLike = False,
    fp32_grads: ArrayLike = False,
    mtp: ArrayLike = 0,
    etp: ArrayLike = 0,
    fp8_dispatch: ArrayLike = False,
    fp8_param_gather: ArrayLike = True,
    fp8_activation_input: ArrayLike = False,
    ep_sms: ArrayLike = 0,
    recompute_modules: ArrayLike = 0,
    deepep: ArrayLike = False,
    offload_layers: ArrayLike = 0,
    bf16_moments: ArrayLike = False,
    permute_fusion: ArrayLike = False,
) -> Layout:
    """Build a :class:`Layout`; ``recompute`` may be a name (none, selective, full) or its code 0-2,
    ``recompute_modules`` names (``layernorm,mla_up_proj``) or their bits."""
    if isinstance(recompute, str):
        recompute = recompute_code(recompute)
    if isinstance(recompute_modules, str):
        recompute_modules = module_bits(recompute_modules)
    values = dict(locals())
    flags = (
        "sequence_parallel",
        "dualpipe",
        "ends_as_layers",
        "fp32_grads",
        "fp8_dispatch",
        "fp8_param_gather",
        "fp8_activation_input",
        "bf16_moments",
        "permute_fusion",
        "deepep",
    )
    arrays = {
        f.name: np.asarray(values[f.name], dtype=bool if f.name in flags else float) for f in fields(Layout)
    }
    return Layout(**arrays)


def stage_split(model: Transformer, x: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layers of the (first, middle, last) pipeline stages, as Megatron-Core splits them: the stated
    first and last stage layers (``--decoder-first-pipeline-num-layers``,
    ``--decoder-last-pipeline-num-layers``) and the rest evenly over the other stages; with the
    embedding and the loss counted as layers (``ends_as_layers``; ``--account-for-embedding-in-
    pipeline-split``, ``--account-for-loss-in-pipeline-split``), ``(L + 2) / pp`` places per stage, one
    of them the embedding's on the first stage and one the loss's on the last; otherwise as evenly as
    they go: ``ceil(L / pp)`` on the busiest stages, ``floor(L / pp)`` on the last (equal where pp
    divides the layers). One stage holds every layer."""
    layers = float(model.layers)
    even, last = np.ceil(layers / x.pp), np.floor(layers / x.pp)  # both L where pp is 1
    first_set, last_set = x.first_layers > 0, x.last_layers > 0
    stated = first_set | last_set  # never where pp is 1 (a layout rule)
    first = middle = even
    if np.any(stated):
        rest = np.maximum(x.pp - first_set - last_set, 1)
        middle = np.where(stated, (layers - x.first_layers - x.last_layers) / rest, even)
        first = np.where(first_set, x.first_layers, middle)
        last = np.where(last_set, x.last_layers, np.where(stated, middle, last))
    if np.any(x.ends_as_layers):  # never where first or last stage layers are stated (a layout rule)
        ends, places = x.ends_as_layers, (layers + 2) / x.pp
        first, middle, last = (
            np.where(ends, p, v) for p, v in ((places - 1, first), (places, middle), (places - 1, last))
        )
    return first, middle, last


def stage_layers_text(model: Transformer, x: Layout) -> np.ndarray:
    """Layers of every pipeline stage, first to last, comma-separated as ``--stage-layers`` takes them
    (:func:`stage_split`; "" without pipelining), one string per layout, written once per distinct
    split (each split a number in base ``layers + 3``: no count in it exceeds ``layers + 2``)."""
    pp, first, middle, last = np.broadcast_arrays(x.pp, *stage_split(model, x))
    base = model.layers + 3
    distinct, which = np.unique(((pp * base + first) * base + middle) * base + last, return_inverse=True)
    texts = []
    for key in distinct.astype(int).tolist():
        stages, first_layers, middle_layers, last_layers = (key // base**p % base for p in (3, 2, 1, 0))
        middles = [middle_layers] * (stages - 2)
        texts.append(",".join(map(str, [first_layers, *middles, last_layers])) if stages > 1 else "")
    return np.array(texts, dtype=object)[which.ravel()].reshape(pp.shape)


def recompute_code(name: str) -> int:
    if name not in RECOMPUTE_CODES:
        raise unknown("recompute mode", name, RECOMPUTE_CODES)
    return RECOMPUTE_CODES[name]


def module_names(text: str) -> list[str]:
    """The names in a comma-separated list of recompute modules (``" layernorm, moe_act"``)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def module_bits(names: str) -> int:
    """The :data:`RECOMPUTE_MODULES` bits of comma-separated module names ("" for none)."""
    bits = 0
    for name in module_names(names):
        if name not in RECOMPUTE_MODULES:
            raise unknown("recompute module", name, RECOMPUTE_MODULES)
        bits |= RECOMPUTE_MODULES[name]
    return bits


def has_module(bits: ArrayLike, module: str) -> np.ndarray:
    """Where ``bits`` (:attr:`Layout.recompute_modules`) recompute ``module`` on its own: they include
    it and not the module whose checkpoint covers it (:data:`COVERED_BY`)."""
    bits = np.asarray(bits, dtype=float)
    if not bits.any():  # the common case, without the arithmetic
        return np.zeros(bits.shape, dtype=bool)
    own = np.floor(bits / RECOMPUTE_MODULES[module]) % 2 == 1
    return own & ~has_module(bits, COVERED_BY[module]) if module in COVERED_BY else own


def _whole_below(values: np.ndarray, top: int) -> np.ndarray:
    """Whether each value is a whole number in ``[0, top)``."""
    return (values >= 0) & (values < top) & (values == np.floor(values))


def layout_problems(model: Transformer, layout: Layout, gpus: ArrayLike) -> list[tuple[np.ndarray, str]]:
    """Every rule as ``(violated mask, message)``, the masks broadcastable against the layout; a
    layout is valid where no mask is true."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _rules(layout, model, gpus)


def _rules(x: Layout, model: Transformer, gpus: ArrayLike) -> list[tuple[np.ndarray, str]]:
    heads, kv = model.heads, model.n_kv_heads
    experts = model.moe.experts if model.moe else 1
    rules = [
        (
            (x.tp < 1) | (x.pp < 1) | (x.cp < 1) | (x.ep < 1) | (x.vpp < 1),
            "parallel sizes must be >= 1",
        ),
        (x.dp < 1, "tp x pp x cp exceeds the number of GPUs"),
        ((x.micro_batch < 1) | (x.global_batch < 1) | (x.seq < 1), "batch sizes and seq must be >= 1"),
        ((x.dp >= 1) & (x.gpus != np.asarray(gpus)), "tp x pp x cp x dp must equal the number of GPUs"),
        (np.mod(heads, x.tp) != 0, f"attention heads ({heads}) must be divisible by tp"),
        (
            (np.mod(kv, x.tp) != 0) & (np.mod(x.tp, kv) != 0),
            f"kv heads ({kv}) and tp must divide one another",
        ),
        (
            x.pp * x.vpp > model.layers + 2 * x.ends_as_layers,
            f"pp x vpp must not exceed the {model.layers} layers (2 more with the embedding and loss as layers)",
        ),
        ((x.vpp > 1) & (x.pp < 2), "virtual stages (vpp > 1) need pipeline parallelism (pp > 1)"),
        (x.dualpipe & ((x.pp < 2) | (np.mod(x.pp, 2) != 0)), "DualPipe needs an even pp of at least 2"),
        (x.dualpipe & (x.vpp > 1), "DualPipe has no virtual stages (vpp 1): each GPU holds two stages"),
        (
            x.dualpipe & ((np.mod(x.microbatches, 2) != 0) | (x.microbatches < 2 * x.pp)),
            "DualPipe needs its micro-batches even, at least 2 x pp",
        ),
        (
            ((x.first_layers > 0) | (x.last_layers > 0)) & (x.pp < 2),
            "first and last stage layers need pipeline parallelism (pp > 1)",
        ),
        (
            _uneven_split_broken(x, model.layers),
            f"first and last stage layers must leave the other "
            f"stages an equal whole number (>= 1) of the {model.layers} layers",
        ),
        (
            x.ends_as_layers & ((x.pp < 2) | x.dualpipe | (x.first_layers > 0) | (x.last_layers > 0)),
            "the embedding and loss as layers need 1F1B pipeline parallelism (pp > 1) and no first or "
            "last stage layers",
        ),
        (
            x.ends_as_layers & (np.mod(model.layers + 2, x.pp * x.vpp) != 0),
            f"with the embedding and loss as layers, layers + 2 ({model.layers + 2}) must be divisible "
            "by pp x vpp",
        ),
        ((x.mtp < 0) | (np.mod(x.mtp, 1) != 0), "multi-token prediction modules must be a whole number >= 0"),
        (
            (x.dp >= 1) & (np.mod(x.global_batch, x.dp * x.micro_batch) != 0),
            "global batch must be a multiple of dp x micro batch",
        ),
        (np.mod(x.seq, x.cp) != 0, "seq must be divisible by cp"),
        ((model.moe is None) & (x.ep > 1), "expert parallelism (ep > 1) needs a mixture-of-experts model"),
        (np.mod(experts, x.ep) != 0, f"experts ({experts}) must be divisible by ep"),
        (
            np.mod(x.tp * x.cp * x.dp, x.expert_tp * x.ep) != 0,
            "expert tp x ep must divide tp x cp x dp (the expert grid folds over the same ranks; with "
            "etp 1, ep may span the tensor-parallel ranks)",
        ),
        (x.etp < 0, "expert tensor parallelism cannot be negative"),
        (x.ep_sms < 0, "SMs of the expert all-to-all cannot be negative"),
        ((model.moe is None) & x.deepep, "the deepep dispatcher needs a mixture-of-experts model"),
        (
            (model.moe is not None) & (x.expert_tp < x.tp) & ~x.sequence_parallel,
            "experts with less tensor parallelism than attention need sequence parallelism",
        ),
        (~_whole_below(x.zero, 4), "zero stage must be 0, 1, 2 or 3"),
        (~_whole_below(x.recompute, 4), "recompute must be none, selective, full or auto"),
        (~(x.expert_load >= 1), "expert load (busiest expert-parallel rank over the mean) must be >= 1"),
    ]
    if np.any(x.offload_layers):  # Megatron-Core's TransformerConfig (0.15) refuses the rest
        offloads = x.offload_layers > 0
        rules += [
            (offloads & (x.pp > 1), "CPU offloading needs one pipeline stage (pp 1), as in Megatron-Core"),
            (
                offloads & ((x.recompute != 0) | (x.recompute_modules != 0)),
                "CPU offloading runs without recomputation (recompute none, no recompute modules)",
            ),
            (
                (x.offload_layers >= model.layers) | (np.mod(x.offload_layers, 1) != 0),
                f"offloaded layers must be a whole number below the model's {model.layers}",
            ),
        ]
    if np.any(x.recompute_modules):  # checked only where some layout recomputes modules
        rules += [
            (
                ~_whole_below(x.recompute_modules, 2 * max(RECOMPUTE_MODULES.values())),
                f"recompute modules must be some of {', '.join(RECOMPUTE_MODULES)}",
            ),
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
        ]
    return rules


def _uneven_split_broken(x: Layout, layers: int) -> np.ndarray:
    """Where stated first and last stage layers do not leave the other stages an equal whole number
    of layers (at least one each), or leave none when there are no other stages."""
    first_set, last_set = x.first_layers > 0, x.last_layers > 0
    if not np.any(first_set | last_set):
        return np.zeros(np.shape(first_set), dtype=bool)
    others = x.pp - first_set - last_set
    rest = layers - x.first_layers - x.last_layers
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


def check(model: Transformer, layout: Layout, gpus: int) -> None:
    """Raise :class:`CommodelError` naming every rule a (single) layout breaks."""
    broken = [message for mask, message in layout_problems(model, layout, gpus) if np.any(mask)]
    if broken:
        x = layout
        desc = (
            f"tp={x.tp:g} pp={x.pp:g} cp={x.cp:g} dp={x.dp:g} ep={x.ep:g} on {gpus} GPUs"
            if np.ndim(x.tp) == 0
            else "layout"
        )
        raise CommodelError(f"invalid parallel layout ({desc}): " + "; ".join(broken))
