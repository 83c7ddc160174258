"""``commodel compare``: two training designs side by side."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from commodel.cli.root import JsonFlag, app
from commodel.errors import CommodelError
from commodel.report.compare import compare as run_compare
from commodel.report.compare import compare_plot, compare_text, parse_design


@app.command()
def compare(
    a: Annotated[
        str, typer.Option("--a", help="Design A: field=value pairs (system=dgx-h100,tp=8) or a TOML file.")
    ],
    b: Annotated[str, typer.Option("--b", help="Design B, the same way.")],
    common: Annotated[
        str,
        typer.Option("--common", help="Fields both designs share (model=llama3-70b,global_batch=512,...)."),
    ] = "",
    plot: Annotated[
        str, typer.Option("--plot", help="Also write a stacked-bar image of both breakdowns.")
    ] = "",
    as_json: JsonFlag = False,
) -> None:
    """Two training designs side by side: step time, throughput, MFU, memory, energy and cost, B over A,
    and which part of the step grew or shrank."""
    shared = parse_design(common, "--common") if common else {}
    result = run_compare(parse_design(a, "--a"), parse_design(b, "--b"), shared)
    if plot and not result["breakdown"]:
        raise CommodelError("--plot: a design that does not fit has no step to draw")
    if plot:
        compare_plot(result, plot)
    typer.echo(json.dumps(result, indent=2) if as_json else compare_text(result))
