"""Roofline chart: the GPU's ceilings per dtype with kernels placed on them (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from commodel.compute.kernels import Kernel
from commodel.compute.roofline import achievable_bandwidth, kernel_time
from commodel.hardware.schema import GPU
from commodel.io import atomic_path


def roofline_plot(gpu: GPU, name: str, kernels: dict[str, Kernel], path: Path) -> Path:
    """Draw ``gpu``'s roofline (vendor peak per dtype, dashed: achievable) and each kernel's point.

    Kernels are placed at (arithmetic intensity, achieved FLOP/s) from :func:`kernel_time`. The file is
    written atomically.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    intensity = np.logspace(-1, 4, 200)
    vendor_bw = gpu.memory_bandwidth.value
    for dtype, peak in gpu.peak_flops.items():
        if dtype in ("fp64", "fp4"):
            continue
        line = ax.loglog(intensity, np.minimum(peak.value, vendor_bw * intensity), label=f"{dtype} peak")
        achievable = peak.value * gpu.matmul_efficiency.value
        ax.loglog(
            intensity,
            np.minimum(achievable, achievable_bandwidth(gpu) * intensity),
            ls="--",
            color=line[0].get_color(),
            lw=0.8,
        )
    for label, kernel in kernels.items():
        result = kernel_time(gpu, kernel)
        ax.scatter(np.atleast_1d(kernel.intensity), np.atleast_1d(result.achieved_flops), zorder=3)
        for x, y in zip(np.atleast_1d(kernel.intensity), np.atleast_1d(result.achieved_flops), strict=True):
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"Roofline: {name} (solid: vendor peak, dashed: achievable)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)
    return Path(path)
