"""How accurate the models must be, as data (``data/gates.toml``): each gate a statistic of the
absolute error over the rows it selects, with its bound; the rows still waiting for a model; the
known gaps shown beside rows that miss. :func:`summary` and :func:`accuracy_gates` read a validation
table (:func:`commodel.validate.table.validation_table`)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from commodel.records import Strict, read_toml, validate_record
from commodel.resources import resource_dir
from commodel.validate.adapters import ASYMPTOTIC_SIZE


class Gate(Strict):
    """A gate: the rows whose kind is one of ``kinds`` and that meet every other condition given,
    and the bound on their ``median`` and/or ``max`` absolute error (%)."""

    name: str
    kinds: list[str] = Field(min_length=1)
    held_out: bool | None = None
    experts: bool | None = None
    min_size_bytes: int | None = None
    below_size_bytes: int | None = None
    median: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _bounded(self) -> Gate:
        if self.median is None and self.max is None:
            raise ValueError(f"gate '{self.name}' bounds nothing: give median and/or max")
        return self

    def rows(self, table: pd.DataFrame) -> pd.Series:
        """Which rows of a validation table the gate reads (rows with a model only)."""
        size = table.size_bytes.astype("Float64").fillna(ASYMPTOTIC_SIZE)
        chosen = table.kind.isin(self.kinds) & table.error_pct.notna()
        if self.held_out is not None:
            chosen &= (table.role == "validation") == self.held_out
        if self.experts is not None:
            chosen &= table.experts == self.experts
        if self.min_size_bytes is not None:
            chosen &= size >= self.min_size_bytes
        if self.below_size_bytes is not None:
            chosen &= size < self.below_size_bytes
        return chosen.astype(bool)

    @property
    def bounds(self) -> dict[str, float]:
        """Statistic -> bound (%)."""
        return {
            stat: bound for stat, bound in (("median", self.median), ("max", self.max)) if bound is not None
        }


class KnownGap(Strict):
    rows: list[str] = Field(min_length=1)
    reason: str


class Gates(Strict):
    """``data/gates.toml``."""

    gate: list[Gate]
    pending: dict[str, str] = {}
    known_gap: list[KnownGap] = []

    def known_gaps(self) -> dict[str, str]:
        """Row id -> its known gap."""
        return {row: gap.reason for gap in self.known_gap for row in gap.rows}

    def bound(self, name: str, statistic: str) -> float:
        """The bound of gate ``name`` on ``statistic``."""
        return next(g.bounds[statistic] for g in self.gate if g.name == name)


@cache
def gates() -> Gates:
    """``data/gates.toml``, validated (read once per process)."""
    path = resource_dir("data") / "gates.toml"
    return validate_record(read_toml(path), Gates, path)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max absolute error per kind, over all rows and over the rows no constant was fit to."""
    scored = table.dropna(subset=["error_pct"]).assign(abs_err=lambda t: t.error_pct.abs())
    out = []
    for kind, group in scored.groupby("kind", sort=False):
        held = group[group.role == "validation"]
        out.append(
            {
                "kind": kind,
                "rows": len(group),
                "median_abs_err_pct": group.abs_err.median(),
                "max_abs_err_pct": group.abs_err.max(),
                "held_out_rows": len(held),
                "held_out_median_pct": held.abs_err.median() if len(held) else np.nan,
                "held_out_max_pct": held.abs_err.max() if len(held) else np.nan,
            }
        )
    return pd.DataFrame(out)


def accuracy_gates(table: pd.DataFrame) -> pd.DataFrame:
    """Each gated statistic of absolute error over its rows, with its bound and whether it holds."""
    err = table.error_pct.abs()
    records = []
    for gate in gates().gate:
        rows = gate.rows(table).to_numpy(dtype=bool)
        for stat, bound in gate.bounds.items():
            value = float(err[rows].agg(stat))
            records.append(
                {
                    "gate": gate.name,
                    "rows": int(rows.sum()),
                    "statistic": stat,
                    "abs_err_pct": value,
                    "bound_pct": bound,
                    "holds": bool(value <= bound),
                }
            )
    return pd.DataFrame(records)
