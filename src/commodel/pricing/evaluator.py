"""Evaluators: each job kind's table pricing, by name, as the sweep, the studies and scripts call it.

An evaluator is a job declaration (its inputs, defaults and rules: :mod:`commodel.pricing.job`), the
output columns, and the function that prices a table of such jobs held as columns. Called on a
DataFrame it completes the table with the declaration's defaults, checks every input by the
declaration's rules (the CLI's bounds and messages), prices it, and returns the DataFrame with the
outputs and ``valid``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import import_module
from typing import TYPE_CHECKING

import numpy as np

from commodel.errors import pick
from commodel.pricing.job import Job
from commodel.pricing.job_checks import check_columns
from commodel.pricing.table import Columns, blank_outputs, columns_of, price_rows, put, take, with_outputs

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Evaluator:
    """A job kind's table pricing: ``job`` declares the inputs, ``price(columns)`` prices a table of
    checked jobs into ``outputs`` (and the inputs it ``resolved``, such as gpus from nodes), of which
    ``text`` are words, not numbers."""

    name: str
    description: str
    job: type[Job]
    outputs: tuple[str, ...]
    price: Callable[[Columns], Columns]
    resolved: tuple[str, ...] = ()
    text: tuple[str, ...] = ("problem",)
    flags: tuple[str, ...] = ("valid",)

    @classmethod
    def row_by_row(
        cls, name: str, description: str, job: type[Job], outputs: tuple[str, ...],
        price_row: Callable[[object], dict], text: tuple[str, ...] = (),
    ) -> Evaluator:  # fmt: skip
        """An evaluator that prices one job at a time (a simulation, a search): ``price_row(row)``
        gives a row's outputs (:func:`commodel.pricing.table.price_rows`)."""
        price = partial(price_rows, outputs=outputs, price=price_row, text=text)
        return cls(name, description, job, outputs, price, text=text)

    @property
    def inputs(self) -> dict[str, object]:
        """Every input with its default (``None``: required, or derived by the pricing)."""
        return self.job.inputs()

    @property
    def words(self) -> set[str]:
        """The columns that hold words, not numbers: text inputs (names, choices) and text outputs."""
        return {name for name, f in self.job.model_fields.items() if f.annotation is str} | set(self.text)

    @property
    def needs(self) -> tuple[str, ...]:
        """The inputs a table must give."""
        return self.job.required()

    def columns(self, frame: pd.DataFrame) -> tuple[Columns, np.ndarray]:
        """A DataFrame of jobs as checked columns, every input it lacks at its default, and per row the
        rule its settings break together ("" where none: :func:`check_columns`)."""
        columns = columns_of(frame, self.inputs, self.needs)
        return check_columns(self.job, columns) if len(frame) else (columns, np.full(0, "", dtype=object))

    def priced(self, columns: Columns, refused: np.ndarray) -> Columns:
        """:attr:`price` of the rows whose settings agree; a row whose settings break a rule together
        is invalid, that rule its problem, its outputs blank."""
        if not refused.any():
            return self.price(columns)
        rows, n = np.flatnonzero(refused == ""), len(refused)
        priced = self.price({name: take(columns, name, rows) for name in columns}) if len(rows) else {}
        out = blank_outputs(
            n, tuple(dict.fromkeys((*self.outputs, *self.resolved, *priced))), self.flags, self.text
        )
        for name in self.resolved:  # a resolved count stays blank; text stays as the row gave it
            if name not in priced or np.asarray(priced[name]).dtype.kind not in "fiu":
                out[name] = np.broadcast_to(np.asarray(columns[name]), n).astype(object)
        out["problem"] = refused.copy()
        put(out, rows, priced)
        return out

    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Price a DataFrame of jobs: ``frame`` with the output columns and ``valid``."""
        return with_outputs(frame, self.priced(*self.columns(frame)), self.resolved)

    def repeated(self, frame: pd.DataFrame, names: list[str]) -> Callable[[], np.ndarray]:
        """A function that prices ``frame`` again on each call (Monte Carlo draws, each on its own
        hardware database: :func:`commodel.hardware.loader.using`) and returns designs x ``names``, NaN
        where a design is invalid. The table is completed and checked once: its inputs do not change
        between draws."""
        columns, refused = self.columns(frame)

        def price() -> np.ndarray:
            out = self.priced(columns, refused)
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
    "moe_dispatch": "commodel.pricing.dispatch:moe_dispatch",
    "gemm": "commodel.pricing.gemm:gemm",
    "overlap": "commodel.pricing.overlap:overlap",
}


def evaluator(name: str) -> Evaluator:
    """The evaluator called ``name``."""
    module, _, factory = pick("evaluator", name, BUILTIN).partition(":")
    return getattr(import_module(module), factory)()


def objective_values(result: pd.DataFrame, names: list[str]) -> np.ndarray:
    """Designs x ``names`` of an evaluator's result, NaN where a design is invalid."""
    valid = result["valid"].to_numpy(dtype=bool)[:, None]
    return np.where(valid, result[names].to_numpy(dtype=float), np.nan)
