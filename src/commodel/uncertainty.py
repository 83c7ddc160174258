"""Uncertainty bands from the models' own record: how far each model class lands from published
measurements (``commodel validate``), applied to a new prediction as an empirical distribution.

For each model class (collectives, training, serving, ...) the held-out validation rows (no constant
was fit to them) give ratios
``r = measured speed / model speed`` (a time row counts as ``model time / measured time``, so every
ratio reads "how much faster reality was"). A prediction of a speed ``v`` gets the band
``[v q_lo, v q_hi]`` with ``q`` the ratios' ``lo`` and ``hi`` percentiles; a prediction of a time
``t`` gets ``[t / q_hi, t / q_lo]``. The source of each band is named: the class and its row count.

The bands are checked on the rows themselves without letting a row inform its own band: each row's
band comes from the other rows of its class (leave one out), and :func:`coverage` reports how often
the measurement falls inside; an 80% band should hold about 80% of the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from commodel.errors import CommodelError

#: Metrics that are times (a larger value is slower); the rest are speeds.
TIME_METRICS = ("time",)

#: The default band: 10th to 90th percentile.
BAND = (10.0, 90.0)


@dataclass(frozen=True)
class Band:
    """Percentile ratios of reality over the model for one model class, and what they came from."""

    kind: str
    low: float
    high: float
    rows: int

    @property
    def source(self) -> str:
        return f"commodel validate: {self.rows} {self.kind} rows"

    def speed(self, value: float) -> tuple[float, float]:
        """The band of a predicted speed (throughput, bandwidth, FLOP/s)."""
        return value * self.low, value * self.high

    def time(self, value: float) -> tuple[float, float]:
        """The band of a predicted time."""
        return value / self.high, value / self.low


def check_percentiles(low: float, high: float) -> None:
    if not 0 < low < high < 100:
        raise CommodelError(f"a band needs percentiles with 0 < low < high < 100, got {low:g} and {high:g}")


def _ratios(table: object) -> dict[str, np.ndarray]:
    """Reality-over-model speed ratios per model class, from a validation table."""
    scored = table[table.error_pct.notna() & (table.role == "validation")]  # type: ignore[attr-defined]
    ratio = np.where(
        scored.metric.isin(TIME_METRICS), scored.model / scored.measured, scored.measured / scored.model
    )
    return {kind: ratio[(scored.kind == kind).to_numpy()] for kind in scored.kind.unique()}


@cache
def _validation_ratios() -> dict[str, np.ndarray]:
    from commodel.validate import validation_table

    return _ratios(validation_table())


def band(kind: str, percentiles: tuple[float, float] = BAND) -> Band:
    """The band of model class ``kind`` (collective, training, serving, ...)."""
    check_percentiles(*percentiles)
    ratios = _validation_ratios()
    if kind not in ratios or len(ratios[kind]) < 3:
        raise CommodelError(f"no uncertainty band for {kind} predictions: fewer than 3 validation rows")
    low, high = np.percentile(ratios[kind], percentiles)
    return Band(kind, float(low), float(high), len(ratios[kind]))


def coverage(table: object, percentiles: tuple[float, float] = BAND) -> dict[str, tuple[float, int]]:
    """Per model class: the share of validation rows whose measurement falls inside the band built
    from the other rows of the class (leave one out), and the row count."""
    check_percentiles(*percentiles)
    out = {}
    for kind, ratios in _ratios(table).items():
        if len(ratios) < 4:
            continue
        inside = 0
        for i in range(len(ratios)):
            others = np.delete(ratios, i)
            low, high = np.percentile(others, percentiles)
            inside += low <= ratios[i] <= high
        out[kind] = (inside / len(ratios), len(ratios))
    return out


def coverage_table(table: object, percentiles: tuple[float, float] = BAND) -> object:
    """:func:`coverage` as a table: model class, rows, band, share of rows inside."""
    import pandas as pd

    return pd.DataFrame(
        [{"kind": kind, "rows": rows, "band": f"p{percentiles[0]:g}-p{percentiles[1]:g}", "inside_pct": 100 * share}
         for kind, (share, rows) in coverage(table, percentiles).items()]
    )  # fmt: skip


def with_bands(
    result: dict,
    kind: str,
    speeds: tuple[str, ...],
    times: tuple[str, ...],
    percentiles: tuple[float, float] = BAND,
) -> dict:
    """``result`` with ``KEY_pLO`` and ``KEY_pHI`` for each speed and time key, and the band's source."""
    b = band(kind, percentiles)
    lo, hi = (f"p{p:g}" for p in percentiles)
    extra: dict = {"band_source": b.source}
    for key in speeds + times:
        low, high = (b.speed if key in speeds else b.time)(float(result[key]))
        extra[f"{key}_{lo}"], extra[f"{key}_{hi}"] = low, high
    return {**result, **extra}
