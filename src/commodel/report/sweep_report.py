"""A sweep's plot and its report for a person."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from commodel.explore.spec import SweepSpec
from commodel.report.plots import save_figure
from commodel.report.tables import markdown_table


def pareto_plot(cloud: pd.DataFrame, front: pd.DataFrame, spec: SweepSpec, path: Path) -> Path:
    """2 objectives: scatter with the front highlighted; 3: the same, colored by the third;
    more: parallel coordinates of the front (objectives scaled to [0, 1], 0 = best)."""
    from matplotlib.figure import Figure  # no pyplot: leaves the caller's backend (a notebook's) alone

    names = list(spec.objectives)
    fig = Figure(figsize=(7.5, 5))
    ax = fig.subplots()
    if len(names) <= 3 and len(names) >= 2:
        x, y = names[0], names[1]
        color = front[names[2]] if len(names) == 3 and len(front) else None
        if len(cloud):
            ax.scatter(cloud[x], cloud[y], s=6, color="0.8", label="designs (sample)")
        if len(front):
            ordered = front.sort_values(x)
            shade = (
                {"c": color.loc[ordered.index], "cmap": "viridis"} if color is not None else {"color": "C3"}
            )
            points = ax.scatter(ordered[x], ordered[y], s=22, label="Pareto front", zorder=3, **shade)
            if color is not None:
                fig.colorbar(points, ax=ax, label=names[2])
        ax.set_xlabel(f"{x} ({spec.objectives[x]})")
        ax.set_ylabel(f"{y} ({spec.objectives[y]})")
        if _spans_decades(cloud, front, x):
            ax.set_xscale("log")
        if _spans_decades(cloud, front, y):
            ax.set_yscale("log")
        if len(cloud) or len(front):
            ax.legend(fontsize=8)
    elif len(front):
        values = front[names].to_numpy(dtype=float)
        sign = np.array([-1.0 if spec.objectives[n] == "max" else 1.0 for n in names])
        scaled = values * sign
        lo, hi = scaled.min(axis=0), scaled.max(axis=0)
        scaled = (scaled - lo) / np.where(hi > lo, hi - lo, 1.0)
        for row in scaled:
            ax.plot(range(len(names)), row, color="C0", alpha=0.3)
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.set_ylabel("scaled objective (0 = best)")
    else:
        ax.text(0.5, 0.5, "no feasible design", ha="center")
    ax.set_title(f"{spec.study.title or spec.study.name}: {len(front)} Pareto-optimal designs")
    ax.grid(True, alpha=0.3)
    return save_figure(fig, path, dpi=110)


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
    return "\n".join(lines) + "\n"
