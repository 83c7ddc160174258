"""``commodel overlap``: one GEMM beside one collective under each overlap strategy. Its options are
the overlap job's fields (:class:`commodel.pricing.overlap.OverlapJob`), with the collective's size
as a size (``96MiB``) and ``--strategy all`` (the default) for every strategy side by side."""

from __future__ import annotations

import inspect
import json
from typing import Annotated

import typer

from commodel.cli.root import JSON_FLAG, app, job_options
from commodel.errors import CommodelError, unknown
from commodel.overlap.pair import PAIR_STRATEGIES
from commodel.pricing.job import make_job
from commodel.pricing.overlap import OverlapJob, price_overlap
from commodel.report.overlap import overlap_text
from commodel.units import parse_sizes


def overlap(size: str = "256MiB", strategy: str = "all", as_json: bool = False, **values: object) -> None:
    """A GEMM beside a collective: each side alone and together, the pair's time and the share of
    the ideal gain each strategy reaches (shared SMs, HBM and launch order)."""
    if strategy != "all" and strategy not in PAIR_STRATEGIES:
        raise unknown("overlap strategy", strategy, ("all", *PAIR_STRATEGIES))
    sizes = parse_sizes(size)
    if len(sizes) != 1:
        raise CommodelError(f"--size takes one size, got {len(sizes)} ({size})")
    strategies = PAIR_STRATEGIES if strategy == "all" else (strategy,)
    records: dict[str, dict | str] = {}
    for name in strategies:
        job = make_job(OverlapJob, size_bytes=float(sizes[0]), strategy=name, **values)
        try:
            records[name] = price_overlap(job)
        except CommodelError as exc:
            records[name] = str(exc)
    if all(isinstance(r, str) for r in records.values()):  # the job, not a strategy, cannot run
        raise CommodelError(next(iter(records.values())))
    fields = job.model_dump(exclude={"strategy"})
    if as_json:
        typer.echo(json.dumps(fields | {"strategies": records}, indent=2))
    else:
        typer.echo(overlap_text(fields, records))


overlap.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
    inspect.Parameter("size", inspect.Parameter.KEYWORD_ONLY, default="256MiB", annotation=Annotated[str, typer.Option(
        help="Bytes per collective call (nccl-tests' size), e.g. 96MiB.")]),
    inspect.Parameter("strategy", inspect.Parameter.KEYWORD_ONLY, default="all", annotation=Annotated[str, typer.Option(
        help="all, or one of " + ", ".join(PAIR_STRATEGIES) + ".")]),
    *job_options(OverlapJob, skip=("size_bytes", "strategy")),
    JSON_FLAG,
])  # fmt: skip
app.command("overlap")(overlap)
