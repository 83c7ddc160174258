"""``commodel collective``: one collective over a range of sizes, in nccl-tests' conventions."""

from __future__ import annotations

from typing import Annotated

import pandas as pd
import typer

from commodel.cli.root import JsonFlag, app
from commodel.comm.collectives import run
from commodel.comm.fabric import fabric_of
from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.report.frames import to_json
from commodel.report.tables import collective_band_note, nccl_tests_table
from commodel.units import parse_sizes


@app.command()
def collective(
    op: Annotated[
        str,
        typer.Argument(help="allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv"),
    ],
    system: Annotated[str, typer.Option(help="System (node) name from the hardware database.")] = "dgx-h100",
    size: Annotated[
        str, typer.Option(help="One size, a list (8,1MiB) or a doubling range (8B:8GiB).")
    ] = "8B:8GiB",
    nodes: Annotated[int, typer.Option(help="Nodes in the cluster.")] = 1,
    gpus: Annotated[int | None, typer.Option(help="GPUs taking part (default: all of them).")] = None,
    algo: Annotated[
        str,
        typer.Option(
            help="auto (NCCL's own choice), best (the fastest), or one of ring, tree, nvls, nvls-tree, "
            "collnet-direct, collnet-chain, pat, recursive-doubling, ..."
        ),
    ] = "auto",
    protocol: Annotated[str, typer.Option(help="auto, ll, ll128 or simple.")] = "auto",
    channels: Annotated[
        int | None, typer.Option(help="Force this many channels (CTAs), as a tuner plugin may.")
    ] = None,
    library: Annotated[
        str, typer.Option(help="Algorithms to choose from: nccl (what NCCL/RCCL implement) or all.")
    ] = "nccl",
    launch: Annotated[
        str,
        typer.Option(help="stream (a kernel launch per call, nccl-tests' default) or graph (CUDA graph)."),
    ] = "stream",
    gpus_per_process: Annotated[
        int, typer.Option(help="GPUs one process drives (nccl-tests -g); its launches serialize.")
    ] = 1,
    partition: Annotated[
        int | None, typer.Option(help="GPUs per NVLink partition of a rack-scale domain (e.g. 4 on NVL72).")
    ] = None,
    nvls: Annotated[bool, typer.Option("--nvls/--no-nvls", help="Allow NVLink SHARP (NVLS).")] = True,
    sharp: Annotated[
        bool,
        typer.Option("--sharp", help="Let the scale-out switches reduce (CollNet/SHARP) where they can."),
    ] = False,
    as_json: JsonFlag = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table.")] = False,
    uncertainty: Annotated[
        bool, typer.Option("--uncertainty", help="Add p10-p90 bands from the collectives' validation errors.")
    ] = False,
) -> None:
    """Time, algbw and busbw of a collective over a range of sizes (nccl-tests conventions)."""
    if as_json and as_csv:
        raise CommodelError("--json and --csv are two output formats: choose one")
    if nodes < 1:
        raise CommodelError(f"--nodes must be at least 1, got {nodes}")
    sizes = parse_sizes(size)

    def priced() -> pd.DataFrame:
        """The collective on the hardware database in use (a Monte Carlo draw's, for the bands)."""
        where = cluster(system, nodes, partition=partition)
        fab = fabric_of(where, sharp=sharp, launch=launch, nvls=nvls, gpus_per_process=gpus_per_process)
        return run(op, where, sizes, gpus, algo, protocol, library, channels, fab)

    frame = priced()
    if uncertainty:
        from commodel.validate.bands import collective_bands  # optional: reads the validation table

        frame = collective_bands(frame, priced, system)
    if as_json:
        typer.echo(to_json(frame))
    elif as_csv:
        typer.echo(frame.to_csv(index=False), nl=False)
    else:
        if uncertainty:
            typer.echo(collective_band_note(frame))
        typer.echo(nccl_tests_table(frame, system))
