"""Roofline chart: the GPU's ceilings per dtype with kernels placed on them (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from commodel.compute.kernels import Kernel
from commodel.compute.roofline import achievable_bandwidth, kernel_time
from commodel.errors import CommodelError
from commodel.hardware.schema import GPU
from commodel.io import atomic_path

if TYPE_CHECKING:  # a sensitivity table arrives as a DataFrame: pandas is loaded by then
    import pandas as pd


def roofline_plot(gpu: GPU, name: str, kernels: dict[str, Kernel], path: Path) -> Path:
    """Draw ``gpu``'s roofline (vendor peak per dtype, dashed: achievable) and each kernel's point.

    Kernels are placed at (arithmetic intensity, achieved FLOP/s) from :func:`kernel_time`. The file is
    written atomically.
    """
    from matplotlib.figure import Figure  # slow: matplotlib (0.3 s); no pyplot: a notebook keeps its backend

    fig = Figure(figsize=(7.5, 5))
    ax = fig.subplots()
    intensity = np.logspace(-1, 4, 200)
    vendor_bw = gpu.memory_bandwidth.value
    by_peak: dict[float, list[str]] = {}
    for dtype, peak in gpu.peak_flops.items():
        if dtype not in ("fp64", "fp4"):
            by_peak.setdefault(peak.value, []).append(dtype)
    for peak, dtypes in sorted(by_peak.items()):
        label = "/".join(dtypes)
        line = ax.loglog(intensity, np.minimum(peak, vendor_bw * intensity), label=f"{label} peak")
        achievable = peak * gpu.efficiency(dtypes[0])
        ax.loglog(
            intensity,
            np.minimum(achievable, achievable_bandwidth(gpu) * intensity),
            ls="--",
            color=line[0].get_color(),
            lw=0.8,
        )
    # Kernels as numbered points, named (with their dtype) in a key inside the axes, off the ceilings.
    key = []
    for number, (label, kernel) in enumerate(kernels.items(), start=1):
        result = kernel_time(gpu, kernel)
        x, y = float(np.max(kernel.intensity)), float(np.max(result.achieved_flops))
        ax.scatter([x], [y], color="black", zorder=3, s=18)
        ax.annotate(str(number), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8, weight="bold")
        key.append(f"{number}: {label} ({kernel.dtype}, {np.ravel(result.bound)[0]}-bound)")
    ax.text(0.98, 0.03, "\n".join(key), transform=ax.transAxes, ha="right", va="bottom", fontsize=7,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85})  # fmt: skip
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"Roofline: {name} (solid: vendor peak, dashed: achievable)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return save_figure(fig, path)


def save_figure(fig: object, path: str | Path, dpi: int = 120) -> Path:
    """Write a matplotlib figure atomically, in the format its extension names; a directory, a
    missing folder or a format matplotlib cannot write is a :class:`CommodelError`."""
    target = Path(path)
    kind = target.suffix.lstrip(".").lower()
    formats = fig.canvas.get_supported_filetypes()  # type: ignore[attr-defined]
    if target.is_dir():
        raise CommodelError(f"{target} is a folder; give an image file name (e.g. {target / 'plot.png'})")
    if kind not in formats:
        raise CommodelError(
            f"cannot write '{target.name}': give an image extension ({', '.join(sorted(formats))})"
        )
    if not target.parent.is_dir():
        raise CommodelError(f"no folder {target.parent} to write {target.name} into")
    with atomic_path(target) as tmp:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format=kind)  # type: ignore[attr-defined]
    return target


def breakdown_plot(
    bars: dict[str, dict[str, float]], path: str | Path, title: str = "where the step's time goes"
) -> Path:
    """Stacked bars, one per design (label -> component -> seconds), components in a shared order."""
    from matplotlib.figure import Figure  # slow: matplotlib (0.3 s), where a plot is written

    labels = list(bars)
    components = list(dict.fromkeys(c for parts in bars.values() for c in parts))
    fig = Figure(figsize=(max(5.0, 1.2 * len(labels) + 3), 4.5))
    ax = fig.subplots()
    bottoms = np.zeros(len(labels))
    for component in components:
        heights = np.array([bars[label].get(component, 0.0) for label in labels])
        if heights.max() > 0:
            ax.bar(labels, heights, bottom=bottoms, label=component.replace("_", " "))
            bottoms += heights
    ax.set_ylabel("step time (s)")
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=20, labelsize=7)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


#: Inputs a sensitivity plot shows per output (the largest; the table holds them all).
SENSITIVITY_BARS = 12


def sensitivity_plot(table: pd.DataFrame, path: str | Path) -> Path:
    """Horizontal bars of each output's indices per input (total and first-order, or mu*), the
    :data:`SENSITIVITY_BARS` largest, largest on top."""
    from matplotlib.figure import Figure  # slow: matplotlib (0.3 s), where a plot is written

    outputs = list(dict.fromkeys(table.output))
    size = "ST" if "ST" in table else "mu_star"
    shown = min(SENSITIVITY_BARS, int(table.groupby("output").size().max()))
    fig = Figure(figsize=(5.5 * len(outputs), 1.2 + 0.32 * shown), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(outputs)))
    for ax, output in zip(axes, outputs, strict=True):
        rows = table[table.output == output].nlargest(SENSITIVITY_BARS, size).iloc[::-1]
        at = np.arange(len(rows))
        if size == "ST":
            ax.barh(at + 0.2, rows.ST, 0.4, xerr=rows.ST_conf, capsize=2, label="total")
            ax.barh(at - 0.2, rows.S1, 0.4, xerr=rows.S1_conf, capsize=2, label="first order")
            ax.set_xlabel("Sobol index (bars: 95% confidence)", fontsize=8)
        else:
            ax.barh(at, rows.mu_star, 0.6, xerr=rows.mu_star_conf, capsize=2, label="mu*")
            ax.set_xlabel("Morris mu* (bars: 95% confidence), in the output's unit", fontsize=8)
        ax.set_yticks(at, rows.variable, fontsize=8)
        ax.set_title(output.replace("_", " "), fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)
