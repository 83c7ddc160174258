"""A sweep's plots and its report for a person, from its summary and result tables (plain values:
:func:`commodel.explore.sweep.run_sweep` writes the summary, with the specification described)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from commodel.io import write_text
from commodel.report.frames import markdown_table
from commodel.report.html_report import report_html
from commodel.report.plots import breakdown_plot, save_figure, sensitivity_plot
from commodel.report.sweep_text import (
    axis_title,
    band_names,
    design_label,
    sensitivity_text,
    title,
    uncertainty_table,
    uncertainty_text,
    varying,
)
from commodel.workloads.training.step import BREAKDOWN

#: Pareto points labelled with their design (the rest stay unlabelled to keep the plot readable).
MAX_LABELS = 12
#: Front designs the breakdown plot shows (the fastest by the first objective first).
BREAKDOWN_DESIGNS = 8


def _category(summary: dict, frame: pd.DataFrame) -> str | None:
    """The first text-valued variable (system, GPU, ...): what the design points are coloured by."""
    for name in summary["variables"]:
        if name in frame and not pd.api.types.is_numeric_dtype(frame[name]):
            return name
    return None


def pareto_plot(cloud: pd.DataFrame, front: pd.DataFrame, summary: dict, path: Path) -> Path:
    """2 objectives: designs coloured by their first text variable, the front as a step line with each
    point labelled by its design; 3: the front coloured by the third objective; more: parallel
    coordinates of the front (objectives scaled to [0, 1], 0 = best)."""
    from matplotlib.figure import Figure  # slow: matplotlib (0.3 s); no pyplot: a notebook keeps its backend

    goals = summary["objectives"]
    names = list(goals)
    fig = Figure(figsize=(8.5, 5.5))
    ax = fig.subplots()
    if len(names) <= 3 and len(names) >= 2:
        x, y = names[0], names[1]
        category = _category(summary, cloud if len(cloud) else front)
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
                fig.colorbar(points, ax=ax, label=axis_title(names[2], goals[names[2]]))
            _draw_bands(ax, summary, ordered, x, y)
            differ = varying(summary, ordered)
            for index, (_, row) in enumerate(ordered.head(MAX_LABELS).iterrows()):
                offset = (4, 6 + 10 * (index % 3))
                ax.annotate(design_label(row, differ), (row[x], row[y]), fontsize=6, rotation=30, xytext=offset,
                            textcoords="offset points")  # fmt: skip
        ax.set_xlabel(axis_title(x, goals[x]))
        ax.set_ylabel(axis_title(y, goals[y]))
        if _spans_decades(cloud, front, x):
            ax.set_xscale("log")
        if _spans_decades(cloud, front, y):
            ax.set_yscale("log")
        if len(cloud) or len(front):
            ax.legend(fontsize=7, title=category)
    elif len(front):
        values = front[names].to_numpy(dtype=float)
        sign = np.array([-1.0 if goals[n] == "max" else 1.0 for n in names])
        scaled = values * sign
        lo, hi = scaled.min(axis=0), scaled.max(axis=0)
        scaled = (scaled - lo) / np.where(hi > lo, hi - lo, 1.0)
        for row in scaled:
            ax.plot(range(len(names)), row, color="C0", alpha=0.3)
        ax.set_xticks(range(len(names)), [n.replace("_", " ") for n in names], rotation=20)
        ax.set_ylabel("scaled objective (0 = best)")
    else:
        ax.text(0.5, 0.5, "no feasible design", ha="center")
    ax.set_title(f"{title(summary)}: {len(front)} Pareto-optimal designs")
    ax.grid(True, alpha=0.3)
    return save_figure(fig, path, dpi=110)


def _draw_bands(ax, summary: dict, front: pd.DataFrame, x: str, y: str) -> None:
    """Each front design's band as error bars; designs that drop off the robust front as crosses."""
    (xl, xh), (yl, yh) = band_names(summary, x), band_names(summary, y)
    if not {xl, xh, yl, yh} <= set(front):
        return
    ax.errorbar(front[x], front[y], xerr=[front[x] - front[xl], front[xh] - front[x]],
                yerr=[front[y] - front[yl], front[yh] - front[y]], fmt="none", ecolor="0.4", lw=0.7,
                zorder=1, label=f"band ({xl.rpartition('_')[2]}-{xh.rpartition('_')[2]})")  # fmt: skip
    if "robust_front" in front:
        off = front[~front["robust_front"].astype(bool)]
        ax.scatter(off[x], off[y], marker="x", s=40, color="C3", zorder=4, label="drops off the robust front")


def _spans_decades(cloud: pd.DataFrame, front: pd.DataFrame, column: str) -> bool:
    empty = pd.Series(dtype=float)
    values = pd.concat([cloud.get(column, empty), front.get(column, empty)]).to_numpy(dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    return len(values) > 1 and values.max() / values.min() > 30


def report_markdown(summary: dict, front: pd.DataFrame, rows: int = 25) -> str:
    """What was explored, how much of it is feasible, the best design per objective and the front."""
    lines = [
        f"# {title(summary)}",
        "",
        f"Evaluator `{summary['evaluator']}`, method `{summary['method']}`, {summary['points']:,} points in "
        f"{summary['chunks']} chunk(s), {summary['elapsed_s']:.1f} s. Specification hash `{summary['spec_hash']}`, "
        f"commodel {summary['commodel_version']}.",
        "",
        "## Design space",
        "",
        *(f"- `{name}`: {var}" for name, var in summary["variables"].items()),
        *(f"- `{name}` = {value!r} (fixed)" for name, value in summary["fixed"].items()),
        *(f"- `{name}` = {rule} (derived)" for name, rule in summary["derived"].items()),
        "",
        "Objectives: "
        + ", ".join(f"{sense} `{name}`" for name, sense in summary["objectives"].items())
        + ".",
        "Constraints: " + (", ".join(f"`{c}`" for c in summary["constraints"]) or "none") + ".",
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
        shown = [c for c in (*summary["variables"], *summary["objectives"]) if c in front.columns]
        lines += ["## Best design per objective", ""]
        best = pd.DataFrame(
            [{"objective": k, **{c: v.get(c) for c in shown}} for k, v in summary["best"].items()]
        )
        first = next(iter(summary["objectives"]))
        lines += [
            markdown_table(best, "{:.4g}"),
            "",
            f"## Pareto front (first {min(rows, len(front))} of {len(front)})",
            "",
            markdown_table(front.sort_values(first).head(rows)[shown], "{:.4g}"),
        ]
        if summary.get("uncertainty") is not None:
            table = uncertainty_table(summary, front.sort_values(first).head(rows))
            lines += [
                "",
                "## Uncertainty",
                "",
                uncertainty_text(summary),
                "",
                markdown_table(table, "{:.4g}"),
            ]
    if "sensitivity" in summary:
        lines += ["", "## Sensitivity to the design choices", "", sensitivity_text(summary), "",
                  "![sensitivity](sensitivity.png)", "", markdown_table(pd.DataFrame(summary["sensitivity"]), "{:.3f}"),
                  *(["", *(f"- {note}" for note in notes)] if (notes := summary.get("sensitivity_notes")) else [])]  # fmt: skip
    return "\n".join(lines) + "\n"


def front_breakdown(summary: dict, front: pd.DataFrame, path: Path) -> Path | None:
    """Where each front design's step time goes (training sweeps: their ``*_s`` breakdown columns),
    as stacked bars labelled by the variables that differ along the front; nothing for other sweeps."""
    columns = [f"{name}_s" for name in BREAKDOWN]
    if not len(front) or not set(columns) <= set(front):
        return None
    ordered = front.sort_values(next(iter(summary["objectives"]))).head(BREAKDOWN_DESIGNS)
    differ = varying(summary, ordered)
    bars = {
        f"{i + 1}: {design_label(row, differ)}": {name: float(row[f"{name}_s"]) for name in BREAKDOWN}
        for i, (_, row) in enumerate(ordered.iterrows())
    }
    return breakdown_plot(bars, path, "where the front designs' step time goes")


def write_reports(
    out: Path,
    summary: dict,
    front: pd.DataFrame,
    cloud: pd.DataFrame,
    standing: tuple[pd.DataFrame, pd.DataFrame] | None = None,
) -> None:
    """A sweep's reports for a person: ``pareto.png``, ``breakdown.png`` (training sweeps),
    ``sensitivity.png``, ``report.md`` and the self-contained ``report.html`` (with ``standing``:
    where the models stand against published measurements, the per-kind errors and accuracy gates
    of ``commodel validate``)."""
    pareto_plot(cloud, front, summary, out / "pareto.png")
    front_breakdown(summary, front, out / "breakdown.png")
    if (out / "sensitivity.csv").is_file():
        sensitivity_plot(pd.read_csv(out / "sensitivity.csv"), out / "sensitivity.png")
    write_text(out / "report.md", report_markdown(summary, front))
    write_text(out / "report.html", report_html(summary, front, out / "pareto.png", standing))
