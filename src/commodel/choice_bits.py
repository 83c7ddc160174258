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
    """Where ``bits`` (a sum of distinct powers of two, whole numbers held as floats) hold ``bit``: a
    bitwise and on their integers (a float ``floor(b / bit) % 2`` takes 45x as long)."""
    with np.errstate(invalid="ignore"):  # NaN casts to the least int64, which holds no bit below 2^63
        return (np.asarray(bits, dtype=float).astype(np.int64) & bit) != 0
