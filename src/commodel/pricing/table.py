"""A table of jobs held as columns (name -> one array of one value per row), as every pricing
function takes it: its inputs completed with the declaration's defaults, grouped by the inputs priced
apart, its outputs started blank, each row's broken rules joined into one message."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from commodel.errors import CommodelError

if TYPE_CHECKING:
    import pandas as pd

Columns = dict[str, np.ndarray]

#: Rows from which a column's values are coded by hashing (pandas) rather than one by one.
FACTORIZE_FROM = 256


def columns_of(frame: pd.DataFrame, defaults: Mapping[str, object], required: tuple[str, ...]) -> Columns:
    """A DataFrame's inputs as columns in their own dtypes (text as objects), every input it lacks at
    its default (one value broadcast, not copied), and a cell it leaves empty (NaN, None: rows built
    from jobs that name different inputs) at the input's default too; a required input it lacks, or
    leaves empty in a row, is an error."""
    missing = [name for name in required if name not in frame]
    if missing:
        raise CommodelError(f"the table needs input '{missing[0]}'")
    empty = [name for name in required if frame[name].isna().any()]
    if empty:
        at = np.flatnonzero(frame[empty[0]].isna().to_numpy())
        raise CommodelError(
            f"the table leaves input '{empty[0]}', which has no default, empty in {len(at)} of its {len(frame)} "
            f"rows (the first at position {at[0]})"
        )
    rows = len(frame)
    return {
        name: _filled(frame[name], default)
        if name in frame
        else np.broadcast_to(np.asarray(default, dtype=object), rows)
        for name, default in defaults.items()
    }


def _filled(column: pd.Series, default: object) -> np.ndarray:
    """A column with its empty cells at ``default`` (where the input has one)."""
    if default is None or not column.hasnans:
        return column.to_numpy()
    return column.astype(object).where(column.notna(), default).infer_objects().to_numpy()


def job_columns(job: Iterable[tuple[str, Any]], rows: int = 1) -> Columns:
    """A job (a declaration's instance: its fields as ``(name, value)``) as a table held as columns:
    ``rows`` copies of each field."""
    return {name: np.array([value] * rows, dtype=object) for name, value in job}


def _one_value(values: np.ndarray) -> bool:
    """Whether a column is one value broadcast (a default): it converts as that value."""
    return values.ndim == 1 and len(values) > 0 and values.strides == (0,)


def take(columns: Mapping[str, np.ndarray], name: str, rows: np.ndarray) -> np.ndarray:
    """Column ``name`` at ``rows``; a broadcast default stays one value broadcast (converting it costs
    one value, not one per row)."""
    values = np.asarray(columns[name])
    if _one_value(values):
        return np.broadcast_to(values[:1], len(rows))
    return values if len(rows) == len(values) else values[rows]  # a group of every row: the rows in order


def numbers(values: np.ndarray) -> np.ndarray:
    """A column as floats; missing entries (None, NaN) become NaN."""
    values = np.asarray(values)
    if _one_value(values):
        return np.full(len(values), np.nan if values[0] is None else float(values[0]))
    return np.asarray(values, dtype=float)  # NumPy reads None as NaN


def flags(values: np.ndarray) -> np.ndarray:
    """A column as booleans."""
    values = np.asarray(values)
    return np.full(len(values), bool(values[0])) if _one_value(values) else values.astype(bool)


def blank_outputs(
    rows: int, outputs: tuple[str, ...], flags: tuple[str, ...] = (), text: tuple[str, ...] = ()
) -> Columns:
    """Output columns before pricing: NaN for numbers, False for ``flags`` (``valid`` always is one),
    "" for ``text``; rows the pricing cannot price keep these values and ``valid = False``."""
    out = {name: np.full(rows, np.nan) for name in outputs}
    for name in ("valid", *flags):
        out[name] = np.zeros(rows, dtype=bool)
    for name in text:
        out[name] = np.full(rows, "", dtype=object)
    return out


def untimed(values: Mapping[str, Any], rows: np.ndarray, keep: tuple[str, ...]) -> dict[str, Any]:
    """``values`` (name -> one value per row, or one for all) with every number outside ``keep`` NaN
    at the ``rows`` mask: what a design that cannot run (it does not fit) has no figure for."""
    out = dict(values)
    for name, v in values.items():
        column = np.asarray(v)
        if name in keep or column.dtype.kind != "f":
            continue
        out[name] = np.where(rows, np.nan, np.broadcast_to(column, rows.shape))
    return out


#: How the problem of a design that only does not fit begins (:func:`unfit_problems`).
UNFIT = "does not fit"


def is_unfit(problem: object) -> bool:
    """Whether a row's ``problem`` says only that it does not fit (:func:`unfit_problems`)."""
    return str(problem).startswith(UNFIT)


def unfit_problems(memory_bytes: ArrayLike, held_bytes: float) -> np.ndarray:
    """Why a design that does not fit has no figures: the memory it needs per GPU against what one
    holds, per row."""
    held = held_bytes / 2**30
    return coded(
        lambda need: f"{UNFIT}: {need / 2**30:,.1f} GiB per GPU, where a GPU holds {held:,.1f} GiB",
        np.asarray(memory_bytes, dtype=float),
        object,
    )


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's code among the column's distinct values, and the values (one if the column holds one
    value: a broadcast default, or a constant)."""
    if _one_value(values) or (len(values) and bool(np.all(values == values[0]))):
        return np.zeros(len(values), dtype=np.intp), values[:1]
    import pandas as pd  # slow: pandas (0.2 s), which one job does not need

    return pd.factorize(values, sort=True, use_na_sentinel=False)  # an empty cell is a group of its own


def groups(columns: Mapping[str, np.ndarray], keys: list[str]) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
    """``(key values, row positions)`` for each combination of the ``keys`` present in a table."""
    rows = len(next(iter(columns.values())))
    coded = [_codes(np.asarray(columns[k])) for k in keys]
    if all(len(values) == 1 for _, values in coded):  # one group: every key constant (a scalar job too)
        yield {k: values[0] for k, (_, values) in zip(keys, coded, strict=True)}, np.arange(rows)
        return
    combined = np.ravel_multi_index([c for c, _ in coded], [len(v) for _, v in coded])
    found, group_of_row = np.unique(combined, return_inverse=True)
    order = np.argsort(group_of_row, kind="stable")
    starts = np.searchsorted(group_of_row[order], np.arange(len(found) + 1))
    for g in range(len(found)):
        rows_of = order[starts[g] : starts[g + 1]]
        yield {k: values[c[rows_of[0]]] for k, (c, values) in zip(keys, coded, strict=True)}, rows_of


def rows_of(columns: Mapping[str, np.ndarray]) -> Iterator[tuple[int, SimpleNamespace]]:
    """Each row of a table as ``(position, row)``, the row's fields as attributes: for pricings that
    take one job at a time (a simulation, a row-by-row search)."""
    names = list(columns)
    arrays = [np.asarray(columns[name]) for name in names]
    for i in range(len(arrays[0]) if arrays else 0):
        yield i, SimpleNamespace(**{name: array[i] for name, array in zip(names, arrays, strict=True)})


def price_rows(columns: Mapping[str, np.ndarray], outputs: tuple[str, ...], price: Callable[[SimpleNamespace], dict],
               text: tuple[str, ...] = ()) -> Columns:  # fmt: skip
    """A table priced one row at a time: ``price(row)`` gives the row's outputs; where the table has a
    ``problem`` output, a :class:`CommodelError` makes the row invalid with its message."""
    out = blank_outputs(len(next(iter(columns.values()))), outputs, text=text)
    for i, row in rows_of(columns):
        try:
            values = price(row)
        except CommodelError as exc:
            if "problem" not in outputs:
                raise
            out["problem"][i] = str(exc)
            continue
        for name, value in values.items():
            out[name][i] = value
        out["valid"][i] = True
    return out


class Outputs:
    """Output columns filled group by group and assembled once: where one group wrote every row in
    order its arrays are the columns (no copy); elsewhere a row no group wrote keeps its blank (NaN for
    numbers, False for ``flags`` and ``valid``, "" for ``text``)."""

    def __init__(
        self, rows: int, names: tuple[str, ...], flags: tuple[str, ...] = (), text: tuple[str, ...] = ()
    ):
        self.rows, self.names, self.flags, self.text = rows, names, (*flags, "valid"), text
        self.parts: list[tuple[np.ndarray, Mapping[str, Any]]] = []

    def put(self, rows: np.ndarray, values: Mapping[str, Any]) -> None:
        """The ``values`` (name -> one value per row) of the table's ``rows``."""
        self.parts.append((rows, values))

    def columns(self) -> Columns:
        whole = {
            name: v for rows, values in self.parts if len(rows) == self.rows for name, v in values.items()
        }
        blank = blank_outputs(
            self.rows, tuple(n for n in self.names if n not in whole), self.flags, self.text
        )
        for rows, values in self.parts:
            if len(rows) < self.rows:
                put(blank, rows, {n: v for n, v in values.items() if n in blank})
        shaped = {
            name: np.broadcast_to(v, self.rows) if np.ndim(v) == 0 else np.asarray(v)
            for name, v in whole.items()
        }
        return {name: shaped[name] if name in shaped else blank[name] for name in self.names}


def put(out: Columns, rows: np.ndarray, values: Mapping[str, Any]) -> None:
    """Write ``values`` (name -> one value per row of ``rows``) into the output columns at ``rows``
    (a slice where the rows run in order without a gap: most tables are one group)."""
    at: slice | np.ndarray = rows
    if len(rows) and rows[-1] - rows[0] == len(rows) - 1 and (len(rows) < 2 or rows[1] > rows[0]):
        at = slice(int(rows[0]), int(rows[-1]) + 1)
    for name, value in values.items():
        out[name][at] = value


def problem_messages(problems: list[tuple[np.ndarray, str]], rows: int) -> np.ndarray:
    """Per row, the messages of every (mask, message) rule it breaks, joined by "; " ("" if none)."""
    messages = np.full(rows, "", dtype=object)
    for mask, message in problems:
        if np.any(mask):
            broken = np.broadcast_to(mask, messages.shape)
            messages[broken] = [f"{m}; {message}" if m else message for m in messages[broken]]
    return messages


def with_outputs(frame: pd.DataFrame, out: Columns, resolved: tuple[str, ...] = ()) -> pd.DataFrame:
    """``frame`` with the output columns added, and the inputs the pricing ``resolved`` replaced in
    place: derived counts (gpus from nodes) as nullable integers, a text input as the text it read."""
    import pandas as pd  # slow: pandas (0.2 s), which one job does not need

    counts = {
        name: pd.array(out[name], dtype="Int64") if np.asarray(out[name]).dtype.kind in "fiu" else out[name]
        for name in resolved
    }
    columns = {k: pd.Series(v, dtype=object, index=frame.index, copy=False) if np.asarray(v).dtype == object else v
               for k, v in out.items() if k not in resolved}  # fmt: skip
    # One DataFrame from every column, in place of assigning, dropping and concatenating frames:
    # the frame's columns (an output it already held moves to the outputs), then the outputs.
    data = {name: counts.get(name, frame[name]) for name in frame.columns if name not in columns}
    data |= {name: value for name, value in counts.items() if name not in data}
    return pd.DataFrame(data | columns, index=frame.index, copy=False)


def coded(fn: Callable[[Any], Any], values: np.ndarray, dtype: Any = float) -> np.ndarray:
    """``fn`` of every entry of a column, called once per distinct entry (a table's text columns hold
    a few distinct values over many rows)."""
    values = np.asarray(values)
    if _one_value(values):
        return np.full(len(values), fn(values[0]), dtype=dtype)
    if values.size < FACTORIZE_FROM:  # a few rows: fewer calls than factorizing them
        entries = values.ravel().tolist()
        keys = ["nan" if v != v else v for v in entries]  # NaN never equals itself: one key for them all
        results = {k: fn(v) for k, v in zip(keys, entries, strict=True)}
        return np.array([results[k] for k in keys], dtype=dtype).reshape(values.shape)
    import pandas as pd  # slow: pandas (0.2 s), which one job does not need

    codes, distinct = pd.factorize(values.ravel(), use_na_sentinel=False)
    return np.array([fn(v) for v in distinct], dtype=dtype)[codes].reshape(values.shape)
