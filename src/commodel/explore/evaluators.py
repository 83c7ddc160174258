"""Evaluators: vectorized functions from a table of design points to a table of results.

An evaluator declares its inputs (with defaults), which of them are required, and its output
columns, so a specification can be checked before anything runs. Evaluation groups rows by their categorical inputs
(model, system, ...) and calls the models once per group on whole columns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from commodel.errors import CommodelError, pick

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Evaluator:
    """A named evaluate function with its input defaults, required inputs and output columns
    (``required`` defaults to the inputs whose default is ``None``)."""

    name: str
    description: str
    inputs: dict[str, object]
    outputs: tuple[str, ...]
    function: Callable[[pd.DataFrame], pd.DataFrame]
    required: tuple[str, ...] | None = None

    @property
    def needs(self) -> tuple[str, ...]:
        """The inputs a table must give."""
        if self.required is not None:
            return self.required
        return tuple(name for name, default in self.inputs.items() if default is None)

    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Fill defaults, evaluate, and return ``frame`` with the output columns and ``valid``."""
        frame = frame.copy()
        for name, default in self.inputs.items():
            if name not in frame:
                if name in self.needs:
                    raise CommodelError(f"evaluator '{self.name}' needs input '{name}'")
                frame[name] = default
        return self.function(frame)


_REGISTRY: dict[str, Callable[[], Evaluator]] = {}


def register(factory: Callable[[], Evaluator]) -> Callable[[], Evaluator]:
    _REGISTRY[factory.__name__] = factory
    return factory


def evaluator(name: str) -> Evaluator:
    """The evaluator called ``name``."""
    _load_builtin()
    return pick("evaluator", name, _REGISTRY)()


def _load_builtin() -> None:
    from commodel.explore import (  # noqa: F401  (registration)
        collective_evaluator,
        disaggregation_evaluator,
        training_evaluator,
    )


def blank_outputs(
    rows: int, outputs: tuple[str, ...], flags: tuple[str, ...] = (), text: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Output columns before evaluation: NaN for numbers, False for ``flags`` (``valid`` always is
    one), "" for ``text``; rows the evaluator cannot price keep these values and ``valid = False``."""
    out = {name: np.full(rows, np.nan) for name in outputs}
    for name in ("valid", *flags):
        out[name] = np.zeros(rows, dtype=bool)
    for name in text:
        out[name] = np.full(rows, "", dtype=object)
    return out


def categorical_groups(columns: Mapping[str, Any], keys: list[str]):
    """``(key values, row positions)`` for each combination of categorical ``keys`` present in a table
    (a DataFrame, or a mapping of column name to array)."""
    arrays = [np.asarray(columns[k]) for k in keys]
    rows_total = len(arrays[0]) if arrays else len(columns)
    codes = [np.unique(a.astype(str), return_inverse=True)[1].ravel() for a in arrays]
    combined = (
        np.ravel_multi_index(codes, [max(c.max() + 1, 1) for c in codes])
        if keys
        else np.zeros(rows_total, int)
    )
    for code in np.unique(combined):
        rows = np.flatnonzero(combined == code)
        yield {k: a[rows[0]] for k, a in zip(keys, arrays, strict=True)}, rows
