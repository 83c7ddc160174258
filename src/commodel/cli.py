"""Command-line interface: parse, call the library, print. No model logic here.

Every user error (unknown name, malformed size, impossible layout) is a :class:`CommodelError`,
printed as one ``error:`` line on stderr with exit code 2.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from commodel.errors import CommodelError


def _flags_without_metavar() -> None:
    """typer 0.29 prints ``<bool>`` after a flag in help, as if it took a value; a flag takes none."""
    option = getattr(getattr(typer, "core", None), "TyperOption", None)
    if option is None or not hasattr(option, "display_type_rich"):
        return
    shown = option.display_type_rich

    def display_type_rich(self: object, ctx: object) -> str | None:
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    option.display_type_rich = display_type_rich


_flags_without_metavar()

app = typer.Typer(
    help="commodel: traceable models of communication and computation in multi-GPU systems.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
hw_app = typer.Typer(help="Browse the hardware database.", no_args_is_help=True)
roofline_app = typer.Typer(help="Roofline model of kernels on one GPU.", no_args_is_help=True)
app.add_typer(hw_app, name="hw")
app.add_typer(roofline_app, name="roofline")
comm_app = typer.Typer(help="Who drives communication: GPU-centric initiation schemes.", no_args_is_help=True)
app.add_typer(comm_app, name="comm")
study_app = typer.Typer(help="Published systems modelled as studies.", no_args_is_help=True)
app.add_typer(study_app, name="study")
calibrate_app = typer.Typer(help="Fit a system's constants to your own measurements.", no_args_is_help=True)
app.add_typer(calibrate_app, name="calibrate")


@app.callback()
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
        import os

        from commodel.hardware.loader import OVERLAY_ENV, default_db

        os.environ[OVERLAY_ENV] = os.pathsep.join(str(path) for path in hardware)
        default_db()  # a bad overlay fails here, before any work


class Kind(StrEnum):
    gpu = "gpu"
    link = "link"
    system = "system"


JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ExecutorOption = Annotated[str, typer.Option(help="local, or dask (a LocalCluster unless --scheduler).")]
SchedulerOption = Annotated[str | None, typer.Option(help="Dask scheduler address.")]


def _check_scheduler(executor: str, scheduler: str | None) -> None:
    if scheduler and executor != "dask":
        raise CommodelError("--scheduler is a Dask scheduler address: use it with --executor dask")


@app.command()
def sweep(
    spec: Annotated[
        Path | None, typer.Argument(help="Sweep specification (TOML); default: the built-in study.")
    ] = None,
    output: Annotated[
        str | None, typer.Option("-o", "--output", help="Output folder (default: sweep-NAME).")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue an interrupted sweep from its finished chunks.")
    ] = False,
    executor: ExecutorOption = "local",
    scheduler: SchedulerOption = None,
    csv: Annotated[bool, typer.Option("--csv", help="Also write results.csv.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", help="No progress bar; print only the summary line.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace another specification's results in the output folder.")
    ] = False,
    max_points: Annotated[
        int,
        typer.Option("--max-points", min=1, help="Refuse spaces larger than this before any work starts."),
    ] = 50_000_000,
) -> None:
    """Explore a design space and write its results, Pareto front, plot, summary and report."""
    from commodel.explore.spec import load_spec
    from commodel.explore.sweep import run_sweep
    from commodel.report.sweep_report import write_reports
    from commodel.resources import resource_dir
    from commodel.validate import standing
    from commodel.validate.bands import cached_validation_table

    spec_path = spec or resource_dir("studies") / "default" / "study.toml"
    loaded = load_spec(spec_path)
    _check_scheduler(executor, scheduler)
    out = f"sweep-{loaded.study.name}" if output is None else output
    try:
        summary = run_sweep(
            loaded, out, resume=resume, executor=executor, scheduler=scheduler, write_csv=csv, progress=not quiet,
            force=force, max_points=max_points,
            reporter=lambda *done: write_reports(*done, standing=standing(cached_validation_table())),
        )  # fmt: skip
    except KeyboardInterrupt:
        again = " ".join(["commodel sweep", str(spec_path), "-o", out, "--resume"])
        typer.echo(f"interrupted: finished chunks are kept; continue with: {again}", err=True)
        raise typer.Exit(130) from None
    typer.echo(
        f"{summary['study']}: {summary['points']:,} points, {summary['valid']:,} valid, {summary['feasible']:,} feasible, "
        f"{summary['pareto']:,} Pareto-optimal, hypervolume {summary['hypervolume']:.4f}, {summary['elapsed_s']:.1f} s -> {out}/"
    )
    if summary["valid"] == 0:
        from commodel.explore.evaluation import commonest_problem

        found = commonest_problem(loaded)
        if found:
            typer.echo(
                f"no design is valid; the commonest reason ({found[1]} of the first {found[2]}): {found[0]}"
            )
    if not quiet:
        for name, row in summary["best"].items():
            typer.echo(
                f"  best {name}: {row[name]:.4g}  ({', '.join(f'{k}={row[k]}' for k in loaded.variables)})"
            )
        if "robust_pareto" in summary:
            typer.echo(f"  robust ({loaded.uncertainty.robust}) front: {summary['robust_pareto']} designs; "
                       f"{summary['off_robust_front']} of the nominal front drop off it under uncertainty")  # fmt: skip


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
    from commodel.comm.collectives import run
    from commodel.comm.fabric import fabric_of
    from commodel.hardware import cluster
    from commodel.report.tables import nccl_tests_table, to_json
    from commodel.units import parse_sizes

    if nodes < 1:
        raise CommodelError(f"--nodes must be at least 1, got {nodes}")
    sizes = parse_sizes(size)

    def priced() -> object:
        """The collective on the hardware database in use (a Monte Carlo draw's, below)."""
        where = cluster(system, nodes, partition=partition)
        fab = fabric_of(where, sharp=sharp, launch=launch, nvls=nvls, gpus_per_process=gpus_per_process)
        return run(op, where, sizes, gpus, algo, protocol, library, channels, fab)

    frame = priced()
    if uncertainty:
        from commodel.validate.bands import band, parameter_bands

        b = band("collective")
        frame["time_s_p10"], frame["time_s_p90"] = b.time(frame.time_s)
        frame["busbw_GBps_p10"], frame["busbw_GBps_p90"] = b.speed(frame.busbw_GBps)
        params = parameter_bands(priced, [system], ("time_s", "busbw_GBps"))
        frame = frame.assign(**{k: v for k, v in params.items() if k != "params_source"})
        if not (as_json or as_csv):
            typer.echo(f"# band p10-p90 from {b.source}: time x{1 / b.high:.3f} to x{1 / b.low:.3f}")
            last = frame.iloc[-1]
            typer.echo(f"# band p10-p90 from {params['params_source']}: at {last.size_bytes:.0f} B busbw "
                       f"{last.busbw_GBps_params_p10:.4g} to {last.busbw_GBps_params_p90:.4g} GB/s"
                       + (f", driven by {last.busbw_GBps_params_driver}" if "busbw_GBps_params_driver" in frame else "")
                       + " (every size: --json or --csv)")  # fmt: skip
    if as_json:
        typer.echo(to_json(frame))
    elif as_csv:
        typer.echo(frame.to_csv(index=False), nl=False)
    else:
        typer.echo(nccl_tests_table(frame, system))


@calibrate_app.command("nccl-tests")
def calibrate_nccl_tests(
    logs: Annotated[list[Path], typer.Argument(help="nccl-tests output files (all_reduce_perf, ...).")],
    system: Annotated[str, typer.Option(help="The system the logs ran on (hardware database name).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Overlay file to write (TOML).")],
    gpus: Annotated[int | None, typer.Option(help="GPUs the logs ran on (default: from the logs).")] = None,
    nodes: Annotated[int | None, typer.Option(help="Nodes the logs ran on (default: from the logs).")] = None,
    launch: Annotated[str, typer.Option(help="stream, or graph for nccl-tests -G runs.")] = "stream",
    gpus_per_process: Annotated[int, typer.Option(help="nccl-tests -g of the runs.")] = 1,
    algo: Annotated[str, typer.Option(help="auto, or the NCCL_ALGO the runs forced.")] = "auto",
) -> None:
    """Fit the system's calibratable constants to nccl-tests logs and write a hardware overlay."""
    import tomli_w

    from commodel.comm.calibrate import calibrate
    from commodel.comm.nccl_tests import read
    from commodel.hardware import cluster
    from commodel.io import write_text
    from commodel.report.tables import plain_table

    parsed = [read(path) for path in logs]
    fit = calibrate(parsed, system, gpus, nodes, launch, gpus_per_process, algo)
    typer.echo(f"Rows ({len(fit.rows)}), signed error of the model's time before and after the fit (%):")
    typer.echo(plain_table(fit.rows.assign(time_us=fit.rows.time_s * 1e6).drop(columns="time_s")))
    typer.echo("\nParameters:")
    for name, value in fit.fitted.items():
        prior = fit.prior[name]
        shown = "not determined by these logs: kept its prior" if value is None else f"fitted {value:.4g}"
        typer.echo(f"  {name:<28} prior {prior:.4g}  {shown}")
    overlay = fit.overlay(cluster(system), parsed)
    if not overlay:
        typer.echo("\nnothing these logs determine: no overlay written")
        return
    header = f"# commodel hardware overlay for {system}: apply with commodel --hardware {output} ...\n"
    write_text(output, header + tomli_w.dumps(overlay))
    typer.echo(f"\nwrote {output} (use: commodel --hardware {output} collective ... --system {system})")


def _job_options(schema: type) -> list[inspect.Parameter]:
    """Typer options for every field of a job declaration (:mod:`commodel.pricing.jobs`): one option per field,
    its help text, its default (required where the declaration has none), flags for booleans."""
    params = []
    for name, field in schema.model_fields.items():
        flag = f"--{name.replace('_', '-')}"
        annotation = field.annotation
        if annotation is bool:
            option = typer.Option(
                f"{flag}/--no-{flag[2:]}" if field.default else flag, help=field.description
            )
        else:
            option = typer.Option(flag, help=field.description, show_default=field.default is not None)
        default = inspect.Parameter.empty if field.is_required() else field.default
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=Annotated[annotation, option],
            )
        )
    return params


#: Predictions each job command puts a band around: (model class, speeds, times).
BANDED = {
    "train": ("training", ("tokens_per_s",), ("step_time_s", "time_to_train_days")),
    "serve": ("serving", ("output_tokens_per_s",), ("ttft_s", "tpot_s")),
}


def _banded(command: str, result: dict, uncertainty: bool, run: Callable[[], dict], values: dict) -> dict:
    """``result`` with the model class's band and the band of the hardware's uncertain numbers."""
    if not uncertainty:
        return result
    from commodel.validate.bands import parameter_bands, with_class_bands

    kind, speeds, times = BANDED[command]
    names = [name for v in values.values() if isinstance(v, str) for name in re.split(r"[,:]", v)]
    return {**with_class_bands(result, kind, speeds, times), **parameter_bands(run, names, speeds + times)}


def _band_lines(result: dict) -> str:
    """The bands of a result for a person, after its table."""
    if "band_source" not in result:
        return ""
    pairs = [k[: -len("_p10")] for k in result if k.endswith("_p10") and "_params_" not in k]
    text = "; ".join(f"{k} {result[k + '_p10']:.4g} to {result[k + '_p90']:.4g}" for k in pairs)
    params = "; ".join(
        f"{k} {result[k + '_params_p10']:.4g} to {result[k + '_params_p90']:.4g}"
        + (f", driven by {result[k + '_params_driver']}" if k + "_params_driver" in result else "")
        for k in pairs
    )
    return (f"\n  band (p10-p90, {result['band_source']}): {text}"
            f"\n  band (p10-p90, {result['params_source']}): {params}")  # fmt: skip


def _job_result(
    command: str,
    run: Callable[..., dict],
    table: Callable[[dict], str],
    kernel_table: Callable[[list], str],
    as_json: bool,
    uncertainty: bool,
    kernels: bool,
    values: dict,
    **options: object,
) -> None:
    """Print a job command's result (``run`` on the job ``values`` with ``options``): JSON, or its
    table with its bands and, with ``kernels``, its kernel table."""
    result = _banded(
        command, run(kernels=kernels, **options, **values), uncertainty, lambda: run(**values), values
    )
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(table(result) + _band_lines(result))
    if kernels:
        typer.echo("\n" + kernel_table(result["kernels"]))


def train(as_json: bool = False, uncertainty: bool = False, kernels: bool = False, **values: object) -> None:
    """Time, throughput, memory, power, energy and the breakdown of one training step."""
    from commodel.pricing.run import train as run_train
    from commodel.report.tables import kernel_text, training_table

    _job_result(
        "train", run_train, training_table, kernel_text, as_json, uncertainty, kernels, values, advise=True
    )


def serve(as_json: bool = False, uncertainty: bool = False, kernels: bool = False, **values: object) -> None:
    """Serving: time to first token and per output token, throughput, KV cache, power and cost per token."""
    from commodel.pricing.run import serve as run_serve
    from commodel.report.tables import iteration_text, serving_table

    _job_result("serve", run_serve, serving_table, iteration_text, as_json, uncertainty, kernels, values)


def _register_job_commands() -> None:
    """``train`` and ``serve``, their options generated from the job declarations."""
    from commodel.pricing.jobs import ServingJob, TrainingJob

    flags = [
        inspect.Parameter(
            "as_json", inspect.Parameter.KEYWORD_ONLY, default=False,
            annotation=Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")],
        ),
        inspect.Parameter(
            "uncertainty", inspect.Parameter.KEYWORD_ONLY, default=False,
            annotation=Annotated[bool, typer.Option(
                "--uncertainty", help="Add a p10-p90 band from the model class's validation errors.")],
        ),
    ]  # fmt: skip

    def kernels(what: str) -> inspect.Parameter:
        return inspect.Parameter(
            "kernels", inspect.Parameter.KEYWORD_ONLY, default=False,
            annotation=Annotated[bool, typer.Option(
                "--kernels", help=f"Add one layer's kernels {what}: shape, roofline bound, TFLOP/s, time.")],
        )  # fmt: skip

    for name, command, schema, own in (
        ("train", train, TrainingJob, [kernels("for one micro-batch")]),
        ("serve", serve, ServingJob, [kernels("in each kind of iteration")]),
    ):
        command.__signature__ = inspect.Signature([*_job_options(schema), *flags, *own])  # type: ignore[attr-defined]
        app.command(name)(command)


_register_job_commands()


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
    from commodel.comm.initiation import check_scheme, path_of, scheme_table
    from commodel.hardware import cluster
    from commodel.units import parse_sizes

    path = path_of(cluster(system, 2), scope)
    if scheme:
        check_scheme(scheme, path)
    records = [r for r in scheme_table(path, parse_sizes(size)) if r["scheme"] == scheme or not scheme]
    if as_json:
        typer.echo(json.dumps(records, indent=2))
        return
    from commodel.report.tables import scheme_text

    typer.echo(scheme_text(f"{system} ({scope})", records))


@app.command()
def sensitivity(
    spec: Annotated[Path, typer.Argument(help="A sweep specification (TOML): its variables and objectives.")],
    method: Annotated[str, typer.Option(help="sobol (first-order and total indices) or morris.")] = "sobol",
    samples: Annotated[
        int, typer.Option(min=8, help="Base samples (Saltelli N, or Morris trajectories).")
    ] = 256,
    output: Annotated[str, typer.Option("-o", "--output", help="Folder for sensitivity.csv and .png.")] = "",
    parameters: Annotated[
        bool,
        typer.Option(
            "--parameters",
            help="Also the uncertain numbers of the study's hardware (one evaluation "
            "per point: for small studies).",
        ),
    ] = False,
    executor: ExecutorOption = "local",
    scheduler: SchedulerOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Which variables drive each objective: Sobol indices or Morris effects, estimated by SALib on the
    sweep's own evaluation."""
    from commodel.explore.sensitivity import study_sensitivity
    from commodel.explore.spec import load_spec
    from commodel.io import write_text
    from commodel.report.plots import sensitivity_plot

    loaded = load_spec(spec)
    _check_scheduler(executor, scheduler)
    table = study_sensitivity(loaded, method, samples, loaded.study.seed, executor, scheduler, parameters)
    if output:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "sensitivity.csv", table.to_csv(index=False))
        sensitivity_plot(table, str(out / "sensitivity.png"))
    if as_json:
        typer.echo(table.to_json(orient="records", indent=2))
    else:
        from commodel.report.tables import plain_table

        typer.echo(plain_table(table))


@app.command()
def compare(
    a: Annotated[
        str, typer.Option("--a", help="Design A: field=value pairs (system=dgx-h100,tp=8) or a TOML file.")
    ],
    b: Annotated[str, typer.Option("--b", help="Design B, the same way.")],
    common: Annotated[
        str,
        typer.Option("--common", help="Fields both designs share (model=llama3-70b,global_batch=512,...)."),
    ] = "",
    plot: Annotated[
        str, typer.Option("--plot", help="Also write a stacked-bar image of both breakdowns.")
    ] = "",
    as_json: JsonFlag = False,
) -> None:
    """Two training designs side by side: step time, throughput, MFU, memory, energy and cost, B over A,
    and which part of the step grew or shrank."""
    from commodel.report.compare import compare as run_compare
    from commodel.report.compare import compare_plot, compare_text, parse_design

    shared = parse_design(common, "--common") if common else {}
    result = run_compare(parse_design(a, "--a"), parse_design(b, "--b"), shared)
    if plot:
        compare_plot(result, plot)
    typer.echo(json.dumps(result, indent=2) if as_json else compare_text(result))


@roofline_app.command("gemm")
def roofline_gemm(
    gpu: Annotated[str, typer.Option(help="GPU name from the hardware database.")] = "h100-sxm",
    m: Annotated[int, typer.Option(help="Rows of A and C.")] = 8192,
    n: Annotated[int, typer.Option(help="Columns of B and C.")] = 8192,
    k: Annotated[int, typer.Option(help="Inner dimension.")] = 8192,
    dtype: Annotated[str, typer.Option(help="fp32, tf32, bf16, fp16, fp8.")] = "bf16",
    as_json: JsonFlag = False,
) -> None:
    """Roofline time of one GEMM: time, achieved TFLOP/s and whether it is compute- or memory-bound."""
    from commodel.compute import gemm, kernel_time
    from commodel.hardware import default_db

    kernel = gemm(m, n, k, dtype)
    result = kernel_time(default_db().gpu(gpu), kernel)
    record = {
        "gpu": gpu,
        "m": m,
        "n": n,
        "k": k,
        "dtype": dtype,
        "time_s": float(result.time_s),
        "tflops": float(result.achieved_flops) / 1e12,
        "bound": str(result.bound),
        "intensity_flop_per_byte": float(kernel.intensity),
        "split_k": int(result.split_k),
    }
    if as_json:
        typer.echo(json.dumps(record, indent=2))
    else:
        split = f", split-K {record['split_k']}" if record["split_k"] > 1 else ""
        typer.echo(
            f"GEMM {m}x{n}x{k} {dtype} on {gpu}: {record['time_s'] * 1e6:.1f} us, "
            f"{record['tflops']:.1f} TFLOP/s, {record['bound']}-bound "
            f"(intensity {record['intensity_flop_per_byte']:.0f} FLOP/B{split})"
        )


@roofline_app.command("plot")
def roofline_plot_cmd(
    gpu: Annotated[str, typer.Option(help="GPU name from the hardware database.")] = "h100-sxm",
    output: Annotated[Path, typer.Option("-o", "--output", help="Image file to write.")] = Path(
        "roofline.png"
    ),
    seq: Annotated[int, typer.Option(help="Sequence length of the example attention kernel.")] = 4096,
) -> None:
    """Roofline chart of a GPU with typical training kernels placed on it."""
    from commodel.compute import attention, elementwise, gemm
    from commodel.hardware import default_db
    from commodel.report.plots import roofline_plot

    kernels = {
        "GEMM 8192^3": gemm(8192, 8192, 8192),
        "GEMM 4096x512x4096": gemm(4096, 512, 4096),
        "GEMM 16x8192x8192 (decode)": gemm(16, 8192, 8192),
        f"attention s={seq}": attention(4, 32, seq, 128),
        "elementwise 256M": elementwise(2**28),
    }
    path = roofline_plot(default_db().gpu(gpu), gpu, kernels, output)
    typer.echo(f"wrote {path}")


@hw_app.command("list")
def hw_list(
    kind: Annotated[Kind | None, typer.Option(help="Only this kind of record.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List GPUs, links and systems with their description."""
    from commodel.hardware import default_db

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
    from commodel.hardware import default_db

    kind, record = default_db().find(name)
    if as_json:
        typer.echo(json.dumps({"record": kind, "name": name, **record.model_dump()}, indent=2))
        return
    typer.echo(f"{kind} {name}")
    for line in _describe(record):
        typer.echo(line)


def _describe(record: object, prefix: str = "") -> list[str]:
    """Flatten a record into ``field = value unit  [source]`` lines, values in human units."""
    from pydantic import BaseModel

    from commodel.records import Sourced
    from commodel.units import format_quantity

    items = (
        record.items()
        if isinstance(record, dict)
        else ((k, getattr(record, k)) for k in type(record).model_fields)
    )
    lines = []
    for key, value in items:
        if isinstance(value, Sourced):
            lines.append(f"  {prefix}{key} = {format_quantity(value.value, value.KIND)}  [{value.source}]")
        elif isinstance(value, BaseModel | dict):
            lines.extend(_describe(value, f"{prefix}{key}."))
        elif value is not None:
            lines.append(f"  {prefix}{key} = {value}")
    return lines


@app.command()
def validate(
    as_json: JsonFlag = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the report as Markdown.")] = False,
    parameter_draws: Annotated[
        int,
        typer.Option(
            help="Also price every row on this many draws of the hardware's uncertain numbers and "
            "report how often that band holds the measurement (0: skip; about 1.5 s per draw)."
        ),
    ] = 0,
) -> None:
    """Model vs every published measurement: errors per row, and median/max error per kind."""
    from commodel.report.tables import markdown_table, plain_table, to_json
    from commodel.validate import accuracy_gates, summary, validation_table
    from commodel.validate.bands import coverage_table

    table = validation_table()
    stats = summary(table)
    gates = accuracy_gates(table)
    bands = coverage_table(table)
    if parameter_draws < 0:
        raise CommodelError(f"--parameter-draws must be 0 or more, got {parameter_draws}")
    if parameter_draws == 1:
        raise CommodelError("--parameter-draws needs at least 2 draws to make a band")
    if parameter_draws:
        from commodel.validate.bands import parameter_coverage

        drawn = parameter_coverage(parameter_draws).rename(columns={"inside_pct": "inside_pct (parameters)"})
        bands = bands.merge(drawn[["kind", "inside_pct (parameters)"]], on="kind", how="left")
    if as_json:
        payload = {name: json.loads(to_json(f)) for name, f in (("rows", table), ("summary", stats))}
        typer.echo(
            json.dumps(
                {**payload, "gates": json.loads(to_json(gates)), "band_coverage": json.loads(to_json(bands))},
                indent=2,
            )
        )
        return
    shown = table.drop(columns=["unit", "experts"]).rename(columns={"error_pct": "error_%"})
    render = markdown_table if markdown else plain_table
    sections = [
        ("Per row", shown),
        ("Per kind (absolute error, %)", stats),
        ("Accuracy gates (absolute error, %)", gates),
        ("Uncertainty bands: held-out rows inside their class's band, built without them (%)", bands),
    ]
    for title, frame in sections:
        typer.echo(f"\n## {title}\n" if markdown else f"\n{title}:")
        typer.echo(render(frame))


@study_app.command("list")
def study_list() -> None:
    """The studies commodel ships."""
    from commodel.studies import STUDIES

    for name, (_, description) in STUDIES.items():
        typer.echo(f"{name:<16} {description}")


@study_app.command("run")
def study_run(
    name: Annotated[str, typer.Argument(help="Study name (see: commodel study list).")],
    as_json: JsonFlag = False,
) -> None:
    """Run a study: its claims (paper vs model) and its table."""
    from commodel.report.tables import plain_table
    from commodel.studies import run_study

    result = run_study(name)
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2))
        return
    typer.echo(f"{result.title} ({result.paper})\n\nClaims:")
    for c in result.claims:
        paper = f"{c.paper[0]:g} to {c.paper[1]:g}" if isinstance(c.paper, tuple) else f"{c.paper:g}"
        typer.echo(f"  {c.claim}\n      paper {paper} {c.unit}   model {c.model:.3g} {c.unit}")
    typer.echo("\nTable:")
    typer.echo(plain_table(result.table))
    for note in result.notes:
        typer.echo(f"\n- {note}")


def _parser_errors() -> object:
    """The option parser's exception module (typer vendors click from 0.2x on; older ones use click)."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older typer
        from click import exceptions
    return exceptions


def _with_only(first: list[str]) -> typer.Typer:
    """The app with only the command (or command group) ``first`` names, when it names one: typer
    builds every registered command's options from its signature at each start, a sixth of a
    ``commodel train`` from the shell; with a global option or help first, the whole app."""
    commands = [c for c in app.registered_commands if (c.name or c.callback.__name__) in first]
    groups = [g for g in app.registered_groups if g.name in first]
    if not commands and not groups:
        return app
    lean = copy.copy(app)
    lean.registered_commands, lean.registered_groups = commands, groups
    return lean


def main() -> None:
    """Console entry point: run the app, turning user errors (ours, and the option parser's) into one
    ``error:`` line and exit code 2."""
    errors = _parser_errors()
    try:
        code = _with_only(sys.argv[1:2])(standalone_mode=False)  # an Exit(n) a command raised comes back as n
    except CommodelError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except errors.NoArgsIsHelpError as exc:  # a bare command group: its help, as usual
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except errors.UsageError as exc:
        where = f" ({exc.ctx.command_path})" if exc.ctx else ""
        typer.echo(f"error{where}: {exc.format_message()}; see --help", err=True)
        sys.exit(2)
    except errors.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted: finished sweep chunks are kept; rerun with --resume to continue", err=True)
        sys.exit(130)
    if isinstance(code, int) and code:
        sys.exit(code)
