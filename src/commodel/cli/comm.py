"""``commodel comm``: who drives a message, scheme by scheme (``schemes``), and a MoE layer's
dispatch and combine as DeepEP runs them (``dispatch``)."""

from __future__ import annotations

import inspect
import json
from typing import Annotated

import typer

from commodel.cli.root import JSON_FLAG, JsonFlag, comm_app, flag, job_options
from commodel.comm.calls import require_held
from commodel.comm.initiation import check_scheme, path_of, scheme_table
from commodel.hardware import cluster
from commodel.pricing.dispatch import DispatchJob, dispatch_rows, price_dispatch
from commodel.pricing.job import make_job
from commodel.report.frames import plain_table, to_json
from commodel.report.tables import band_note, scheme_text
from commodel.units import parse_counts, parse_sizes


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
    pair = cluster(system, 2)
    path, sizes = path_of(pair, scope), parse_sizes(size)
    if scheme:
        check_scheme(scheme, path)
    require_held(pair, max(sizes), "a message's sender")
    records = [r for r in scheme_table(path, sizes) if r["scheme"] == scheme or not scheme]
    typer.echo(json.dumps(records, indent=2) if as_json else scheme_text(f"{system} ({scope})", records))


def comm_dispatch(tokens: str, as_json: bool = False, uncertainty: bool = False, **values: object) -> None:
    """A MoE layer's dispatch and combine per GPU as DeepEP's kernels run them: each call's time, what
    binds it, and the NVLink and RDMA bandwidths DeepEP's tests print."""
    counts = parse_counts(tokens, "--tokens")
    job = make_job(DispatchJob, tokens=float(counts[0]), **values)
    shared = ", shared send queues" if job.shared_queues else ""
    head = [
        f"# DeepEP {job.mode} dispatch and combine of {job.model} on {job.ep} {job.system} GPUs, {job.scheme}{shared}",
        "# times in us; nvl_GBps and rdma_GBps as DeepEP's tests count them",
    ]  # fmt: skip
    if not (uncertainty or as_json):  # the table needs no DataFrame (pandas: 0.2 s to import)
        rows = [row | {"tokens": int(row["tokens"])} for row in dispatch_rows(job, counts)]
        typer.echo("\n".join([*head, plain_table(rows, "{:.4g}")]))
        return
    frame = price_dispatch(job, counts)
    shown = list(frame.columns)  # the bands go to --json only
    if uncertainty:
        from commodel.validate.bands import table_bands  # optional: reads the validation table

        speeds = ("nvl_GBps", "rdma_GBps")
        frame = table_bands(
            "dispatch", frame, lambda: price_dispatch(job, counts), job.system, "time_us", speeds
        )
    if as_json:
        typer.echo(to_json(frame))
        return
    last = frame.iloc[-1]
    lines = [
        *head,
        band_note(frame, f"{last.tokens:.0f} tokens' {last.call}", "time_us", "time", "us"),
        plain_table(frame[shown].assign(tokens=frame.tokens.astype(int)), "{:.4g}"),
    ]
    typer.echo("\n".join(lines))


comm_dispatch.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
    inspect.Parameter("tokens", inspect.Parameter.KEYWORD_ONLY, default="128", annotation=Annotated[str, typer.Option(
        help="Tokens per GPU per call: one count, a list (128,4096) or a doubling range (1:4096).")]),
    *job_options(DispatchJob, skip=("tokens",)),
    JSON_FLAG,
    flag("uncertainty", "--uncertainty", "Add p10-p90 bands from the DeepEP rows' validation errors and the "
         "system's uncertain numbers."),
])  # fmt: skip
comm_app.command("dispatch")(comm_dispatch)
