"""A sweep's plot and its report for a person."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from commodel.explore.spec import SweepSpec
from commodel.report.plots import save_figure
from commodel.report.tables import markdown_table

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


def _category(spec: SweepSpec, frame: pd.DataFrame) -> str | None:
    """The first text-valued variable (system, GPU, ...): what the design points are coloured by."""
    for name in spec.variables:
        if name in frame and not pd.api.types.is_numeric_dtype(frame[name]):
            return name
    return None


def _label(row: pd.Series, varying: list[str]) -> str:
    """A Pareto point's design, by the variables that differ along the front."""
    return " ".join(str(row[n]) if isinstance(row[n], str) else f"{n}={row[n]:g}" for n in varying)


def pareto_plot(cloud: pd.DataFrame, front: pd.DataFrame, spec: SweepSpec, path: Path) -> Path:
    """2 objectives: designs coloured by their first text variable, the front as a step line with each
    point labelled by its design; 3: the front coloured by the third objective; more: parallel
    coordinates of the front (objectives scaled to [0, 1], 0 = best)."""
    from matplotlib.figure import Figure  # no pyplot: leaves the caller's backend (a notebook's) alone

    names = list(spec.objectives)
    fig = Figure(figsize=(8.5, 5.5))
    ax = fig.subplots()
    if len(names) <= 3 and len(names) >= 2:
        x, y = names[0], names[1]
        category = _category(spec, cloud if len(cloud) else front)
        if len(cloud):
            groups = cloud.groupby(category) if category else [("designs (sample)", cloud)]
            for index, (value, group) in enumerate(groups):
                ax.scatter(group[x], group[y], s=6, alpha=0.35, color=f"C{index % 10}", label=str(value))
        if len(front):
            ordered = front.sort_values(x)
            if len(names) == 2:  # a 2-objective front is a staircase; a 3-objective one's shadow is not
                ax.step(ordered[x], ordered[y], where="post", color="black", lw=1, zorder=2)
            shade = {"c": ordered[names[2]], "cmap": "viridis"} if len(names) == 3 else {"color": "white"}
            points = ax.scatter(
                ordered[x], ordered[y], s=28, edgecolors="black", zorder=3, label="Pareto front", **shade
            )
            if len(names) == 3:
                fig.colorbar(points, ax=ax, label=axis_title(names[2], spec.objectives[names[2]]))
            _draw_bands(ax, spec, ordered, x, y)
            varying = [n for n in spec.variables if n in ordered and ordered[n].nunique() > 1]
            for index, (_, row) in enumerate(ordered.head(MAX_LABELS).iterrows()):
                offset = (4, 6 + 10 * (index % 3))
                ax.annotate(_label(row, varying), (row[x], row[y]), fontsize=6, rotation=30, xytext=offset,
                            textcoords="offset points")  # fmt: skip
        ax.set_xlabel(axis_title(x, spec.objectives[x]))
        ax.set_ylabel(axis_title(y, spec.objectives[y]))
        if _spans_decades(cloud, front, x):
            ax.set_xscale("log")
        if _spans_decades(cloud, front, y):
            ax.set_yscale("log")
        if len(cloud) or len(front):
            ax.legend(fontsize=7, title=category)
    elif len(front):
        values = front[names].to_numpy(dtype=float)
        sign = np.array([-1.0 if spec.objectives[n] == "max" else 1.0 for n in names])
        scaled = values * sign
        lo, hi = scaled.min(axis=0), scaled.max(axis=0)
        scaled = (scaled - lo) / np.where(hi > lo, hi - lo, 1.0)
        for row in scaled:
            ax.plot(range(len(names)), row, color="C0", alpha=0.3)
        ax.set_xticks(range(len(names)), [n.replace("_", " ") for n in names], rotation=20)
        ax.set_ylabel("scaled objective (0 = best)")
    else:
        ax.text(0.5, 0.5, "no feasible design", ha="center")
    ax.set_title(f"{spec.study.title or spec.study.name}: {len(front)} Pareto-optimal designs")
    ax.grid(True, alpha=0.3)
    return save_figure(fig, path, dpi=110)


#: Pareto points labelled with their design (the rest stay unlabelled to keep the plot readable).
MAX_LABELS = 12


def band_names(spec: SweepSpec, name: str) -> tuple[str, str]:
    """The band columns of objective ``name`` (``NAME_p10``, ``NAME_p90``)."""
    low, high = spec.uncertainty.band if spec.uncertainty else (10.0, 90.0)
    return f"{name}_p{low:g}", f"{name}_p{high:g}"


def _draw_bands(ax, spec: SweepSpec, front: pd.DataFrame, x: str, y: str) -> None:
    """Each front design's band as error bars; designs that drop off the robust front as crosses."""
    if not set(band_names(spec, x) + band_names(spec, y)) <= set(front):
        return
    (xl, xh), (yl, yh) = band_names(spec, x), band_names(spec, y)
    ax.errorbar(front[x], front[y], xerr=[front[x] - front[xl], front[xh] - front[x]],
                yerr=[front[y] - front[yl], front[yh] - front[y]], fmt="none", ecolor="0.4", lw=0.7,
                zorder=1, label=f"band ({xl.rpartition('_')[2]}-{xh.rpartition('_')[2]})")  # fmt: skip
    if "robust_front" in front:
        off = front[~front["robust_front"].astype(bool)]
        ax.scatter(off[x], off[y], marker="x", s=40, color="C3", zorder=4, label="drops off the robust front")


def uncertainty_table(spec: SweepSpec, front: pd.DataFrame) -> pd.DataFrame:
    """The front's designs with each objective, its band, what drives the band, and whether the design
    stays on the front under uncertainty."""
    out = front[[c for c in spec.variables if c in front]].copy()
    for name in spec.objectives:
        low, high = band_names(spec, name)
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


def uncertainty_text(spec: SweepSpec, summary: dict) -> str:
    """What the bands are and where they come from, in one paragraph."""
    u = spec.uncertainty
    if u is None:
        return ""
    low, high = u.band
    text = (
        f"Every valid design is priced on {u.samples} draws of the uncertain numbers of the hardware "
        f"records it uses (a Latin hypercube, the same draws for every design). An efficiency or latency "
        "fit to a published measurement varies as the held-out errors of the model class it feeds; an "
        "assumed one by a factor of 1.25 either way unless its record states a range; datasheet values "
        f"are exact. Bands are the p{low:g}-p{high:g} of each objective over the draws; 'driven by' names "
        "the number whose draw explains the largest share of the design's variance."
    )
    if u.robust is not None:
        text += (
            f" The robust front takes each objective at its pessimistic {u.robust}: "
            f"{summary['robust_pareto']} designs; {summary['off_robust_front']} of the {summary['pareto']} "
            "nominal front designs drop off it under uncertainty."
        )
    return text


def _spans_decades(cloud: pd.DataFrame, front: pd.DataFrame, column: str) -> bool:
    empty = pd.Series(dtype=float)
    values = pd.concat([cloud.get(column, empty), front.get(column, empty)]).to_numpy(dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    return len(values) > 1 and values.max() / values.min() > 30


def report_markdown(spec: SweepSpec, summary: dict, front: pd.DataFrame, rows: int = 25) -> str:
    """What was explored, how much of it is feasible, the best design per objective and the front."""
    s = spec.study
    lines = [
        f"# {s.title or s.name}",
        "",
        f"Evaluator `{s.evaluate}`, method `{s.method}`, {summary['points']:,} points in {summary['chunks']} chunk(s), "
        f"{summary['elapsed_s']:.1f} s. Specification hash `{summary['spec_hash']}`, commodel {summary['commodel_version']}.",
        "",
        "## Design space",
        "",
        *(f"- `{name}`: {var.model_dump()}" for name, var in spec.variables.items()),
        *(f"- `{name}` = {value!r} (fixed)" for name, value in spec.fixed.items()),
        *(
            f"- `{name}` = {rule if isinstance(rule, str) else rule.model_dump()} (derived)"
            for name, rule in spec.derived.items()
        ),
        "",
        "Objectives: " + ", ".join(f"{sense} `{name}`" for name, sense in spec.objectives.items()) + ".",
        "Constraints: " + (", ".join(f"`{c}`" for c in s.constraints) or "none") + ".",
        "",
        "## Outcome",
        "",
        f"{summary['valid']:,} valid designs (a layout that breaks no rule), {summary['feasible']:,} feasible "
        f"(meeting every constraint), {summary['pareto']:,} on the Pareto front. Hypervolume "
        f"{summary['hypervolume']:.4f} (objectives scaled between the best and worst feasible values, "
        "reference point 1.1).",
        "",
        "![Pareto front](pareto.png)",
        "",
    ]
    if len(front):
        shown = [c for c in (*spec.variables, *spec.objectives) if c in front.columns]
        lines += ["## Best design per objective", ""]
        best = pd.DataFrame(
            [{"objective": k, **{c: v.get(c) for c in shown}} for k, v in summary["best"].items()]
        )
        lines += [
            markdown_table(best, "{:.4g}"),
            "",
            f"## Pareto front (first {min(rows, len(front))} of {len(front)})",
            "",
        ]
        first = next(iter(spec.objectives))
        lines.append(markdown_table(front.sort_values(first).head(rows)[shown], "{:.4g}"))
        if spec.uncertainty is not None:
            table = uncertainty_table(spec, front.sort_values(first).head(rows))
            lines += [
                "",
                "## Uncertainty",
                "",
                uncertainty_text(spec, summary),
                "",
                markdown_table(table, "{:.4g}"),
            ]
    if "sensitivity" in summary:
        lines += ["", "## Sensitivity to the design choices", "", sensitivity_text(spec), "",
                  "![sensitivity](sensitivity.png)", "", markdown_table(pd.DataFrame(summary["sensitivity"]), "{:.3f}")]  # fmt: skip
    return "\n".join(lines) + "\n"


def sensitivity_text(spec: SweepSpec) -> str:
    """What the sensitivity indices say, for the method the spec chose."""
    if spec.sensitivity is not None and spec.sensitivity.method == "morris":
        return ("Morris elementary effects (SALib) of each objective per variable: mu* is the mean "
                "absolute change a step in the variable makes, sigma its spread (interactions).")  # fmt: skip
    return ("How much of each objective's variance over the design space each variable explains, alone "
            "(first order, S1) and with its interactions (total, ST), by Sobol's method (SALib) on the "
            "sweep's own evaluator.")  # fmt: skip


#: Front designs the breakdown plot shows (the fastest by the first objective first).
BREAKDOWN_DESIGNS = 8


def front_breakdown(spec: SweepSpec, front: pd.DataFrame, path: Path) -> Path | None:
    """Where each front design's step time goes (training sweeps: their ``*_s`` breakdown columns),
    as stacked bars labelled by the variables that differ along the front; nothing for other sweeps."""
    from commodel.report.plots import breakdown_plot
    from commodel.workloads.training import BREAKDOWN

    columns = [f"{name}_s" for name in BREAKDOWN]
    if not len(front) or not set(columns) <= set(front):
        return None
    ordered = front.sort_values(next(iter(spec.objectives))).head(BREAKDOWN_DESIGNS)
    varying = [n for n in spec.variables if n in ordered and ordered[n].nunique() > 1]
    bars = {
        f"{i + 1}: {_label(row, varying)}": {name: float(row[f"{name}_s"]) for name in BREAKDOWN}
        for i, (_, row) in enumerate(ordered.iterrows())
    }
    return breakdown_plot(bars, path, "where the front designs' step time goes")


def write_reports(
    spec: SweepSpec, out: Path, summary: dict, front: pd.DataFrame, cloud: pd.DataFrame
) -> None:
    """A sweep's reports for a person: ``pareto.png``, ``breakdown.png`` (training sweeps),
    ``report.md`` and the self-contained ``report.html``."""
    from commodel.io import write_text
    from commodel.report.html_report import report_html

    pareto_plot(cloud, front, spec, out / "pareto.png")
    front_breakdown(spec, front, out / "breakdown.png")
    if (out / "sensitivity.csv").is_file():
        from commodel.report.plots import sensitivity_plot

        sensitivity_plot(pd.read_csv(out / "sensitivity.csv"), out / "sensitivity.png")
    write_text(out / "report.md", report_markdown(spec, summary, front))
    write_text(out / "report.html", report_html(spec, summary, front, out / "pareto.png"))
