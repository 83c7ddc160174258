"""What ``commodel study run`` and ``commodel validate`` print: a study's claims beside the paper's,
and the validation report's sections."""

from __future__ import annotations

import pandas as pd

from commodel.report.frames import markdown_table, plain_table


def study_text(result: object) -> str:
    """A study's setup beside the paper's, its claims (paper vs model, whether each holds, and why
    not where it misses), its table and its notes."""
    lines = [f"{result.title} ({result.paper})", ""]
    lines += [f"{who.capitalize()}'s setup: {text}" for who, text in result.setup.items()]
    lines += ["", "Claims:"]
    for c in result.claims:
        mark = "holds" if c.holds else "misses"
        lines += [
            f"  {c.claim}",
            f"      paper {_figure(c.paper)} {c.unit}   model {_figure(c.model)} {c.unit}   {mark}",
        ]
        lines += [
            f"      {label}: {text}"
            for label, text in (("definition", c.definition), ("why", "" if c.holds else c.reason))
            if text
        ]
    lines += ["", "Table:", plain_table(result.table)]
    lines += [f"\n- {note}" for note in result.notes]
    return "\n".join(lines)


def _figure(value: object) -> str:
    """A claim's figure: a number, a range or a sign."""
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return f"{value[0]:.3g} to {value[1]:.3g}"
    return f"{value:.3g}"


def validation_text(sections: dict[str, pd.DataFrame], markdown: bool) -> str:
    """``commodel validate``'s sections (title -> table), as plain text or Markdown."""
    render = markdown_table if markdown else plain_table
    return "\n".join(
        f"\n## {title}\n\n{render(frame)}" if markdown else f"\n{title}:\n{render(frame)}"
        for title, frame in sections.items()
    )
