"""``commodel sweep``: a design space explored, its results, Pareto front and reports written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from commodel.cli.root import ExecutorOption, SchedulerOption, app, check_scheduler
from commodel.errors import CommodelError
from commodel.explore.evaluation import commonest_reason, emptying_constraint
from commodel.explore.spec import load_spec
from commodel.explore.sweep import MAX_POINTS, run_sweep
from commodel.report.sweep_report import write_reports
from commodel.resources import resource_dir
from commodel.studies import check_parameters
from commodel.validate import standing
from commodel.validate.bands import cached_validation_table


def _reports(out: Path, summary: dict, front: object, cloud: object) -> None:
    """A finished sweep's reports, with where its models stand against published measurements."""
    write_reports(out, summary, front, cloud, standing=standing(cached_validation_table()))


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
    ] = MAX_POINTS,
) -> None:
    """Explore a design space and write its results, Pareto front, plot, summary and report."""
    spec_path = spec or resource_dir("studies") / "default" / "study.toml"
    loaded = load_spec(spec_path)
    check_parameters(loaded, spec_path)
    check_scheduler(executor, scheduler)
    out = f"sweep-{loaded.study.name}" if output is None else output
    try:
        summary = run_sweep(
            loaded, out, resume=resume, executor=executor, scheduler=scheduler, write_csv=csv, progress=not quiet,
            force=force, max_points=max_points, reporter=_reports,
        )  # fmt: skip
    except KeyboardInterrupt:
        again = " ".join(["commodel sweep", str(spec_path), "-o", out, "--resume"])
        typer.echo(f"interrupted: finished chunks are kept; continue with: {again}", err=True)
        raise typer.Exit(130) from None
    typer.echo(
        f"{summary['study']}: {summary['points']:,} points, {summary['valid']:,} valid, {summary['feasible']:,} feasible, "
        f"{summary['pareto']:,} Pareto-optimal, hypervolume {summary['hypervolume']:.4f}, {summary['elapsed_s']:.1f} s -> {out}/"
    )
    if summary["valid"] == 0:  # the space is the user's to fix: say why, and exit 2 (its outputs stay)
        reason = commonest_reason(loaded)
        raise CommodelError(f"no design is valid{f'; {reason}' if reason else ''}")
    if summary["feasible"] == 0:  # the constraints' fault: name the one that empties the space
        import pandas as pd  # slow: pandas (0.2 s), for the results this case reads

        found = emptying_constraint(loaded, pd.read_parquet(Path(out) / "results.parquet"))
        which = f": '{found[0]}' removes the last {found[1]:,} valid designs" if found else ""
        raise CommodelError(f"no design meets the constraints{which} (the results stay in {out}/)")
    if not quiet:
        # some designs cannot run: say the commonest why
        if summary["valid"] < summary["points"] and (found := commonest_reason(loaded)):
            typer.echo(f"  not valid: {summary['points'] - summary['valid']:,}; {found}")
        for name, row in summary["best"].items():
            typer.echo(
                f"  best {name}: {row[name]:.4g}  ({', '.join(f'{k}={row[k]}' for k in loaded.variables)})"
            )
        if "robust_pareto" in summary:
            typer.echo(f"  robust ({loaded.uncertainty.robust}) front: {summary['robust_pareto']} designs; "
                       f"{summary['off_robust_front']} of the nominal front drop off it under uncertainty")  # fmt: skip
