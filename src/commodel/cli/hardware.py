"""``commodel hw``: the hardware database, every number with its source."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from commodel.cli.root import JsonFlag, hw_app
from commodel.hardware import default_db
from commodel.report.tables import record_lines


class Kind(StrEnum):
    gpu = "gpu"
    link = "link"
    system = "system"


@hw_app.command("list")
def hw_list(
    kind: Annotated[Kind | None, typer.Option(help="Only this kind of record.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List GPUs, links and systems with their description."""
    db = default_db()
    kinds = [kind.value] if kind else [k.value for k in Kind]
    rows = [
        {"kind": k, "name": name, "description": record.description}
        for k in kinds
        for name, record in sorted(db.table(k).items())
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        typer.echo(f"{row['kind']:<7} {row['name']:<16} {row['description']}")


@hw_app.command("show")
def hw_show(
    name: Annotated[str, typer.Argument(help="A GPU, link or system name.")],
    as_json: JsonFlag = False,
) -> None:
    """Every field of one record, in human units, with its source."""
    kind, record = default_db().find(name)
    if as_json:
        typer.echo(json.dumps({"record": kind, "name": name, **record.model_dump()}, indent=2))
        return
    typer.echo("\n".join([f"{kind} {name}", *record_lines(record)]))
