"""Any table (a DataFrame) as text: plain columns, Markdown, or JSON records."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
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
    pandas = sys.modules.get("pandas")  # pandas' missing value, where a DataFrame brought pandas in
    return "" if value is None or (pandas is not None and value is pandas.NA) else str(value)


def _cells(table: pd.DataFrame | Sequence[Mapping[str, object]], floatfmt: str) -> list[list[str]]:
    """Header and rows of a DataFrame, or of records (one mapping per row; a name a row lacks is blank)."""
    if isinstance(table, Sequence):
        header = list(dict.fromkeys(name for row in table for name in row))  # every row's, first seen first
        rows = [[row.get(name, math.nan) for name in header] for row in table]
    else:
        header, rows = list(table.columns), list(table.itertuples(index=False))
    return [[str(c) for c in header]] + [[_cell(v, floatfmt) for v in row] for row in rows]


def plain_table(table: pd.DataFrame | Sequence[Mapping[str, object]], floatfmt: str = "{:.3g}") -> str:
    """A left-aligned text table of ``table`` (a DataFrame, or records: one mapping per row) with floats
    in ``floatfmt`` and blanks for missing values."""
    cells = _cells(table, floatfmt)
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def markdown_table(frame: pd.DataFrame, floatfmt: str = "{:.3g}") -> str:
    """A GitHub-flavoured Markdown table of ``frame``."""
    header, *rows = _cells(frame, floatfmt)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
