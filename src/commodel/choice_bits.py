"""A set of named choices as one number: comma-separated names (``"attn, mlp"``) and the sum of
their distinct powers of two, as a layout holds recompute modules, offloaded states and CUDA-graph
scopes (:mod:`commodel.workloads.parallel.layout`, :mod:`commodel.workloads.training.host_issue`)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def module_names(text: str) -> list[str]:
    """The names in a comma-separated list (``" layernorm, moe_act"``)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def bits_of(table: dict[str, int], names: str) -> int:
    """The ``table`` bits of comma-separated names ("" for none): a set of choices as one number."""
    return sum(table[name] for name in set(module_names(names)))


def has_bit(bits: ArrayLike, bit: int) -> np.ndarray:
    """Where ``bits`` (a sum of distinct powers of two) hold ``bit``."""
    return np.floor(np.asarray(bits, dtype=float) / bit) % 2 == 1
