"""``commodel calibrate nccl-tests``: a system's constants fit to the user's own nccl-tests logs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import tomli_w
import typer

from commodel.cli.root import calibrate_app
from commodel.comm.calibrate import calibrate
from commodel.comm.nccl_tests import SIGNATURES, read
from commodel.errors import pick
from commodel.hardware import cluster, default_db
from commodel.hardware.loader import apply_overlay
from commodel.io import atomic_path, output_file
from commodel.report.frames import plain_table


@calibrate_app.command("nccl-tests")
def calibrate_nccl_tests(
    logs: Annotated[list[Path], typer.Argument(help="nccl-tests output files (all_reduce_perf, ...).")],
    system: Annotated[str, typer.Option(help="The system the logs ran on (hardware database name).")],
    output: Annotated[str, typer.Option("-o", "--output", help="Overlay file to write (TOML).")],
    gpus: Annotated[
        int | None, typer.Option(min=1, help="GPUs the logs ran on (default: from the logs).")
    ] = None,
    nodes: Annotated[
        int | None, typer.Option(min=1, help="Nodes the logs ran on (default: from the logs).")
    ] = None,
    op: Annotated[
        str | None,
        typer.Option(help="The collective (allreduce, allgather, ...) where the log cannot tell."),
    ] = None,
    launch: Annotated[
        str | None, typer.Option(help="stream, or graph for nccl-tests -G runs (default: from the log).")
    ] = None,
    gpus_per_process: Annotated[
        int | None, typer.Option(min=1, help="nccl-tests -g of the runs (default: from the log).")
    ] = None,
    algo: Annotated[str, typer.Option(help="auto, or the NCCL_ALGO the runs forced.")] = "auto",
) -> None:
    """Fit the system's calibratable constants to nccl-tests logs and write a hardware overlay.

    The fit minimizes the rows' mean |log error| and never returns constants that raise their median
    |error|."""
    output = output_file(output, "overlay (-o)")  # checked before the fit, which may take a while
    if op is not None:
        op = pick("collective", op, {name: name for name in SIGNATURES})
    parsed = [read(path, op) for path in logs]
    fit = calibrate(parsed, system, gpus, nodes, launch, gpus_per_process, algo)
    typer.echo(f"Rows ({len(fit.rows)}), signed error of the model's time before and after the fit (%):")
    typer.echo(plain_table(fit.rows.assign(time_us=fit.rows.time_s * 1e6).drop(columns="time_s")))
    typer.echo("\nParameters:")
    for name, value in fit.fitted.items():
        prior = fit.prior[name]
        if value is not None:
            shown = f"fitted {value:.4g}"
        elif name in fit.determined:
            shown = "kept its prior: no fit beats it"
        else:
            shown = "not determined by these logs: kept its prior"
        typer.echo(f"  {name:<28} prior {prior:.4g}  {shown}")
    typer.echo(
        f"\nMean |log error| (what the fit minimizes): {fit.mean_log_error('before'):.3f} with the defaults, "
        f"{fit.mean_log_error('after'):.3f} fitted; median |error| {fit.median_before_pct:.1f}% -> "
        f"{fit.median_after_pct:.1f}% (never raised)"
    )
    overlay = fit.overlay(cluster(system), parsed)
    if not overlay:
        why = "no fit beats the defaults" if fit.determined else "nothing these logs determine"
        typer.echo(f"{why}: the defaults are kept and no overlay is written")
        return
    header = f"# commodel hardware overlay for {system}: apply with commodel --hardware {output} ...\n"
    with atomic_path(output) as written:  # kept only if --hardware would take it, as it checks overlays
        written.write_text(header + tomli_w.dumps(overlay))
        apply_overlay(default_db(), written)
    typer.echo(f"\nwrote {output} (use: commodel --hardware {output} collective ... --system {system})")
