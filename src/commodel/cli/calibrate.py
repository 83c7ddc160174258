"""``commodel calibrate nccl-tests | train | serve``: a system's constants fit to the user's own logs,
written as a hardware overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import tomli_w
import typer

from commodel.calibrate.collectives import calibrate
from commodel.calibrate.fit import mean_log_error, median_error_pct
from commodel.calibrate.jobs import calibrate_runs, leave_one_out, memory_note
from commodel.calibrate.logs import read_serving, read_training
from commodel.calibrate.measured import MeasuredRun
from commodel.calibrate.nccl_tests import SIGNATURES, read
from commodel.cli.root import calibrate_app
from commodel.errors import CommodelError, pick
from commodel.hardware import cluster, default_db
from commodel.hardware.loader import apply_overlay
from commodel.io import atomic_path, output_file
from commodel.report.frames import plain_table


@calibrate_app.command("nccl-tests")
def calibrate_nccl_tests(
    logs: Annotated[list[Path], typer.Argument(help="nccl-tests output files (all_reduce_perf, ...).")],
    system: Annotated[str, typer.Option(help="The system the logs ran on (hardware database name).")],
    output: Annotated[str, typer.Option("-o", "--output", help="Overlay file to write (TOML).")],
    gpus: Annotated[
        int | None, typer.Option(min=1, help="GPUs the logs ran on (default: from the logs).")
    ] = None,
    nodes: Annotated[
        int | None, typer.Option(min=1, help="Nodes the logs ran on (default: from the logs).")
    ] = None,
    op: Annotated[
        str | None,
        typer.Option(help="The collective (allreduce, allgather, ...) where the log cannot tell."),
    ] = None,
    launch: Annotated[
        str | None, typer.Option(help="stream, or graph for nccl-tests -G runs (default: from the log).")
    ] = None,
    gpus_per_process: Annotated[
        int | None, typer.Option(min=1, help="nccl-tests -g of the runs (default: from the log).")
    ] = None,
    algo: Annotated[str, typer.Option(help="auto, or the NCCL_ALGO the runs forced.")] = "auto",
) -> None:
    """Fit the system's calibratable constants to nccl-tests logs and write a hardware overlay.

    The fit minimizes the rows' mean |log error| and never returns constants that raise their median
    |error|."""
    output = output_file(output, "overlay (-o)")  # checked before the fit, which may take a while
    if op is not None:
        op = pick("collective", op, {name: name for name in SIGNATURES})
    parsed = [read(path, op) for path in _once_each(logs)]
    fit = calibrate(parsed, system, gpus, nodes, launch, gpus_per_process, algo)
    typer.echo(f"Rows ({len(fit.rows)}), signed error of the model's time before and after the fit (%):")
    typer.echo(plain_table(fit.rows.assign(time_us=fit.rows.time_s * 1e6).drop(columns="time_s")))
    typer.echo("\nParameters:")
    for name, value in fit.fitted.items():
        prior = fit.prior[name]
        if value is not None:
            shown = f"fitted {value:.4g}"
        elif name in fit.determined:
            shown = "kept its prior: no fit beats it"
        else:
            shown = "not determined by these logs: kept its prior"
        typer.echo(f"  {name:<28} prior {prior:.4g}  {shown}")
    typer.echo(
        f"\nMean |log error| (what the fit minimizes): {fit.mean_log_error('before'):.3f} with the defaults, "
        f"{fit.mean_log_error('after'):.3f} fitted; median |error| {fit.median_before_pct:.1f}% -> "
        f"{fit.median_after_pct:.1f}% (never raised)"
    )
    overlay = fit.overlay(cluster(system), parsed)
    if not overlay:
        why = "no fit beats the defaults" if fit.determined else "nothing these logs determine"
        typer.echo(f"{why}: the defaults are kept and no overlay is written")
        return
    _write_overlay(overlay, output, system, "collective")


def _once_each(logs: list[Path]) -> list[Path]:
    """The logs, each file once: a run given twice would weigh twice in the fit, and ``--check`` would
    predict it from itself."""
    seen: dict[Path, Path] = {}
    for path in logs:
        if (same := path.resolve()) in seen:
            first = "" if seen[same] == path else f" (first as {seen[same]})"
            raise CommodelError(f"{path}: given twice{first}; each log is one run, counted once")
        seen[same] = path
    return logs


def _write_overlay(overlay: dict, output: Path, system: str, command: str) -> None:
    """Write ``overlay`` atomically, kept only if ``--hardware`` would take it (it checks overlays)."""
    header = f"# commodel hardware overlay for {system}: apply with commodel --hardware {output} ...\n"
    with atomic_path(output) as written:
        written.write_text(header + tomli_w.dumps(overlay))
        apply_overlay(default_db(), written)
    typer.echo(f"\nwrote {output} (use: commodel --hardware {output} {command} ... --system {system})")


Logs = Annotated[list[Path], typer.Argument(help="The run logs, one run each.")]
System = Annotated[str, typer.Option(help="The system the runs ran on (hardware database name).")]
Output = Annotated[str, typer.Option("-o", "--output", help="Overlay file to write (TOML).")]
Model = Annotated[
    str | None,
    typer.Option(help="The model (a name or a model file) where the log cannot tell, or to override it."),
]
Check = Annotated[
    bool, typer.Option("--check", help="Also predict each log from a fit on the others (two or more logs).")
]
Limit = Annotated[
    int | None,
    typer.Option("--max-constants", min=1, help="At most this many constants move (default: one per log)."),
]


@calibrate_app.command("train")
def calibrate_train(
    logs: Logs, system: System, output: Output, model: Model = None, check: Check = False, limit: Limit = None
) -> None:
    """Fit the constants your training runs depend on to Megatron-LM or torchtitan logs, and write a
    hardware overlay.

    Each log gives its job (the arguments block or configuration) and its measured step (the median
    of the steady iterations, warm-up dropped). The constants are the uncertain numbers of the
    system's records the runs depend on, each kept inside its stated range; at most one moves per log.
    Never a worse median error than the defaults; with no gain, no overlay."""
    out = output_file(output, "overlay (-o)")  # checked before the fit, which may take a while
    runs = [read_training(path, system, model) for path in _once_each(logs)]
    _calibrate_runs(runs, out, system, "train", check, limit)


@calibrate_app.command("serve")
def calibrate_serve(
    logs: Logs,
    system: System,
    output: Output,
    model: Model = None,
    tp: Annotated[
        int | None, typer.Option(min=1, help="The server's tensor parallelism (client logs).")
    ] = None,
    pp: Annotated[
        int | None, typer.Option(min=1, help="The server's pipeline parallelism (client logs).")
    ] = None,
    ep: Annotated[
        int | None, typer.Option(min=1, help="The server's expert parallelism (client logs).")
    ] = None,
    attention_dp: Annotated[bool, typer.Option(help="The server ran attention data parallelism.")] = False,
    dtype: Annotated[
        str | None, typer.Option(help="The server's precision (bf16, fp8, fp4) for client logs.")
    ] = None,
    dispatcher: Annotated[
        str | None,
        typer.Option(help="The server's MoE dispatch: alltoall or deepep (SGLang's --moe-a2a-backend)."),
    ] = None,
    check: Check = False,
    limit: Limit = None,
) -> None:
    """Fit the constants your serving runs depend on to trtllm-bench (throughput), vLLM (bench serve)
    or SGLang (bench_serving, bench_one_batch_server) outputs, and write a hardware overlay.

    Each output gives the run's configuration and its output throughput; what a client's output
    cannot say (the server's --tp, --pp, --ep, --attention-dp, --dtype, --dispatcher) is given here. Fit as
    ``calibrate train``."""
    out = output_file(output, "overlay (-o)")
    given = {
        "tp": tp,
        "pp": pp,
        "ep": ep,
        "attention_dp": attention_dp or None,
        "dtype": dtype,
        "dispatcher": dispatcher,
    }
    server = {k: v for k, v in given.items() if v is not None}
    runs = [read_serving(path, system, model, server) for path in _once_each(logs)]
    _calibrate_runs(runs, out, system, "serve", check, limit)


def _calibrate_runs(
    runs: list[MeasuredRun], output: Path, system: str, command: str, check: bool, limit: int | None
) -> None:
    """Fit, print the runs, the constants and the held-out check, and write the overlay."""
    if check and len(runs) < 2:
        raise CommodelError("--check needs two or more logs: each is predicted from a fit on the others")
    fit = calibrate_runs(runs, limit)
    typer.echo("Runs (the model's value before and after the fit; signed error, %):")
    typer.echo(plain_table(fit.table()))
    for run in runs:
        typer.echo(f"  {run.name}: {run.how}{memory_note(run)}")
    typer.echo("\nConstants (factor on the default; moved only inside the range):")
    if not fit.determined:
        typer.echo("  none: no uncertain constant of the system moves these runs' values")
    for number in fit.candidates:
        if number.label not in fit.determined:
            continue
        factor = fit.fitted.get(number.label)
        bounds = f"range x{number.low:.3g}-x{number.high:.3g}"
        if factor is None:
            shown = "kept"
        else:
            at_bound = " (at its bound: the runs ask for more; a mechanism the model lacks?)" * fit.at_bound(
                number
            )
            shown = f"x{factor:.4g} -> {number.value * factor:.4g}{at_bound}"
        typer.echo(f"  {number.label:<44} {number.value:<10.4g} {bounds:<18} {shown}")
    typer.echo(
        f"\nMean |log error| {mean_log_error(fit.before):.3f} with the defaults, {mean_log_error(fit.after):.3f} "
        f"fitted; median |error| {median_error_pct(fit.before):.1f}% -> {median_error_pct(fit.after):.1f}% (never raised)"
    )
    if check:
        typer.echo("\nHeld out (each log predicted from a fit on the others; signed error, %):")
        typer.echo(plain_table(leave_one_out(runs, limit)))
    overlay = fit.overlay(command)
    if not overlay:
        typer.echo("no constant moves the runs' error: the defaults are kept and no overlay is written")
        return
    _write_overlay(overlay, output, system, command)
