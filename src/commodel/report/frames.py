"""Any table (a DataFrame) as text: plain columns, Markdown, or JSON records."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # every function here is handed a DataFrame: pandas is loaded by then
    import pandas as pd


def to_json(frame: pd.DataFrame) -> str:
    """Records as JSON; numpy scalars become plain numbers (to 15 digits: a microsecond time keeps
    its precision), missing values become null."""
    records = json.loads(frame.to_json(orient="records", double_precision=15))
    return json.dumps(records, indent=2)


def _cell(value: object, floatfmt: str) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else floatfmt.format(value)
    import pandas as pd  # loaded already: the caller holds a DataFrame

    return "" if value is None or value is pd.NA else str(value)


def _cells(frame: pd.DataFrame, floatfmt: str) -> list[list[str]]:
    header = [str(c) for c in frame.columns]
    return [header] + [[_cell(v, floatfmt) for v in row] for row in frame.itertuples(index=False)]


def plain_table(frame: pd.DataFrame, floatfmt: str = "{:.3g}") -> str:
    """A left-aligned text table of ``frame`` with floats in ``floatfmt`` and blanks for missing values."""
    cells = _cells(frame, floatfmt)
    widths = [max(len(r[i]) for r in cells) for i in range(len(frame.columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def markdown_table(frame: pd.DataFrame, floatfmt: str = "{:.3g}") -> str:
    """A GitHub-flavoured Markdown table of ``frame``."""
    header, *rows = _cells(frame, floatfmt)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
