"""What ``commodel study run`` and ``commodel validate`` print: a study's claims beside the paper's,
and the validation report's sections."""

from __future__ import annotations

import pandas as pd

from commodel.report.frames import markdown_table, plain_table


def study_text(result: object) -> str:
    """A study's claims (paper vs model), its table and its notes."""
    lines = [f"{result.title} ({result.paper})", "", "Claims:"]
    for c in result.claims:
        paper = f"{c.paper[0]:g} to {c.paper[1]:g}" if isinstance(c.paper, tuple) else f"{c.paper:g}"
        lines += [f"  {c.claim}", f"      paper {paper} {c.unit}   model {c.model:.3g} {c.unit}"]
    lines += ["", "Table:", plain_table(result.table)]
    lines += [f"\n- {note}" for note in result.notes]
    return "\n".join(lines)


def validation_text(sections: dict[str, pd.DataFrame], markdown: bool) -> str:
    """``commodel validate``'s sections (title -> table), as plain text or Markdown."""
    render = markdown_table if markdown else plain_table
    return "\n".join(
        f"\n## {title}\n\n{render(frame)}" if markdown else f"\n{title}:\n{render(frame)}"
        for title, frame in sections.items()
    )
