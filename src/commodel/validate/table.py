"""Model vs published measurement for every row of ``data/measurements.csv``: each row read once by
its kind's adapter (:mod:`commodel.validate.adapters`) and priced by the same library functions the
CLI uses. Rows whose kind has no model yet are listed with the reason, not silently dropped. ``role``
says whether a named constant was fit to the row (``calibration``) or it is held out
(``validation``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from commodel.errors import CommodelError, suggest
from commodel.hardware import HardwareDB, default_db
from commodel.validate.adapters import ADAPTERS, Case
from commodel.validate.gates import accuracy_gates, gates, summary
from commodel.validate.measurements import load_measurements

#: The gate whose max a known gap is shown against.
GAP_GATE = ("end-to-end training", "max")


def _case(row: pd.Series) -> Case | str:
    """The row read by its kind's adapter, or why it has no model yet."""
    pending = gates().pending
    reason = pending.get(row.id) or pending.get(row.kind)
    if reason:
        return reason
    if row.kind not in ADAPTERS:
        return "no model"
    try:
        return ADAPTERS[row.kind](row)
    except CommodelError as exc:  # a model, a size or a setting commodel does not know
        return str(exc)


def _note(row: pd.Series, case: Case, value: float, measured: float) -> str:
    """What the row states that the model reads otherwise, and its known gap while the row misses the
    gate the gaps are shown against."""
    missed = abs(100 * (value - measured) / measured) > gates().bound(*GAP_GATE)
    gap = gates().known_gaps().get(row.id, "") if missed else ""
    return "; ".join(part for part in (case.note, gap) if part)


def _error_pct(metric: str, value: float, measured: float) -> float:
    """The model's signed error against the measurement, in percent; against a published floor
    (``..._min``, an acceptance threshold), only a shortfall below it counts."""
    error = 100 * (value - measured) / measured
    return min(error, 0.0) if metric.endswith("_min") else error


def _priced(series: pd.Series, db: HardwareDB) -> tuple[dict, Case | str]:
    """One measurement row with the model's value, the signed error in percent and whether it trains a
    mixture of experts, and how it was read (its :class:`Case`, or why it has no model yet)."""
    case = _case(series)
    value = np.nan
    if isinstance(case, Case):
        try:
            value = case.price(db)
        except CommodelError as exc:  # hardware the row names that the database lacks
            case = str(exc)
    measured = pd.to_numeric(series.value, errors="coerce")
    modelled = isinstance(case, Case)
    row = {
        "id": series.id,
        "kind": series.kind,
        "role": series.role,
        "size_bytes": series.size_bytes,
        "metric": series.metric,
        "unit": series.unit,
        "measured": measured,
        "model": value,
        "error_pct": _error_pct(series.metric, value, measured) if modelled else np.nan,
        "note": _note(series, case, value, measured) if modelled else f"not modelled yet: {case}",
        "experts": modelled and case.experts,
    }
    return row, case


def validation_table(db: HardwareDB | None = None) -> pd.DataFrame:
    """Every measurement row with the model's value, the signed error in percent, and whether it
    trains a mixture of experts (``experts``)."""
    db = db or default_db()
    return pd.DataFrame(
        [_priced(pd.Series(row._asdict()), db)[0] for row in load_measurements().itertuples(index=False)]
    )


def row_detail(row_id: str, db: HardwareDB | None = None) -> dict:
    """One row as :func:`validation_table` reports it, with what it was read from (``description``,
    ``system``, ``source``, the hardware it runs on), the job it runs (``job``: a training or serving
    job, None for the kinds priced without one) and, for those, how the value is derived
    (``formula``)."""
    table = load_measurements().set_index("id", drop=False)
    if row_id not in table.index:
        listed = "; commodel validate lists them"
        raise CommodelError(f"unknown measurement row '{row_id}'{suggest(row_id, list(table.index))}{listed}")
    db = db or default_db()
    series = table.loc[row_id]
    row, case = _priced(series, db)
    modelled = isinstance(case, Case)
    read = {"description": series.op, "system": series.system, "model_target": series.model_target,
            "source": series.source, "formula": case.formula(db) if modelled and case.formula else None}  # fmt: skip
    return row | read | {"job": case.job if modelled else None}


def standing(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Where the models stand: the per-kind errors and the accuracy gates of a validation table."""
    return summary(table), accuracy_gates(table)
