"""``commodel validate``: the models against every published measurement."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from commodel.cli.root import JsonFlag, app
from commodel.errors import CommodelError
from commodel.report.console import validation_text
from commodel.report.frames import to_json
from commodel.validate.report import report_sections, validation_report

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
) -> None:
    """Model vs every published measurement: errors per row, and median/max error per kind."""
    if as_json and markdown:
        raise CommodelError("--json and --markdown are two output formats: choose one")
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
