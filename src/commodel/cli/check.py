"""``commodel check``: golden numbers for CI, a file of designs with expected bounds on their outputs."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer

from commodel.cli.root import JsonFlag, app
from commodel.errors import CommodelError
from commodel.validate.check import load_checks, run_checks

#: Exit code when a bound fails (2 is bad input, as for every command).
FAILED = 3


@app.command()
def check(
    file: Annotated[str, typer.Argument(help="A TOML file of named designs and the bounds they must meet.")],
    as_json: JsonFlag = False,
) -> None:
    """Price every design of FILE and check its bounds: exit 0 when all hold, 3 when any fails."""
    checks = load_checks(file)
    try:
        outcomes = run_checks(checks)
    except CommodelError as exc:
        raise CommodelError(f"{file}: {exc}") from None
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(o) for o in outcomes], indent=2, default=str))
    else:
        width = max(len(f"{o.design}.{o.output}") for o in outcomes)
        for o in outcomes:
            value = f"{o.value:.6g}" if isinstance(o.value, float) else str(o.value)
            mark = "pass" if o.holds else "FAIL"
            note = f"  ({o.note})" if o.note else ""
            typer.echo(
                f"{mark}  {o.design + '.' + o.output:<{width}}  {value:>12}  expected {o.expected}{note}"
            )
        failed = sum(not o.holds for o in outcomes)
        typer.echo(f"{len(outcomes) - failed} of {len(outcomes)} bounds hold")
    if any(not o.holds for o in outcomes):
        raise typer.Exit(FAILED)
