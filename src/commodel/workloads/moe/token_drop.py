"""Token-drop MoE: a capacity factor, the padding it computes and the tokens it drops.

Megatron's ``--moe-expert-capacity-factor X`` with ``--moe-pad-expert-input-to-capacity`` (the
token-drop recipes): each expert takes at most ``C = X mu`` tokens of a micro-batch, ``mu = tokens x
top_k / experts`` its mean, drops the rest (lowest router probability first) and pads to ``C``. Every
expert then computes and exchanges ``C`` tokens: the busiest expert-parallel rank handles ``X`` times
the mean (:attr:`~commodel.workloads.parallel.layout.Layout.busiest_expert_rank`), and the shapes are static,
so the all-to-all dispatcher needs no host sync and CUDA graphs may capture the experts
(:mod:`commodel.workloads.training.host_issue`). Without a capacity factor (0) the experts are
dropless. The hardware computes ``X`` times the dropless experts' FLOPs
(:func:`capacity_flops_per_token`); the model FLOPs (MFU) count ``top_k`` copies per token, as
Megatron counts them, whatever is padded or dropped.

**Dropped share**: an expert's tokens ``n ~ Normal(mu, s^2)`` with ``s = max(sqrt(mu), (L - 1) mu /
sqrt(2 ln E))``: the spread that puts the busiest of ``E`` experts at ``L`` (``--expert-load``) times
the mean (the expected maximum of ``E`` normals is about ``mu + s sqrt(2 ln E)``), and at least
multinomial sampling's. The share dropped is ``E[(n - C)+] / mu = (s / mu) (phi(z) - z (1 - Phi(z)))``,
``z = (C - mu) / s``.
"""

from __future__ import annotations

import math

import numpy as np

from commodel.workloads.model.recompute import has_module
from commodel.workloads.model.schema import Transformer
from commodel.workloads.model.transformer import layer_weights
from commodel.workloads.parallel.layout import Layout

#: The complementary error function over arrays (numpy has none; scipy stays out of a single estimate).
_erfc = np.frompyfunc(math.erfc, 1, 1)


def dropped_share(model: Transformer, x: Layout) -> np.ndarray:
    """Share of the routed token copies a capacity factor drops (module docstring); 0 dropless."""
    shape = np.shape(x.capacity_factor * x.tokens * x.expert_load)
    if model.moe is None or not np.any(x.capacity_factor):
        return np.zeros(shape)
    experts = model.moe.experts
    mu = x.tokens * model.moe.top_k / experts
    spread = np.maximum(np.sqrt(mu), (x.expert_load - 1) * mu / np.sqrt(2 * np.log(experts)))
    z = (np.asarray(x.capacity_factor, dtype=float) - 1) * mu / spread
    density = np.exp(-(z**2) / 2) / math.sqrt(2 * math.pi)
    above = 0.5 * np.asarray(_erfc(z / math.sqrt(2)), dtype=float)  # 1 - Phi(z), without scipy at import
    share = spread / mu * (density - z * above)
    return np.broadcast_to(np.where(x.capacity_factor > 0, share, 0.0), shape)


def capacity_flops_per_token(model: Transformer, x: Layout) -> np.ndarray:
    """Matrix FLOPs per token the routed experts compute beyond the ``top_k`` copies a dropless layer
    computes (negative where they compute fewer): with a capacity factor ``X`` every expert computes
    ``C = X mu`` tokens, padded or cut to it, so ``X`` times the dropless experts' work, ``(X - 1) x 2
    x`` their weights per token in each pass: forward and backward (``6``), and the forward again
    where full recomputation or the ``moe`` module runs it (``8``); 0 dropless."""
    shape = np.shape(x.capacity_factor * x.tokens)
    if model.moe is None or not np.any(x.capacity_factor):
        return np.zeros(shape)
    routed = model.moe_layers * layer_weights(model).moe_active
    again = (np.asarray(x.recompute) == 2) | has_module(x.recompute_modules, "moe")
    passes = np.where(again, 8.0, 6.0)
    extra = np.asarray(x.capacity_factor, dtype=float) - 1
    return np.broadcast_to(np.where(x.capacity_factor > 0, extra * passes * routed, 0.0), shape)


def dropless(x: Layout) -> np.ndarray:
    """Where the experts take every token (no capacity factor): dynamic shapes."""
    return np.asarray(x.capacity_factor, dtype=float) == 0


def capacity_problem(model: Transformer, x: Layout) -> tuple[np.ndarray, str]:
    """A capacity factor needs experts."""
    return np.asarray((model.moe is None) & (np.asarray(x.capacity_factor) > 0)), (
        "a capacity factor needs a mixture-of-experts model"
    )
