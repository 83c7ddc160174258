"""A table of jobs checked by its declaration's own rules (:func:`check_columns`), and one input's value
by its field's (:func:`field_problem`): a sweep gets the CLI's bounds and messages, on each column's
distinct values at once."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from functools import cache
from typing import Annotated, Any

import numpy as np
from pydantic import TypeAdapter, ValidationError

from commodel.errors import CommodelError
from commodel.pricing.job import LARGEST_COUNT, Choices, Job, make_job, missing


def _distinct(values: np.ndarray, name: str) -> np.ndarray:
    """The distinct values of input ``name``'s column (one for a value broadcast: a default); a cell
    holding a container (a list, a dict), which no input takes, is an error naming it."""
    array = np.asarray(values)
    if array.ndim == 1 and len(array) and array.strides == (0,):
        return array[:1]
    import pandas as pd  # slow: pandas (0.2 s), which one job does not need

    try:
        return pd.unique(array.ravel())
    except TypeError:  # unhashable: a container in a cell
        row, cell = next((i, v) for i, v in enumerate(array.ravel()) if not isinstance(v, Hashable))
        raise CommodelError(
            f"input '{name}' holds a {type(cell).__name__} in row {row} ({cell!r:.40}): each row takes one "
            "number, flag or name"
        ) from None


#: The bounds a number's field may state, vectorized.
_BOUNDS = {"ge": np.greater_equal, "gt": np.greater, "le": np.less_equal, "lt": np.less}


def _own_validator(schema: type[Job], name: str) -> bool:
    """Whether the declaration validates field ``name`` with a function of its own."""
    return any(name in d.info.fields for d in schema.__pydantic_decorators__.field_validators.values())


@cache
def _bounds_only(schema: type[Job], name: str) -> bool:
    """Whether a field's rules are a number's: finite, whole for an int, within its stated bounds
    (and no validator of its own): then they are checked on a column at once."""
    field = schema.model_fields[name]
    numeric = field.annotation in (int, float, int | None, float | None)
    return (
        numeric
        and not _own_validator(schema, name)
        and all(any(hasattr(m, k) for k in _BOUNDS) for m in field.metadata)
    )


def _first_broken(schema: type[Job], name: str, values: np.ndarray) -> Any | None:
    """The first of a numeric column's distinct ``values`` that breaks its field's rules, or None."""
    field = schema.model_fields[name]
    numbers = values.astype(float)
    given = (
        ~np.isnan(numbers) if field.annotation in (int | None, float | None) else np.ones(len(values), bool)
    )
    broken = given & ~np.isfinite(numbers)
    if field.annotation in (int, int | None):
        broken |= (
            given
            & np.isfinite(numbers)
            & ((numbers != np.round(numbers)) | (np.abs(numbers) > LARGEST_COUNT))
        )
    for bound in field.metadata:
        for key, within in _BOUNDS.items():
            if hasattr(bound, key):
                broken |= given & ~within(numbers, getattr(bound, key))
    return values[np.argmax(broken)].item() if broken.any() else None


@cache
def _adapter(schema: type[Job], name: str) -> TypeAdapter:
    """A validator of input ``name``'s own type and bounds."""
    field = schema.model_fields[name]
    return TypeAdapter(Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation)


def field_problem(schema: type[Job], name: str, value: Any) -> str:
    """Why ``value`` breaks input ``name``'s own rules, in the declaration's words ("" where it does
    not): its type and bounds, or its names for a categorical input. A field with a validator of its
    own (which may read the value another way: ``batch = 8`` as "8"), and the rules that read several
    inputs together, are a whole job's (:func:`make_job`)."""
    field = schema.model_fields[name]
    choices = next((m for m in field.metadata if isinstance(m, Choices)), None)
    if _own_validator(schema, name):
        return ""
    try:
        if choices is not None and isinstance(value, str):
            choices.check(value)
        else:
            _adapter(schema, name).validate_python(value)
    except ValueError as exc:  # pydantic's ValidationError is one
        errors = exc.errors() if isinstance(exc, ValidationError) else [{"msg": str(exc)}]
        return str(errors[0]["msg"]).removeprefix("Value error, ")
    return ""


#: A number's field types.
_NUMBERS = (int, float, int | None, float | None)


def _numbers_read(
    schema: type[Job], columns: Mapping[str, np.ndarray], distinct: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """``columns`` with each number written as text in a number's input (``"8"``: a spreadsheet's
    cell, a sweep file's string) read as the declaration reads it, through the field's own type;
    ``distinct`` (each column's distinct values) updated alike. Text that is no number stays, for
    :func:`check_columns` to name."""
    read = dict(columns)
    for name, field in schema.model_fields.items():
        texts = (
            [v for v in distinct[name].tolist() if isinstance(v, str)] if field.annotation in _NUMBERS else []
        )
        parsed = {}
        for text in texts:
            try:
                parsed[text] = _adapter(schema, name).validate_python(text)
            except ValidationError:
                continue
        if parsed:
            column = np.asarray(columns[name])
            read[name] = np.array([parsed.get(v, v) if isinstance(v, str) else v for v in column.ravel().tolist()],
                                  dtype=object).reshape(column.shape)  # fmt: skip
            distinct[name] = _distinct(read[name], name)
    return read


def check_columns(
    schema: type[Job], columns: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every distinct value of every input of a table of jobs, by the declaration's own rules: a sweep
    gets the CLI's bounds and messages. A number whose field states only bounds is checked against them
    at once; any other value in a job that varies that one field of the first row's required fields;
    the fields a cross-field rule reads (``together``), only by their distinct combinations. A broken value
    is an error, worded as the declaration words it; values that each hold but break a cross-field
    rule together (a grid over ``max_turns`` and ``turn_tokens``, over ``batch`` and an SLO) refuse
    the rows that hold them. Returns the columns as checked (a number written as text read as one,
    :func:`_numbers_read`) and, per row, the rule its settings break together ("" where none)."""
    distinct = {name: _distinct(columns[name], name) for name in schema.model_fields}
    columns = _numbers_read(schema, columns, distinct)
    base = {name: np.asarray(columns[name]).flat[0] for name in schema.required()}
    defaults = schema.inputs()
    for name, values in distinct.items():
        if (len(values) == 1 and _same(values[0], defaults[name])) or name in schema.together:
            continue  # the declaration's own default, or a field checked with those it goes with
        if values.dtype.kind in "fiu" and _bounds_only(schema, name):
            broken = _first_broken(schema, name, values)
            values = [] if broken is None else [broken]
        for value in values:
            if not missing(value):
                make_job(schema, **{**base, name: value.item() if isinstance(value, np.generic) else value})
    rows = len(np.asarray(next(iter(columns.values())))) if columns else 0
    refused = np.full(rows, "", dtype=object)
    if schema.together:
        _check_together(schema, columns, base, distinct, refused)
    return columns, refused


def _check_together(
    schema: type[Job],
    columns: Mapping[str, np.ndarray],
    base: dict[str, Any],
    distinct: dict[str, np.ndarray],
    refused: np.ndarray,
) -> None:
    """The distinct combinations of the fields a cross-field rule reads, each as a whole job: the rows
    of a combination that breaks a rule get its message in ``refused``."""
    varying = [name for name in schema.together if len(distinct[name]) > 1]
    held = {name: distinct[name][0] for name in schema.together if name not in varying}
    if len(varying) > 1:
        import pandas as pd  # slow: pandas (0.2 s), which one job does not need

        frame = pd.DataFrame({name: columns[name] for name in varying}).drop_duplicates()
        combinations = frame.astype(object).to_dict("records")
    else:
        combinations = [{name: value} for name in varying for value in distinct[name]] or [{}]
    for values in combinations:
        together = {k: v.item() if isinstance(v, np.generic) else v for k, v in {**held, **values}.items()}
        given = {k: v for k, v in together.items() if not missing(v)}
        try:
            make_job(schema, **{**base, **given})
        except CommodelError as exc:
            if any(_broken_alone(schema, base, name, value) for name, value in given.items()):
                raise  # a value no job may hold, whatever it goes with
            refused[_rows_holding(columns, values, len(refused))] = str(exc)


def _broken_alone(schema: type[Job], base: dict[str, Any], name: str, value: Any) -> bool:
    """Whether ``value`` breaks input ``name``'s own rules (:func:`field_problem`; a field with a
    validator of its own, in a job of the first row's required fields and that value)."""
    if not _own_validator(schema, name):
        return bool(field_problem(schema, name, value))
    try:
        make_job(schema, **{**base, name: value})
    except CommodelError:
        return True
    return False


def _rows_holding(columns: Mapping[str, np.ndarray], values: Mapping[str, Any], rows: int) -> np.ndarray:
    """The rows whose columns hold ``values`` (a missing value matches a missing cell)."""
    match = np.ones(rows, dtype=bool)
    for name, value in values.items():
        column = np.broadcast_to(np.asarray(columns[name], dtype=object), rows)
        if missing(value):
            match &= np.array([missing(v) for v in column.tolist()], dtype=bool)
        else:
            match &= np.array([v == value for v in column.tolist()], dtype=bool)
    return match


def _same(value: Any, default: Any) -> bool:
    return (
        value is default
        or (value is None and default is None)
        or (type(value) is type(default) and value == default)
    )
