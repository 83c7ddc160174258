"""``commodel model``: the shipped models and a user's model files, with what they cost per token."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from commodel.cli.root import JsonFlag, model_app
from commodel.units import format_quantity
from commodel.workloads.model.catalog import model, models
from commodel.workloads.model.summary import model_summary


@model_app.command("list")
def model_list(as_json: JsonFlag = False) -> None:
    """The shipped models (their aliases in brackets), with parameters and active parameters."""
    rows = [model_summary(name, config) for name, config in models().items() if name not in config.aliases]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        aliases = f" [{', '.join(row['aliases'])}]" if row["aliases"] else ""
        typer.echo(
            f"{row['name']:<18} {row['parameters_B']:>8.2f} B total {row['active_parameters_B']:>7.2f} B active  "
            f"{row['description']}{aliases}"
        )


@model_app.command("show")
def model_show(
    name: Annotated[
        str, typer.Argument(help="A shipped model's name, or a model file (.toml, config.json).")
    ],
    seq: Annotated[
        int | None, typer.Option(min=1, help="Sequence for the FLOPs per token (default: the model's).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """One model: its sizes, parameters, active parameters and training FLOPs per token."""
    summary = model_summary(name, model(name), seq)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    width = max(map(len, summary))
    for key, value in summary.items():
        typer.echo(f"{key:<{width}}  {_shown(key, value)}")


def _shown(key: str, value: object) -> str:
    """A summary value for a person: parameters in billions, FLOPs with an SI prefix, a context the
    model does not state as such."""
    if value is None:
        return "not stated"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if key.endswith("parameters_B"):
        return f"{value:,.2f} B"
    if key == "training_flops_per_token":
        return format_quantity(float(value), "flop_rate").removesuffix("/s")
    return str(value)
