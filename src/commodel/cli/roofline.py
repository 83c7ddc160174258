"""``commodel roofline``: one GEMM's roofline time, or a GPU's roofline chart with typical kernels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from commodel.cli.root import JsonFlag, roofline_app
from commodel.compute.kernels import example_kernels
from commodel.compute.roofline import gemm_summary
from commodel.hardware import default_db
from commodel.report.tables import gemm_text

#: The largest GEMM dimension taken (2^31: a 32-bit index, as cuBLAS takes it).
MAX_DIM = 2**31


@roofline_app.command("gemm")
def roofline_gemm(
    gpu: Annotated[str, typer.Option(help="GPU name from the hardware database.")] = "h100-sxm",
    m: Annotated[int, typer.Option(min=1, max=MAX_DIM, help="Rows of A and C.")] = 8192,
    n: Annotated[int, typer.Option(min=1, max=MAX_DIM, help="Columns of B and C.")] = 8192,
    k: Annotated[int, typer.Option(min=1, max=MAX_DIM, help="Inner dimension.")] = 8192,
    dtype: Annotated[str, typer.Option(help="fp32, tf32, bf16, fp16, fp8.")] = "bf16",
    as_json: JsonFlag = False,
) -> None:
    """Roofline time of one GEMM: time, achieved TFLOP/s and whether it is compute- or memory-bound."""
    record = gemm_summary(default_db().gpu(gpu), m, n, k, dtype)
    typer.echo(json.dumps({"gpu": gpu, **record}, indent=2) if as_json else gemm_text(gpu, record))


@roofline_app.command("plot")
def roofline_plot_cmd(
    gpu: Annotated[str, typer.Option(help="GPU name from the hardware database.")] = "h100-sxm",
    output: Annotated[Path, typer.Option("-o", "--output", help="Image file to write.")] = Path(
        "roofline.png"
    ),
    seq: Annotated[int, typer.Option(help="Sequence length of the example attention kernel.")] = 4096,
) -> None:
    """Roofline chart of a GPU with typical training kernels placed on it."""
    from commodel.report.plots import roofline_plot  # slow: matplotlib, for this subcommand only

    path = roofline_plot(default_db().gpu(gpu), gpu, example_kernels(seq), output)
    typer.echo(f"wrote {path}")
