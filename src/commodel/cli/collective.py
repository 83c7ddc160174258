"""``commodel collective``: one collective over a range of sizes, in nccl-tests' conventions. Its
options are the collective job's fields (:class:`commodel.pricing.collective.CollectiveJob`), with
the sizes given as a SPEC (one, a list or a doubling range)."""

from __future__ import annotations

import inspect
from typing import Annotated

import numpy as np
import typer

from commodel.cli.root import JSON_FLAG, app, flag, job_options
from commodel.comm.calls import COLUMNS, ELEMENT_BYTES, least_size, resolve_layout, run_columns, too_small
from commodel.errors import CommodelError
from commodel.pricing.collective import CollectiveJob, cluster_and_fabric
from commodel.pricing.job import make_job
from commodel.report.collective_table import nccl_tests_table
from commodel.report.frames import to_json
from commodel.report.tables import band_note
from commodel.units import parse_sizes


def whole_elements(sizes: np.ndarray, op: str = "allreduce", ranks: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(The sizes in whole elements, as nccl-tests runs them (``count = size / 4``, the size it prints
    ``4 count``: 7 B runs as 4 B), the sizes left out): a size below one element is an error; for a
    collective that slices the buffer over its ``ranks``, a size below one element per rank
    (:func:`~commodel.comm.calls.least_size`) is a run of no bytes, left out (an error where it is
    every size asked for)."""
    small = sizes[sizes < ELEMENT_BYTES]
    if small.size:
        raise CommodelError(too_small(op, small[0], 1))  # below one element whatever the ranks
    empty = sizes < least_size(op, ranks)
    if empty.all():
        raise CommodelError(too_small(op, sizes[0], ranks))
    return np.unique(sizes[~empty] // ELEMENT_BYTES * ELEMENT_BYTES), np.unique(sizes[empty])


def collective(
    op: str,
    size: str,
    as_json: bool = False,
    as_csv: bool = False,
    uncertainty: bool = False,
    **values: object,
) -> None:
    """Time, algbw and busbw of a collective over a range of sizes (nccl-tests conventions)."""
    if as_json and as_csv:
        raise CommodelError("--json and --csv are two output formats: choose one")
    sizes = parse_sizes(size)
    job = make_job(CollectiveJob, op=op, size_bytes=float(sizes[0]), **values)
    ranks, _, _ = resolve_layout(cluster_and_fabric(job.model_dump())[0], job.gpus)
    sizes, left_out = whole_elements(sizes, job.op, ranks)

    def priced() -> dict:
        """The collective on the hardware database in use (a Monte Carlo draw's, for the bands)."""
        where, fab = cluster_and_fabric(job.model_dump())
        return run_columns(
            job.op, where, sizes, job.gpus, job.algo, job.protocol, job.library, job.channels, fab
        )

    columns = priced()
    if not (uncertainty or as_json or as_csv):  # the table needs no DataFrame (pandas: 0.2 s to import)
        typer.echo(nccl_tests_table(columns, job.system))
        if left_out.size:
            typer.echo(
                f"# {', '.join(f'{n:g} B' for n in left_out)} left out: less than one {ELEMENT_BYTES}-byte "
                f"element per rank of {ranks}, which nccl-tests runs as 0 bytes"
            )
        return
    import pandas as pd  # slow: pandas (0.2 s), for the outputs that are a DataFrame

    def frame_of(table: dict) -> pd.DataFrame:
        return pd.DataFrame(table, columns=COLUMNS)

    frame = frame_of(columns)
    if uncertainty:
        from commodel.validate.bands import table_bands  # optional: reads the validation table

        frame = table_bands(
            "collective", frame, lambda: frame_of(priced()), job.system, "time_s", ("busbw_GBps",)
        )
    if as_json:
        typer.echo(to_json(frame))
    elif as_csv:
        typer.echo(frame.to_csv(index=False), nl=False)
    else:
        typer.echo(band_note(frame, f"{frame.size_bytes.iloc[-1]:.0f} B", "busbw_GBps", "busbw", "GB/s"))
        typer.echo(nccl_tests_table(frame, job.system))


collective.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
    inspect.Parameter("op", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[str, typer.Argument(
        help=CollectiveJob.model_fields["op"].description)]),
    inspect.Parameter("size", inspect.Parameter.KEYWORD_ONLY, default="8B:8GiB", annotation=Annotated[str, typer.Option(
        help="One size, a list (8,1MiB) or a doubling range (8B:8GiB).")]),
    *job_options(CollectiveJob, skip=("op", "size_bytes")),
    JSON_FLAG,
    flag("as_csv", "--csv", "Print CSV instead of a table."),
    flag("uncertainty", "--uncertainty", "Add p10-p90 bands from the collectives' validation errors."),
])  # fmt: skip
app.command("collective")(collective)
