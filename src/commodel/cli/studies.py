"""``commodel study list`` and ``commodel study run``: the published systems, paper beside model."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from commodel.cli.root import JsonFlag, study_app
from commodel.report.console import study_text
from commodel.studies import STUDIES, run_study


@study_app.command("list")
def study_list() -> None:
    """The studies commodel ships."""
    for name, (_, description) in STUDIES.items():
        typer.echo(f"{name:<16} {description}")


@study_app.command("run")
def study_run(
    name: Annotated[str, typer.Argument(help="Study name (see: commodel study list).")],
    as_json: JsonFlag = False,
) -> None:
    """Run a study: its claims (paper vs model) and its table."""
    result = run_study(name)
    typer.echo(json.dumps(result.as_dict(), indent=2) if as_json else study_text(result))
