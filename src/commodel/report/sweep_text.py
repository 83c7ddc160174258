"""What a sweep's reports say in words, from its summary (:func:`commodel.explore.sweep.run_sweep`):
axis titles, design labels, the uncertainty bands' table and paragraph, and what the sensitivity
indices mean. Plain values in, text and tables out: the Markdown and HTML reports share them."""

from __future__ import annotations

import pandas as pd

#: Column-name suffixes and the units they stand for, for axis titles in words.
UNITS = {
    "days": "days", "MWh": "MWh", "usd": "USD", "s": "s", "us": "us", "min": "min", "pct": "%", "J": "J",
    "kW": "kW", "W": "W", "bytes": "bytes", "h": "h", "GB": "GB",
}  # fmt: skip


def axis_title(column: str, goal: str) -> str:
    """``time_to_train_days`` as ``time to train (days), lower is better``."""
    head, _, unit = column.rpartition("_")
    words, unit = (head, UNITS[unit]) if head and unit in UNITS else (column, "")
    better = "lower" if goal == "min" else "higher"
    return f"{words.replace('_', ' ')}{f' ({unit})' if unit else ''}, {better} is better"


def title(summary: dict) -> str:
    """The study's title, or its name."""
    return summary.get("title") or summary["study"]


def varying(summary: dict, designs: pd.DataFrame) -> list[str]:
    """The variables that differ among ``designs``: what tells them apart in a label."""
    return [n for n in summary["variables"] if n in designs and designs[n].nunique() > 1]


def design_label(row: pd.Series, names: list[str]) -> str:
    """A design by the variables ``names``: text values as they are, numbers as ``name=value``."""
    return " ".join(str(row[n]) if isinstance(row[n], str) else f"{n}={row[n]:g}" for n in names)


def band_names(summary: dict, name: str) -> tuple[str, str]:
    """The band columns of objective ``name`` (``NAME_p10``, ``NAME_p90``)."""
    u = summary.get("uncertainty")
    low, high = u["band"] if u else (10.0, 90.0)
    return f"{name}_p{low:g}", f"{name}_p{high:g}"


def uncertainty_table(summary: dict, front: pd.DataFrame) -> pd.DataFrame:
    """The front's designs with each objective, its band, what drives the band, and whether the design
    stays on the front under uncertainty."""
    out = front[[c for c in summary["variables"] if c in front]].copy()
    for name in summary["objectives"]:
        low, high = band_names(summary, name)
        if low not in front:
            continue
        out[name] = front[name]
        out[f"{name} band"] = [f"{a:.4g} - {b:.4g}" for a, b in zip(front[low], front[high], strict=True)]
        if f"{name}_driver" in front:
            out[f"{name} driven by"] = [f"{d} ({100 * r:.0f}%)" for d, r in
                                        zip(front[f"{name}_driver"], front[f"{name}_driver_share"], strict=True)]  # fmt: skip
    if "robust_front" in front:
        out["on robust front"] = front["robust_front"].map({True: "yes", False: "drops off"})
    return out


def uncertainty_text(summary: dict) -> str:
    """What the bands are and where they come from, in one paragraph ("" without bands)."""
    u = summary.get("uncertainty")
    if u is None:
        return ""
    low, high = u["band"]
    text = (
        f"Every valid design is priced on {u['samples']} draws of the uncertain numbers of the hardware "
        f"records it uses (a Latin hypercube, the same draws for every design). An efficiency or latency "
        "fit to a published measurement varies as the held-out errors of the model class it feeds; an "
        "assumed one by a factor of 1.25 either way unless its record states a range; datasheet values "
        f"are exact. Bands are the p{low:g}-p{high:g} of each objective over the draws; 'driven by' names "
        "the number whose draw explains the largest share of the design's variance."
    )
    if u["robust"] is not None:
        text += (
            f" The robust front takes each objective at its pessimistic {u['robust']}: "
            f"{summary['robust_pareto']} designs; {summary['off_robust_front']} of the {summary['pareto']} "
            "nominal front designs drop off it under uncertainty."
        )
    return text


def sensitivity_text(summary: dict) -> str:
    """What the sensitivity indices say, for the method the sweep used."""
    if summary.get("sensitivity_method") == "morris":
        return ("Morris elementary effects (SALib) of each objective per variable: mu* is the mean "
                "absolute change a step in the variable makes, sigma its spread (interactions).")  # fmt: skip
    return ("How much of each objective's variance over the design space each variable explains, alone "
            "(first order, S1) and with its interactions (total, ST), by Sobol's method (SALib) on the "
            "sweep's own evaluator.")  # fmt: skip
