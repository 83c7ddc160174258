"""``commodel roofline``: one GEMM's roofline time, or a GPU's roofline chart with typical kernels."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Annotated

import typer

from commodel.cli.root import JSON_FLAG, job_options, roofline_app
from commodel.compute.kernels import example_kernels
from commodel.hardware import default_db
from commodel.pricing.gemm import GemmJob, price_gemm
from commodel.pricing.job import make_job
from commodel.report.tables import gemm_text


def roofline_gemm(as_json: bool = False, **values: object) -> None:
    """Roofline time of one GEMM: time, achieved TFLOP/s and whether it is compute- or memory-bound."""
    job = make_job(GemmJob, **values)
    record = price_gemm(job)
    typer.echo(json.dumps({"gpu": job.gpu, **record}, indent=2) if as_json else gemm_text(job.gpu, record))


roofline_gemm.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [*job_options(GemmJob), JSON_FLAG]
)
roofline_app.command("gemm")(roofline_gemm)


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
