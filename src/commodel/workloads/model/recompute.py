"""The submodules of a transformer layer that Megatron-Core can recompute on their own
(``--recompute-modules``), and torchtitan's per-op checkpointing policy beside them, as bits of one
number (:mod:`commodel.choice_bits`)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.choice_bits import bits_of, has_bit

#: Megatron-Core's submodule recomputations (``--recompute-modules``), each a bit of
#: ``Layout.recompute_modules``. Output-discarding checkpoints: the two norms, the MoE experts'
#: activation function, MLA's query and key-value up-projections (with their RoPE), whose outputs are
#: dropped after use. Whole-module checkpoints, which keep the module's input and run its forward
#: again: the dense MLP (``mlp``), the MoE layer with its dispatch and combine (``moe``), the shared
#: experts (``shared_experts``). Megatron's ``core_attn`` is ``--recompute selective``. ``ops`` is
#: torchtitan's per-op selective checkpointing (``activation_checkpoint.mode = "selective"``,
#: ``selective_ac_option = "op"``; ``parallelize_llama.py``, Dec 2024): each block's forward runs again
#: in the backward except the ops whose outputs its policy saves, the matmuls (all but every second one
#: of a block: ``wk``, ``wo`` and ``w3`` of ``wq, wk, wv, wo, w1, w3, w2`` run again), attention and the
#: reduce-scatters; its norms and activation run again. Llama-style dense blocks only.
RECOMPUTE_MODULES = {
    "layernorm": 1,
    "moe_act": 2,
    "mla_up_proj": 4,
    "mlp": 8,
    "moe": 16,
    "shared_experts": 32,
    "ops": 64,
}
#: The modules Megatron-Core has (``ops`` is torchtitan's).
MEGATRON_MODULES = tuple(name for name in RECOMPUTE_MODULES if name != "ops")
#: Modules another one's checkpoint already covers: recomputing the MoE layer runs its activation again.
COVERED_BY = {"moe_act": "moe", "shared_experts": "moe"}


def module_bits(names: str) -> int:
    """The :data:`RECOMPUTE_MODULES` bits of comma-separated module names."""
    return bits_of(RECOMPUTE_MODULES, names)


def has_module(bits: ArrayLike, module: str) -> np.ndarray:
    """Where ``bits`` (:attr:`~commodel.workloads.parallel.layout.Layout.recompute_modules`) recompute ``module`` on its own: they include
    it and not the module whose checkpoint covers it (:data:`COVERED_BY`)."""
    bits = np.asarray(bits, dtype=float)
    if not bits.any():  # the common case, without the arithmetic
        return np.zeros(bits.shape, dtype=bool)
    own = has_bit(bits, RECOMPUTE_MODULES[module])
    return own & ~has_module(bits, COVERED_BY[module]) if module in COVERED_BY else own
