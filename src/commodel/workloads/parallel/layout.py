"""Parallel layouts: tensor (tp), pipeline (pp, virtual stages vpp, or DualPipe), context (cp), data (dp)
and expert (ep) parallelism, as broadcastable arrays (the rules that make one valid:
:mod:`commodel.workloads.parallel.layout_rules`).

Ranks are ordered tp fastest, then cp, then dp, then pp (Megatron-LM's order), so tensor-parallel
groups fill a node first, data-parallel groups come next and pipeline stages span nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from commodel.choice_bits import bits_of, has_bit
from commodel.vectorize import on_unique
from commodel.workloads.model.schema import Transformer

RECOMPUTE = ("none", "selective", "full")
#: What a job may ask for: RECOMPUTE's modes, or auto (the least that fits), code 3 in a layout.
RECOMPUTE_CHOICES = (*RECOMPUTE, "auto")
AUTO = RECOMPUTE_CHOICES.index("auto")
#: Model states a job may keep in CPU memory (``--offload``), each a bit of ``Layout.offload``
#: (:mod:`commodel.workloads.training.state_offload`).
OFFLOAD_STATES = {"optimizer": 1, "weights": 2}
#: Pipeline schedules: 1F1B (interleaved with vpp > 1; Narayanan et al. 2021) and DualPipe
#: (DeepSeek-AI 2024, the DeepSeek-V3 report's section 3.2.1).
SCHEDULES = ("1f1b", "dualpipe")
#: Expert token dispatchers: Megatron-Core's all-to-all (NCCL; every routed copy travels to its
#: expert's GPU) and its flex dispatcher's DeepEP backend (one copy per remote scale-up domain over
#: the network, forwarded over NVLink once per GPU holding its experts;
#: :func:`commodel.workloads.moe.dispatch.high_throughput_s`).
DISPATCHERS = ("alltoall", "deepep", "hybridep")


@dataclass(frozen=True)
class Layout:
    """One or many training layouts (every field broadcasts against the others), as a training job
    states them (:class:`commodel.pricing.training_job.TrainingJob`: the same names, the job's help
    says what each means): numbers as floats, flags as booleans, a choice as its code.

    ``recompute``: code 0-2 of :data:`RECOMPUTE`, 3 = auto; ``schedule``: code of :data:`SCHEDULES`
    (:attr:`dualpipe`); ``dispatcher``: code of :data:`DISPATCHERS` (:attr:`flex`, :attr:`deepep`);
    ``recompute_modules``: the sum of the :data:`RECOMPUTE_MODULES` bits; ``offload``: of the
    :data:`OFFLOAD_STATES` bits; ``cuda_graphs``: of the :data:`~commodel.workloads.training.host_issue.GRAPH_SCOPES` bits. A size the job leaves unset
    is 0: ``first_stage_layers``, ``last_stage_layers`` (an even split, :func:`stage_split`), ``etp``
    (tp, Megatron's default; :attr:`expert_tp`) and ``ep_sms`` (the collective library's CTAs, or
    DeepEP's or HybridEP's, :func:`~commodel.workloads.moe.dispatch.flex_sms`).
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
    schedule: np.ndarray
    first_stage_layers: np.ndarray
    last_stage_layers: np.ndarray
    ends_as_layers: np.ndarray
    grad_reduce_in_fp32: np.ndarray
    mtp_layers: np.ndarray
    etp: np.ndarray
    fp8_dispatch: np.ndarray
    fp8_param_gather: np.ndarray
    fp8_activation_input: np.ndarray
    ep_sms: np.ndarray
    recompute_modules: np.ndarray
    dispatcher: np.ndarray
    offload_layers: np.ndarray
    offload: np.ndarray
    bf16_moments: np.ndarray
    permute_fusion: np.ndarray
    cuda_graphs: np.ndarray
    capacity_factor: np.ndarray
    recompute_layers: np.ndarray
    reshard_after_forward: np.ndarray
    elementwise: np.ndarray

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
    def dualpipe(self) -> np.ndarray:
        """Where the schedule is DualPipe."""
        return self.schedule == SCHEDULES.index("dualpipe")

    @property
    def flex(self) -> np.ndarray:
        """Where Megatron's flex dispatcher (DeepEP or HybridEP) dispatches the experts' tokens."""
        return self.dispatcher >= DISPATCHERS.index("deepep")

    @property
    def deepep(self) -> np.ndarray:
        """Where DeepEP (not HybridEP) dispatches them: NVLink to at most its 8 peers."""
        return self.dispatcher == DISPATCHERS.index("deepep")

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
        ``ep`` (every token), 1 without expert parallelism (one rank holds every expert); a capacity
        factor pads every expert to it (:mod:`commodel.workloads.moe.token_drop`)."""
        loaded = np.where(self.ep > 1, np.minimum(self.expert_load, self.ep), 1.0)
        return np.where(self.capacity_factor > 0, self.capacity_factor, loaded)

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


def on_distinct(fn: Callable[[Layout], Any], x: Layout, names: tuple[str, ...]) -> Any:
    """``fn(x)`` computed once per distinct combination of the fields ``names`` (:func:`on_unique`):
    those ``fn`` reads, the others NaN in the layouts it gets, so that a field it reads and
    ``names`` leaves out shows as NaN, not as another layout's value."""
    blank = dict.fromkeys((f.name for f in fields(Layout)), np.nan)

    def of(*values: np.ndarray) -> Any:
        return fn(Layout(**blank | dict(zip(names, values, strict=True))))

    return on_unique(of, *(getattr(x, name) for name in names))


def stage_split(model: Transformer, x: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layers of the (first, middle, last) pipeline stages, as Megatron-Core splits them: the stated
    first and last stage layers (``--decoder-first-pipeline-num-layers``,
    ``--decoder-last-pipeline-num-layers``) and the rest evenly over the other stages; with the
    embedding and the loss counted as layers (``ends_as_layers``; ``--account-for-embedding-in-
    pipeline-split``, ``--account-for-loss-in-pipeline-split``), ``(L + 2) / pp`` places per stage, one
    of them the embedding's on the first stage and one the loss's on the last; otherwise as evenly as
    they go in three counts: ``ceil(L / pp)`` on every stage but the last, which holds the rest
    (``floor(L / pp)`` on those and the rest last where that leaves the last none; equal where pp
    divides the layers), so the stages hold the model's ``L`` layers. One stage holds every layer."""
    layers = float(model.layers)
    even = np.ceil(layers / x.pp)
    last = layers - (x.pp - 1) * even  # L where pp is 1
    # Where ceil(L / pp) on every stage but the last leaves it none, floor(L / pp) and the rest last.
    even = np.where(last >= 1, even, np.floor(layers / x.pp))
    last = layers - (x.pp - 1) * even
    first_set, last_set = x.first_stage_layers > 0, x.last_stage_layers > 0
    stated = first_set | last_set  # never where pp is 1 (a layout rule)
    first = middle = even
    if np.any(stated):
        rest = np.maximum(x.pp - first_set - last_set, 1)
        middle = np.where(stated, (layers - x.first_stage_layers - x.last_stage_layers) / rest, even)
        first = np.where(first_set, x.first_stage_layers, middle)
        last = np.where(last_set, x.last_stage_layers, np.where(stated, middle, last))
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


def offload_bits(names: str) -> int:
    """The :data:`OFFLOAD_STATES` bits of comma-separated state names."""
    return bits_of(OFFLOAD_STATES, names)


def offloads(bits: ArrayLike, state: str) -> np.ndarray:
    """Where ``bits`` (:attr:`Layout.offload`) keep ``state`` in CPU memory."""
    return has_bit(bits, OFFLOAD_STATES[state])
