"""``commodel validate``: the models against every published measurement."""

from __future__ import annotations

import json
from typing import Annotated

import pandas as pd
import typer

from commodel.cli.root import JsonFlag, app, job_command
from commodel.errors import CommodelError
from commodel.pricing.collective import CollectiveJob
from commodel.pricing.dispatch import DispatchJob
from commodel.pricing.gemm import GemmJob
from commodel.pricing.job import Job
from commodel.pricing.overlap import OverlapJob
from commodel.pricing.serving_job import ServingJob
from commodel.pricing.training_job import TrainingJob
from commodel.report.console import validation_text
from commodel.report.frames import to_json
from commodel.units import readable_number
from commodel.validate.report import report_sections, validation_report
from commodel.validate.table import row_detail

#: The most Monte Carlo draws validate takes: 10,000 draws are about four hours and 2 GiB.
MAX_PARAMETER_DRAWS = 10_000


@app.command()
def validate(
    as_json: JsonFlag = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the report as Markdown.")] = False,
    parameter_draws: Annotated[
        int,
        typer.Option(
            min=0,
            max=MAX_PARAMETER_DRAWS,
            help="Also price every row on this many draws of the hardware's uncertain numbers and "
            f"report how often that band holds the measurement (0: skip; about 1.5 s per draw; at most "
            f"{MAX_PARAMETER_DRAWS}).",
        ),
    ] = 0,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when an accuracy gate fails (for CI); 0 otherwise.")
    ] = False,
    row: Annotated[
        str | None,
        typer.Option(
            "--row",
            help="Only this row (an id): the model against the measurement, what the row was read from, and "
            "the commodel command that prices it.",
        ),
    ] = None,
) -> None:
    """Model vs every published measurement: errors per row, and median/max error per kind."""
    if as_json and markdown:
        raise CommodelError("--json and --markdown are two output formats: choose one")
    if row is not None:
        if markdown or strict or parameter_draws:
            raise CommodelError(
                "--row prints one row: --markdown, --strict and --parameter-draws are for the report"
            )
        typer.echo(_row_text(row_detail(row), as_json))
        return
    report = validation_report(parameter_draws)
    if as_json:
        typer.echo(json.dumps({key: json.loads(to_json(frame)) for key, frame in report.items()}, indent=2))
    else:
        typer.echo(validation_text(report_sections(report), markdown))
    failing = report["gates"][~report["gates"].holds]
    if strict and len(failing):
        typer.echo(f"{len(failing)} accuracy gate(s) fail: " + "; ".join(
            f"{g.gate} {g.statistic} {g.abs_err_pct:.1f}% > {g.bound_pct:g}%" for g in failing.itertuples()
        ), err=True)  # fmt: skip
        raise typer.Exit(1)


#: The command that prices each kind of job a row runs (a collective's is :func:`_command`'s own).
JOB_COMMANDS = {
    TrainingJob: "train",
    ServingJob: "serve",
    DispatchJob: "comm dispatch",
    GemmJob: "roofline gemm",
}


def _command(job: Job) -> str:
    """The commodel command that prices a row's job (a collective's operation and size as
    ``commodel collective`` takes them, an overlap's size as ``commodel overlap`` does)."""
    if isinstance(job, CollectiveJob):
        size = f"{job.size_bytes:.0f}"
        return f"{job_command(f'collective {job.op}', job, skip=('op', 'size_bytes'))} --size {size}"
    if isinstance(job, OverlapJob):
        return f"{job_command('overlap', job, skip=('size_bytes',))} --size {job.size_bytes:.0f}"
    if isinstance(job, TrainingJob) and job.pipeline_layout:  # the layout states its stages' layers
        return job_command("train", job, skip=("first_stage_layers", "last_stage_layers"))
    return job_command(JOB_COMMANDS[type(job)], job)


def _row_text(detail: dict, as_json: bool) -> str:
    """One validation row (:func:`~commodel.validate.table.row_detail`) as text or JSON, with the command
    line of the job it runs."""
    job = detail.pop("job")
    command = _command(job) if job is not None else None
    if as_json:
        frame = pd.DataFrame([detail])
        return json.dumps(json.loads(to_json(frame))[0] | {"command": command}, indent=2)
    known = {key: detail[key] == detail[key] for key in ("measured", "model", "error_pct")}  # not NaN
    target = f", priced on {detail['model_target']}" if detail["model_target"] else ""
    lines = [f"{detail['id']}: {detail['kind']} row, {detail['role']}"]
    lines += (
        [f"  measured  {readable_number(detail['measured'])} {detail['unit']} ({detail['metric']})"]
        if known["measured"]
        else []
    )
    if known["model"]:
        error = f" ({detail['error_pct']:+.1f}%)" if known["error_pct"] else ""
        lines.append(f"  model     {readable_number(detail['model'])}{error}")
    lines += [
        f"  read from {detail['description']} on {detail['system']}{target}",
        f"  source    {detail['source']}",
    ]
    lines += [f"  note      {detail['note']}"] if detail["note"] else []
    lines += [f"  run it    {command}"] if command else []
    lines += [f"  formula   {detail['formula']}"] if detail["formula"] else []
    return "\n".join(lines)
