"""``commodel validate``'s report as tables: every row with its error, the errors per kind, the
accuracy gates, and how often the uncertainty bands hold a held-out measurement."""

from __future__ import annotations

import pandas as pd

from commodel.errors import CommodelError
from commodel.validate.bands import coverage_table, parameter_coverage
from commodel.validate.gates import accuracy_gates, summary
from commodel.validate.table import validation_table

#: The report's sections: key -> title.
SECTIONS = {
    "rows": "Per row",
    "summary": "Per kind (absolute error, %)",
    "gates": "Accuracy gates (absolute error, %)",
    "band_coverage": "Uncertainty bands: held-out rows inside their class's band, built without them (%)",
}


def validation_report(parameter_draws: int = 0) -> dict[str, pd.DataFrame]:
    """The report's tables (keys of :data:`SECTIONS`). With ``parameter_draws`` (at least 2), every
    row is also priced on that many draws of the hardware's uncertain numbers, and the band coverage
    says how often that band holds the measurement (:func:`parameter_coverage`)."""
    if parameter_draws < 0:
        raise CommodelError(f"--parameter-draws must be 0 or more, got {parameter_draws}")
    if parameter_draws == 1:
        raise CommodelError("--parameter-draws needs at least 2 draws to make a band")
    table = validation_table()
    bands = coverage_table(table)
    if parameter_draws:
        drawn = parameter_coverage(parameter_draws).rename(columns={"inside_pct": "inside_pct (parameters)"})
        bands = bands.merge(drawn[["kind", "inside_pct (parameters)"]], on="kind", how="left")
    return {"rows": table, "summary": summary(table), "gates": accuracy_gates(table), "band_coverage": bands}


def report_sections(report: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The report for a person: section title -> table, the rows without their unit and MoE flag."""
    shown = report["rows"].drop(columns=["unit", "experts"]).rename(columns={"error_pct": "error_%"})
    return {title: shown if key == "rows" else report[key] for key, title in SECTIONS.items()}
