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
    #: The evaluator's core on a table held as columns (``evaluate_columns(columns, checked)``), where it
    #: has one: what :meth:`repeated` prices a table with, draw after draw.
    columns: Callable[..., dict[str, np.ndarray]] | None = None

    @property
    def needs(self) -> tuple[str, ...]:
        """The inputs a table must give."""
        if self.required is not None:
            return self.required
        return tuple(name for name, default in self.inputs.items() if default is None)

    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Fill defaults, evaluate, and return ``frame`` with the output columns and ``valid``."""
        return self.function(self._completed(frame))

    def _completed(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with every input it lacks at its default; a missing required input is an error."""
        import pandas as pd

        missing = {name: default for name, default in self.inputs.items() if name not in frame}
        for name in missing:
            if name in self.needs:
                raise CommodelError(f"evaluator '{self.name}' needs input '{name}'")
        defaults = pd.DataFrame(
            {name: [value] * len(frame) for name, value in missing.items()}, index=frame.index
        )
        return pd.concat([frame, defaults], axis=1)

    def repeated(self, frame: pd.DataFrame, names: list[str]) -> Callable[[], np.ndarray]:
        """A function that prices ``frame`` again on each call (Monte Carlo draws, each on its own
        hardware database: :func:`commodel.hardware.loader.using`) and returns designs x ``names``, NaN
        where a design is invalid. With a column-wise core the table is completed and held as columns
        once, and its inputs checked on the first call only (they do not change between draws); the
        numbers are the evaluator's own (:func:`objective_values` of :meth:`__call__`)."""
        if self.columns is None:
            return lambda: objective_values(self(frame), names)
        completed = self._completed(frame)
        columns = {name: completed[name].to_numpy(dtype=object) for name in completed.columns}
        calls = []

        def price() -> np.ndarray:
            out = self.columns(columns, checked=bool(calls))
            calls.append(1)
            values = np.column_stack([np.asarray(out.get(n, columns.get(n)), dtype=float) for n in names])
            return np.where(out["valid"].astype(bool)[:, None], values, np.nan)

        return price


#: The built-in evaluators: name -> "module:factory" (imported when first asked for).
BUILTIN = {
    "training": "commodel.pricing.training:training",
    "serving": "commodel.pricing.serving:serving",
    "collective": "commodel.pricing.collective:collective",
    "disaggregation": "commodel.pricing.disaggregation:disaggregation",
    "rollout": "commodel.pricing.rollout:rollout",
    "scheduling": "commodel.pricing.scheduling:scheduling",
    "stream": "commodel.pricing.stream:stream",
    "initiation": "commodel.pricing.initiation:initiation",
    "halo": "commodel.pricing.initiation:halo",
    "moe_dispatch": "commodel.pricing.initiation:moe_dispatch",
}


def evaluator(name: str) -> Evaluator:
    """The evaluator called ``name``."""
    from importlib import import_module

    module, _, factory = pick("evaluator", name, BUILTIN).partition(":")
    return getattr(import_module(module), factory)()


def objective_values(result: pd.DataFrame, names: list[str]) -> np.ndarray:
    """Designs x ``names`` of an evaluator's result, NaN where a design is invalid."""
    valid = result["valid"].to_numpy(dtype=bool)[:, None]
    return np.where(valid, result[names].to_numpy(dtype=float), np.nan)


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
    if rows_total == 1:  # one row, one group (a scalar estimate)
        yield {k: a[0] for k, a in zip(keys, arrays, strict=True)}, np.zeros(1, dtype=int)
        return
    codes = [np.unique(a.astype(str), return_inverse=True)[1].ravel() for a in arrays]
    combined = (
        np.ravel_multi_index(codes, [max(c.max() + 1, 1) for c in codes])
        if keys
        else np.zeros(rows_total, int)
    )
    # With return_inverse: the bare form imports numpy.ma (numpy 2.4), 13 ms of a first estimate.
    groups, group_of_row = np.unique(combined, return_inverse=True)
    for g in range(len(groups)):
        rows = np.flatnonzero(group_of_row == g)
        yield {k: a[rows[0]] for k, a in zip(keys, arrays, strict=True)}, rows


def numbers(values: np.ndarray) -> np.ndarray:
    """A column as floats; missing entries (None, NaN) become NaN."""
    return np.asarray(values, dtype=float)  # NumPy reads None as NaN


def check_inputs(schema: type, columns: Mapping[str, np.ndarray]) -> None:
    """Every distinct value of every input of a job ``schema`` (:mod:`commodel.pricing.jobs`), by the job's own
    rules: a sweep gets the CLI's bounds and messages."""
    from commodel.pricing.jobs import check_column

    base = {"model": columns["model"][0], "system": columns["system"][0]}
    for name in schema.model_fields:
        check_column(schema, name, set(np.asarray(columns[name]).tolist()), base)


def job_inputs(schema: type) -> tuple[dict[str, object], tuple[str, ...]]:
    """An evaluator's inputs from a job ``schema``: each field with its default (``None`` for required
    or derived ones), and the required fields."""
    fields = schema.model_fields
    inputs = {name: (None if f.is_required() else f.default) for name, f in fields.items()}
    return inputs, tuple(name for name, f in fields.items() if f.is_required())


def problem_messages(problems: list[tuple[np.ndarray, str]], rows: int) -> np.ndarray:
    """Per row, the messages of every (mask, message) rule it breaks, joined by "; " ("" if none)."""
    messages = np.full(rows, "", dtype=object)
    for mask, message in problems:
        if np.any(mask):
            broken = np.broadcast_to(mask, messages.shape)
            messages[broken] = [f"{m}; {message}" if m else message for m in messages[broken]]
    return messages


def evaluate_frame(
    frame: pd.DataFrame, evaluate_columns: Callable[..., dict[str, np.ndarray]], resolved: tuple[str, ...]
) -> pd.DataFrame:
    """A column-wise evaluator (``evaluate_columns``) on a DataFrame: its outputs added, and the
    inputs it ``resolved`` (derived counts such as gpus) replaced as nullable integers."""
    import pandas as pd

    out = evaluate_columns({name: frame[name].to_numpy(dtype=object) for name in frame.columns})
    counts = {name: pd.array(out.pop(name), dtype="Int64") for name in resolved}
    return frame.assign(**out, **counts)
