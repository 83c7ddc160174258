"""``commodel train`` and ``commodel serve``: their options are the job declarations' fields
(:mod:`commodel.pricing.jobs`), one option per field with its help text and default."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Annotated

import typer

from commodel.cli.root import app
from commodel.pricing.jobs import Job, ServingJob, TrainingJob
from commodel.pricing.run import serve as run_serve
from commodel.pricing.run import train as run_train
from commodel.report.tables import band_lines, iteration_text, kernel_text, serving_table, training_table


def _job_options(schema: type[Job]) -> list[inspect.Parameter]:
    """Typer options for every field of a job declaration: one option per field, its help text, its
    default (required where the declaration has none), flags for booleans."""
    params = []
    for name, field in schema.model_fields.items():
        flag = f"--{name.replace('_', '-')}"
        if field.annotation is bool:
            names = (f"{flag}/--no-{flag[2:]}",) if field.default else (flag,)
            option = typer.Option(*names, help=field.description)
        else:
            option = typer.Option(flag, help=field.description, show_default=field.default is not None)
        default = inspect.Parameter.empty if field.is_required() else field.default
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=Annotated[field.annotation, option],
            )
        )
    return params


def _flag(name: str, option: str, help: str) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=False,
                             annotation=Annotated[bool, typer.Option(option, help=help)])  # fmt: skip


def _job_result(kind: str, run: Callable[..., dict], tables: tuple[Callable, Callable], options: dict,
                values: dict) -> None:  # fmt: skip
    """Print a job command's result (``run`` on the job ``values``): JSON, or its table with its bands
    and, with ``--kernels``, its kernel table."""
    as_json, uncertainty, kernels = (options.pop(k) for k in ("as_json", "uncertainty", "kernels"))
    result = run(kernels=kernels, **options, **values)
    if uncertainty:
        from commodel.validate.bands import job_bands  # optional: reads the validation table (pandas)

        result = job_bands(kind, result, lambda: run(**values), values)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    table, kernel_table = tables
    typer.echo(table(result) + band_lines(result))
    if kernels:
        typer.echo("\n" + kernel_table(result["kernels"]))


def train(as_json: bool = False, uncertainty: bool = False, kernels: bool = False, **values: object) -> None:
    """Time, throughput, memory, power, energy and the breakdown of one training step."""
    options = {"as_json": as_json, "uncertainty": uncertainty, "kernels": kernels, "advise": True}
    _job_result("training", run_train, (training_table, kernel_text), options, values)


def serve(as_json: bool = False, uncertainty: bool = False, kernels: bool = False, **values: object) -> None:
    """Serving: time to first token and per output token, throughput, KV cache, power and cost per token."""
    options = {"as_json": as_json, "uncertainty": uncertainty, "kernels": kernels}
    _job_result("serving", run_serve, (serving_table, iteration_text), options, values)


for _name, _command, _schema, _kernels in (
    ("train", train, TrainingJob, "for one micro-batch"),
    ("serve", serve, ServingJob, "in each kind of iteration"),
):
    _command.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        *_job_options(_schema),
        _flag("as_json", "--json", "Print JSON instead of a table."),
        _flag("uncertainty", "--uncertainty", "Add a p10-p90 band from the model class's validation errors."),
        _flag("kernels", "--kernels", f"Add one layer's kernels {_kernels}: shape, roofline bound, TFLOP/s, time."),
    ])  # fmt: skip
    app.command(_name)(_command)
