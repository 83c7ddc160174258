"""``commodel study list`` and ``commodel study run``: the published systems, paper beside model."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from commodel.cli.root import JsonFlag, study_app
from commodel.report.console import study_text
from commodel.studies import STUDIES, run_study


@study_app.command("list")
def study_list(
    claims: Annotated[
        bool,
        typer.Option(
            "--claims", help="Run every study and count its claims: held, and missed with a reason."
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """The studies commodel ships."""
    if as_json:
        typer.echo(json.dumps([_listed(name, description, claims) for name, (_, description) in STUDIES.items()],
                              indent=2))  # fmt: skip
        return
    if claims:
        typer.echo(
            f"{'study':<16} {'claims':>6} {'hold':>5} {'miss':>5}  misses (why: commodel study run NAME)"
        )
    for name, (_, description) in STUDIES.items():
        if not claims:
            typer.echo(f"{name:<16} {description}")
            continue
        result = run_study(name)
        missed = [c.claim for c in result.claims if not c.holds]
        typer.echo(
            f"{name:<16} {len(result.claims):>6} {len(result.claims) - len(missed):>5} {len(missed):>5}"
        )
        for claim in missed:
            typer.echo(f"{'':<18}misses: {claim}")


def _listed(name: str, description: str, claims: bool) -> dict:
    """A study as ``study list --json`` gives it: its name and description, and with ``claims`` its
    claims run (held or missed, with the reason) and its notes."""
    if not claims:
        return {"study": name, "description": description}
    result = run_study(name).as_dict()
    held = sum(bool(c["holds"]) for c in result["claims"])
    return {"study": name, "description": description, "claims": len(result["claims"]), "hold": held,
            "miss": len(result["claims"]) - held, "claimed": result["claims"], "notes": result["notes"]}  # fmt: skip


@study_app.command("run")
def study_run(
    name: Annotated[str, typer.Argument(help="Study name (see: commodel study list).")],
    as_json: JsonFlag = False,
) -> None:
    """Run a study: its claims (paper vs model) and its table."""
    result = run_study(name)
    typer.echo(json.dumps(result.as_dict(), indent=2) if as_json else study_text(result))
