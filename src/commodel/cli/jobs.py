"""``commodel train`` and ``commodel serve``: their options are the job declarations' fields
(:mod:`commodel.pricing.training_job`, :mod:`commodel.pricing.serving_job`), one option per field with its help text and default."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Annotated

import typer

from commodel.cli.root import JSON_FLAG, PanelCommand, app, flag, job_options
from commodel.errors import CommodelError
from commodel.pricing.run import MAX_MICRO_BATCH
from commodel.pricing.run import serve as run_serve
from commodel.pricing.run import train as run_train
from commodel.pricing.serving_job import ServingJob
from commodel.pricing.training_job import TrainingJob
from commodel.report.serving_table import iteration_text, serving_table
from commodel.report.tables import band_lines, kernel_text, training_table


def _job_result(kind: str, run: Callable[..., dict], tables: tuple[Callable, Callable], options: dict,
                values: dict) -> None:  # fmt: skip
    """Print a job command's result (``run`` on the job ``values``): JSON, or its table with its bands
    and, with ``--kernels``, its kernel table."""
    as_json, uncertainty, kernels = (options.pop(k) for k in ("as_json", "uncertainty", "kernels"))
    result = run(kernels=kernels, **options, **values)
    if uncertainty:
        from commodel.validate.bands import job_bands  # optional: reads the validation table (pandas)

        result = job_bands(kind, result, lambda **changes: run(**{**values, **changes}), values)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    table, kernel_table = tables
    typer.echo(table(result) + band_lines(result))
    if kernels:
        typer.echo("\n" + kernel_table(result))


def train(as_json: bool = False, uncertainty: bool = False, kernels: bool = False, **values: object) -> None:
    """Time, throughput, memory, power, energy and the breakdown of one training step."""
    options = {"as_json": as_json, "uncertainty": uncertainty, "kernels": kernels, "advise": True}
    values["micro_batch"] = _micro_batch(str(values["micro_batch"]))
    _job_result("training", run_train, (training_table, kernel_text), options, values)


def _micro_batch(text: str) -> int | str:
    """``--micro-batch``: a whole number, or max (the largest that fits)."""
    if text == MAX_MICRO_BATCH:
        return text
    try:
        return int(text)
    except ValueError:
        raise CommodelError(f"--micro-batch: a whole number or {MAX_MICRO_BATCH}, got '{text}'") from None


def serve(as_json: bool = False, uncertainty: bool = False, kernels: bool = False, **values: object) -> None:
    """Serving: time to first token and per output token, throughput, KV cache, power and cost per token."""
    options = {"as_json": as_json, "uncertainty": uncertainty, "kernels": kernels}
    _job_result("serving", run_serve, (serving_table, iteration_text), options, values)


#: ``--micro-batch`` takes a number or max, so the CLI reads it as text.
MICRO_BATCH = inspect.Parameter(
    "micro_batch", inspect.Parameter.KEYWORD_ONLY, default=TrainingJob.model_fields["micro_batch"].default,
    annotation=Annotated[str, typer.Option("--micro-batch", help="Sequences per micro-batch, or max: the largest that fits.")],
)  # fmt: skip

for _name, _command, _schema, _kernels in (
    ("train", train, TrainingJob, "for one micro-batch"),
    ("serve", serve, ServingJob, "in each kind of iteration"),
):
    _command.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        *(MICRO_BATCH if p.name == "micro_batch" else p for p in job_options(_schema)),
        JSON_FLAG,
        flag("uncertainty", "--uncertainty", "Add a p10-p90 band from the model class's validation errors."),
        flag("kernels", "--kernels", f"Add one layer's kernels {_kernels}: shape, roofline bound, TFLOP/s, time."),
    ])  # fmt: skip
    app.command(_name, cls=PanelCommand)(_command)
