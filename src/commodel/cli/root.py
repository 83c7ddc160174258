"""The root Typer app, its command groups and the options several commands share. The commands
themselves live in the other modules of :mod:`commodel.cli` and register on these apps when imported."""

from __future__ import annotations

import inspect
import os
import shlex
from pathlib import Path
from typing import Annotated

import click
import typer
from typer.core import TyperCommand

from commodel.errors import CommodelError
from commodel.hardware.loader import OVERLAY_ENV, default_db
from commodel.pricing.job import Job


def _typer(help: str) -> typer.Typer:
    """A command group: plain help (every option's whole name, one per line, no box to cut it), and
    its help when called without a command."""
    return typer.Typer(help=help, no_args_is_help=True, rich_markup_mode=None)


hw_app = _typer("Browse the hardware database.")
roofline_app = _typer("Roofline model of kernels on one GPU.")
comm_app = _typer("Who drives communication: GPU-centric initiation schemes, and DeepEP dispatch over them.")
study_app = _typer("Published systems modelled as studies.")
calibrate_app = _typer("Fit a system's constants to your own measurements.")
model_app = _typer("The models: shipped ones and your own files (commodel TOML, Hugging Face config.json).")
#: The command groups, in the order the root's help lists them (after the commands).
GROUPS = {"hw": hw_app, "model": model_app, "roofline": roofline_app, "comm": comm_app, "study": study_app,
          "calibrate": calibrate_app}  # fmt: skip


def options(
    hardware: Annotated[
        list[Path] | None,
        typer.Option(
            "--hardware",
            help="A hardware overlay (TOML, e.g. from 'commodel calibrate') or a hardware_db-like folder "
            "applied over the built-in records; repeatable.",
        ),
    ] = None,
) -> None:
    """commodel: traceable models of communication and computation in multi-GPU systems."""
    if hardware:
        os.environ[OVERLAY_ENV] = os.pathsep.join(str(path) for path in hardware)
        default_db()  # a bad overlay fails here, before any work


def root_app() -> typer.Typer:
    """A root app: its settings, the ``--hardware`` option and the command groups; the commands
    register on :data:`app`, one built this way."""
    root = typer.Typer(
        help=options.__doc__,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        rich_markup_mode=None,
    )
    root.callback()(options)
    for name, group in GROUPS.items():
        root.add_typer(group, name=name)
    return root


app = root_app()


JSON_HELP = "Print JSON instead of a table."
JsonFlag = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
ExecutorOption = Annotated[str, typer.Option(help="local, or dask (a LocalCluster unless --scheduler).")]
SchedulerOption = Annotated[str | None, typer.Option(help="Dask scheduler address.")]


def check_scheduler(executor: str, scheduler: str | None) -> None:
    """A scheduler address only beside the Dask executor."""
    if scheduler and executor != "dask":
        raise CommodelError("--scheduler is a Dask scheduler address: use it with --executor dask")


#: The help sections of a job command's options, in order, and the fields each holds; every other
#: option (output formats, flags of the command itself) goes in the last.
PANEL_FIELDS = {
    "Model and system": "model system gpus nodes fabric pod_gpus oversubscription trays_per_rack power_limit transport nics "
    "prefill_gpus phase",
    "Layout": "tp pp dp cp ep etp attention_dp vpp schedule pipeline_layout first_stage_layers last_stage_layers "
    "ends_as_layers mtp_layers stage_layers global_batch micro_batch seq",
    "Precision": "dtype kv_dtype fp8_param_gather fp8_activation_input grad_reduce_in_fp32 bf16_moments",
    "MoE": "expert_load capacity_factor ep_sms dispatcher fp8_dispatch permute_fusion ep_overlap",
    "Schedule and overlap": "overlap tp_overlap sequence_parallel attention elementwise cuda_graphs",
    "Memory": "recompute recompute_layers recompute_modules offload_layers offload zero reshard_after_forward "
    "kv_fraction kv_reserve",
    "Serving load": "prompt output prompt_cv output_cv batch slo_ttft slo_tpot max_batch_size max_num_tokens "
    "host_schedule",
    "Failures": "failures mtbf_gpu_hours checkpoint checkpoint_interval_min storage_GBps storage_share "
    "storage_node_GBps restart_min spares repair_hours",
    "Energy and cost": "pue carbon_g_per_kWh price_per_gpu_hour train_tokens",
    "Output and other options": "",
}
PANEL_ORDER = tuple(PANEL_FIELDS)
PANELS = {name: title for title, names in PANEL_FIELDS.items() for name in names.split()}


class PanelCommand(TyperCommand):
    """A command whose plain help lists its options in sections (:data:`PANELS` by option name, the
    rest under "Output and other options"), each option's whole name on its own line: readable at
    80 columns."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {title: [] for title in PANEL_ORDER}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                sections[PANELS.get(param.name or "", PANEL_ORDER[-1])].append(record)
        for title, records in sections.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


def job_options(schema: type[Job], skip: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """Typer options for the fields of a job declaration (all but ``skip``): one option per field, its
    help text, its default (required where the declaration has none), flags for booleans."""
    params = []
    for name, field in schema.model_fields.items():
        if name in skip:
            continue
        option_name = f"--{name.replace('_', '-')}"
        if field.annotation is bool:
            names = (f"{option_name}/--no-{option_name[2:]}",) if field.default else (option_name,)
            option = typer.Option(*names, help=field.description)
        else:
            option = typer.Option(option_name, help=field.description, show_default=field.default is not None)
        default = inspect.Parameter.empty if field.is_required() else field.default
        annotation = Annotated[field.annotation, option]
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        )
    return params


def job_command(command: str, job: Job, skip: tuple[str, ...] = ()) -> str:
    """The command line that runs ``job``: ``commodel COMMAND`` with an option for each field (but
    ``skip``) set away from its default, named as :func:`job_options` names them (flags for booleans)."""
    parts = ["commodel", command]
    for name, field in type(job).model_fields.items():
        value = getattr(job, name)
        if name in skip or (not field.is_required() and value == field.default):
            continue
        option = f"--{name.replace('_', '-')}"
        if field.annotation is bool:
            parts.append(option if value else f"--no-{option[2:]}")
        else:
            parts += [option, shlex.quote(f"{value:g}" if isinstance(value, float) else str(value))]
    return " ".join(parts)


def flag(name: str, option: str, help: str) -> inspect.Parameter:
    """A keyword-only flag (off by default) for a command built from a declaration."""
    annotation = Annotated[bool, typer.Option(option, help=help)]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=False, annotation=annotation)


#: ``--json`` for a command built from a declaration (:data:`JsonFlag` for one written by hand).
JSON_FLAG = flag("as_json", "--json", JSON_HELP)
