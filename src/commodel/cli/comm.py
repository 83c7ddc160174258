"""``commodel comm schemes``: who drives a message, scheme by scheme."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from commodel.cli.root import JsonFlag, comm_app
from commodel.comm.initiation import check_scheme, path_of, scheme_table
from commodel.hardware import cluster
from commodel.report.tables import scheme_text
from commodel.units import parse_sizes


@comm_app.command("schemes")
def comm_schemes(
    system: Annotated[str, typer.Option(help="System (node) name from the hardware database.")] = "dgx-h100",
    size: Annotated[
        str, typer.Option(help="Message sizes: 8, 8,64KiB,1MiB or 8B:1MiB.")
    ] = "8,4KiB,64KiB,1MiB",
    scheme: Annotated[
        str, typer.Option(help="Only this scheme (an error if the fabric cannot run it).")
    ] = "",
    scope: Annotated[
        str, typer.Option(help="network (two nodes) or node (two GPUs over NVLink/xGMI).")
    ] = "network",
    as_json: JsonFlag = False,
) -> None:
    """The GPU-centric taxonomy on one system's node-to-node path: who calls, builds, triggers and
    moves each message; put latency per size, coordination latency, message rate, and where each
    scheme wins over the host-driven baseline."""
    path = path_of(cluster(system, 2), scope)
    if scheme:
        check_scheme(scheme, path)
    records = [r for r in scheme_table(path, parse_sizes(size)) if r["scheme"] == scheme or not scheme]
    typer.echo(json.dumps(records, indent=2) if as_json else scheme_text(f"{system} ({scope})", records))
