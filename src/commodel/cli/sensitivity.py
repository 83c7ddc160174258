"""``commodel sensitivity``: which variables (and uncertain hardware numbers) drive each objective."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from commodel.cli.root import ExecutorOption, JsonFlag, SchedulerOption, app, check_scheduler
from commodel.explore.sensitivity import estimator_notes, study_sensitivity
from commodel.explore.spec import load_spec
from commodel.io import output_folder, write_text
from commodel.report.frames import plain_table
from commodel.report.plots import sensitivity_plot
from commodel.studies import check_parameters

#: The most base samples sensitivity takes: N (k + 2) evaluations, 65,536 x 12 in about 10 minutes.
MAX_SAMPLES = 65_536


@app.command()
def sensitivity(
    spec: Annotated[Path, typer.Argument(help="A sweep specification (TOML): its variables and objectives.")],
    method: Annotated[str, typer.Option(help="sobol (first-order and total indices) or morris.")] = "sobol",
    samples: Annotated[
        int,
        typer.Option(
            min=8,
            max=MAX_SAMPLES,
            help=f"Base samples (Saltelli N, or Morris trajectories; at most {MAX_SAMPLES:,}).",
        ),
    ] = 256,
    output: Annotated[str, typer.Option("-o", "--output", help="Folder for sensitivity.csv and .png.")] = "",
    parameters: Annotated[
        bool,
        typer.Option(
            "--parameters",
            help="Also the uncertain numbers of the study's hardware (one evaluation "
            "per point: for small studies).",
        ),
    ] = False,
    executor: ExecutorOption = "local",
    scheduler: SchedulerOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Which variables drive each objective: Sobol indices or Morris effects, estimated by SALib on the
    sweep's own evaluation."""
    loaded = load_spec(spec)
    check_parameters(loaded, spec)
    check_scheduler(executor, scheduler)
    table = study_sensitivity(loaded, method, samples, loaded.study.seed, executor, scheduler, parameters)
    if output:
        out = output_folder(output)
        write_text(out / "sensitivity.csv", table.to_csv(index=False))
        sensitivity_plot(table, str(out / "sensitivity.png"))
    notes = estimator_notes(table, samples) if method == "sobol" else []
    if as_json:
        typer.echo(
            json.dumps({"indices": json.loads(table.to_json(orient="records")), "notes": notes}, indent=2)
        )
        return
    typer.echo(plain_table(table) + "".join(f"\nnote: {n}" for n in notes))
