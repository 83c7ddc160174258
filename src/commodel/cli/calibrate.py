"""``commodel calibrate nccl-tests``: a system's constants fit to the user's own nccl-tests logs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import tomli_w
import typer

from commodel.cli.root import calibrate_app
from commodel.comm.calibrate import calibrate
from commodel.comm.nccl_tests import read
from commodel.hardware import cluster
from commodel.io import write_text
from commodel.report.frames import plain_table


@calibrate_app.command("nccl-tests")
def calibrate_nccl_tests(
    logs: Annotated[list[Path], typer.Argument(help="nccl-tests output files (all_reduce_perf, ...).")],
    system: Annotated[str, typer.Option(help="The system the logs ran on (hardware database name).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Overlay file to write (TOML).")],
    gpus: Annotated[int | None, typer.Option(help="GPUs the logs ran on (default: from the logs).")] = None,
    nodes: Annotated[int | None, typer.Option(help="Nodes the logs ran on (default: from the logs).")] = None,
    launch: Annotated[str, typer.Option(help="stream, or graph for nccl-tests -G runs.")] = "stream",
    gpus_per_process: Annotated[int, typer.Option(help="nccl-tests -g of the runs.")] = 1,
    algo: Annotated[str, typer.Option(help="auto, or the NCCL_ALGO the runs forced.")] = "auto",
) -> None:
    """Fit the system's calibratable constants to nccl-tests logs and write a hardware overlay."""
    parsed = [read(path) for path in logs]
    fit = calibrate(parsed, system, gpus, nodes, launch, gpus_per_process, algo)
    typer.echo(f"Rows ({len(fit.rows)}), signed error of the model's time before and after the fit (%):")
    typer.echo(plain_table(fit.rows.assign(time_us=fit.rows.time_s * 1e6).drop(columns="time_s")))
    typer.echo("\nParameters:")
    for name, value in fit.fitted.items():
        prior = fit.prior[name]
        shown = "not determined by these logs: kept its prior" if value is None else f"fitted {value:.4g}"
        typer.echo(f"  {name:<28} prior {prior:.4g}  {shown}")
    overlay = fit.overlay(cluster(system), parsed)
    if not overlay:
        typer.echo("\nnothing these logs determine: no overlay written")
        return
    header = f"# commodel hardware overlay for {system}: apply with commodel --hardware {output} ...\n"
    write_text(output, header + tomli_w.dumps(overlay))
    typer.echo(f"\nwrote {output} (use: commodel --hardware {output} collective ... --system {system})")
