"""Golden numbers for a user's CI: named designs, each with expected bounds on any of its outputs,
priced as one batch per evaluator and checked (``commodel check FILE``).

The file (TOML)::

    [designs.llama70b-h100]
    evaluate = "training"              # any evaluator; training by default
    model = "llama3-70b"               # the job's inputs, as the evaluator declares them
    system = "dgx-h100"
    gpus = 64
    tp = 8
    [designs.llama70b-h100.expect]
    mfu = [0.40, 0.50]                 # inclusive range
    step_time_s = { value = 12.3, rel = 0.05 }   # within 5% (or abs = ...)
    fits = true                        # a flag or a name, exactly

A design that its evaluator marks invalid fails every bound, with its problem as the reason; one that
only does not fit has its memory and ``fits`` checked, and fails a bound on any figure it would need
to run for (a step, a throughput), with "does not fit: ..." as the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field, PositiveFloat, ValidationError, field_validator, model_validator

from commodel.errors import CommodelError, closest, unknown
from commodel.pricing.evaluator import BUILTIN, evaluator
from commodel.pricing.job import job_error
from commodel.pricing.table import is_unfit
from commodel.records import Strict, read_toml, validate_record


class Tolerance(Strict):
    """``value`` within ``rel`` (a share of it) or ``abs`` (its unit); exactly one of them."""

    value: float
    rel: PositiveFloat | None = None
    abs: PositiveFloat | None = None

    @model_validator(mode="after")
    def _one_tolerance(self) -> Tolerance:
        if (self.rel is None) == (self.abs is None):
            raise ValueError("give one of rel (a share of the value) or abs (in the output's unit)")
        return self

    @property
    def bounds(self) -> tuple[float, float]:
        slack = self.abs if self.abs is not None else self.rel * abs(self.value)
        return self.value - slack, self.value + slack


Expected = tuple[float, float] | Tolerance | bool | str


def _expected(value: Any) -> Expected:
    """One bound as the file writes it: ``[low, high]``, ``{value, rel | abs}``, a flag or a name; its
    numbers finite."""
    if isinstance(value, bool | str):
        return value
    numbers = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []
    if any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
        raise ValueError(f"a bound's numbers must be finite, got {value}")
    if isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value):
        low, high = (float(v) for v in value)
        if not low <= high:
            raise ValueError(f"a range's low end ({low:g}) is above its high end ({high:g})")
        return low, high
    if isinstance(value, dict):
        return Tolerance.model_validate(value)
    exactly = f" (exactly {value:g}: [{value:g}, {value:g}])" if _is_number(value) else ""
    raise ValueError(
        "a bound is [low, high], { value = V, rel = R } or { value = V, abs = A }, true/false or a name"
        + exactly
    )


#: A design's own keys besides its inputs.
FILE_KEYS = ("evaluate", "expect")


class Design(Strict):
    """One named design: its evaluator, its expectations, and its inputs (any other key)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    evaluate: str = "training"
    expect: dict[str, Any] = Field(min_length=1)

    @field_validator("expect")
    @classmethod
    def _bounds(cls, value: dict[str, Any]) -> dict[str, Expected]:
        bounds = {}
        for name, bound in value.items():
            try:
                bounds[name] = _expected(bound)
            except ValidationError as exc:  # a tolerance's own field
                error = exc.errors()[0]
                where = ".".join([name, *map(str, error["loc"])])
                raise ValueError(f"{where}: {error['msg'].removeprefix('Value error, ')}") from None
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return bounds

    @property
    def inputs(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


class CheckFile(Strict):
    designs: dict[str, Design] = Field(min_length=1)


@dataclass(frozen=True)
class Outcome:
    """One bound of one design: the value the model gives, what was expected, and whether it holds."""

    design: str
    output: str
    value: object
    expected: str
    holds: bool
    note: str = ""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_inputs(name: str, design: Design, schema: type) -> None:
    """A design's inputs as one value each, of the field's kind: no list or table, no NaN or infinity,
    no true or false where the field is not a flag (``gpus = true`` is not one GPU); then the job they
    make, by the declaration's rules."""
    for field, value in design.inputs.items():
        where = f"input '{field}' of design '{name}'"
        if isinstance(value, list | dict):
            raise CommodelError(
                f"{where}: give one value, not a {'list' if isinstance(value, list) else 'table'}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise CommodelError(f"{where}: must be a finite number, got {value}")
        annotation = schema.model_fields[field].annotation if field in schema.model_fields else None
        if isinstance(value, bool) and annotation not in (bool, bool | None):
            raise CommodelError(
                f"{where}: {str(value).lower()} is a flag; this input takes a number or a name"
            )
    try:  # each value by its field's rules, said of this design (the batch's check names no row)
        schema(**design.inputs)
    except ValidationError as exc:
        raise CommodelError(f"design '{name}': {job_error(exc, schema, lambda f: f'input {f!r}')}") from None


def _check_kind(name: str, output: str, value: object, expected: Expected) -> None:
    """A bound of the output's kind: a range or tolerance for a number, true or false for a flag, a
    name for words; else an error naming the design and output."""
    flag = isinstance(value, bool | np.bool_)
    words = isinstance(value, str)
    kind = "a flag" if flag else "words" if words else "a number"
    fits = (
        isinstance(expected, bool)
        if flag
        else isinstance(expected, str)
        if words
        else not isinstance(expected, bool | str)
    )
    if not fits:
        wanted = "true or false" if flag else "a name" if words else "[low, high] or { value, rel | abs }"
        raise CommodelError(
            f"bound on '{output}' of design '{name}': the output is {kind}, so its bound is {wanted}, not "
            f"{_describe(expected)!r}"
        )


def load_checks(path: str | Path) -> CheckFile:
    """The check file at ``path``; errors name the file and the field."""
    checks = validate_record(read_toml(Path(path)), CheckFile, path)
    for name, design in checks.designs.items():
        if design.evaluate not in BUILTIN:
            raise CommodelError(f"{path}: design '{name}': {unknown('evaluator', design.evaluate, BUILTIN)}")
    return checks


def _describe(expected: Expected) -> str:
    if isinstance(expected, tuple):
        return f"[{expected[0]:g}, {expected[1]:g}]"
    if isinstance(expected, Tolerance):
        return (
            f"{expected.value:g} ± {expected.rel:g} rel"
            if expected.rel
            else f"{expected.value:g} ± {expected.abs:g}"
        )
    return str(expected).lower() if isinstance(expected, bool) else expected


def _holds(value: object, expected: Expected) -> bool:
    if isinstance(expected, bool | str):
        return value == expected if not isinstance(expected, bool) else bool(value) is expected
    low, high = expected.bounds if isinstance(expected, Tolerance) else expected
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) and low <= number <= high


def run_checks(checks: CheckFile) -> list[Outcome]:
    """Every design priced (one batch per evaluator) and every bound checked, in file order."""
    import pandas as pd  # slow: pandas (0.2 s), for the evaluators' tables

    by_evaluator: dict[str, list[str]] = {}
    for name, design in checks.designs.items():
        by_evaluator.setdefault(design.evaluate, []).append(name)
    rows: dict[str, Mapping[str, object]] = {}
    for kind, names in by_evaluator.items():
        ev = evaluator(kind)
        for name in names:
            for field in checks.designs[name].inputs:
                if field in ev.inputs:
                    continue
                if (key := closest(field, [*ev.inputs, *FILE_KEYS])) in FILE_KEYS:  # a design's key, misspelt
                    raise CommodelError(
                        f"design '{name}': '{field}' is no {kind} input, nor a design's key (did you mean '{key}'?)"
                    )
                raise CommodelError(f"design '{name}': {unknown(f'{kind} input', field, list(ev.inputs))}")
            _check_inputs(name, checks.designs[name], ev.job)
        frame = pd.DataFrame([checks.designs[n].inputs for n in names])
        for name, (_, row) in zip(names, ev(frame).iterrows(), strict=True):
            for output in checks.designs[name].expect:
                if output not in row.index:
                    raise CommodelError(
                        f"design '{name}': {unknown(f'{kind} output', output, list(row.index))}"
                    )
            rows[name] = row
    outcomes = []
    for name, design in checks.designs.items():
        row = rows[name]
        valid, problem = bool(row.get("valid", True)), str(row.get("problem", ""))
        unfit = not valid and is_unfit(problem)  # its memory and fit priced, nothing else
        for output, expected in design.expect.items():
            value = row[output]
            value = value.item() if hasattr(value, "item") else value
            _check_kind(name, output, value, expected)
            holds = (valid or unfit) and _holds(value, expected)
            note = "" if valid or (unfit and holds) else ("" if unfit else "invalid design: ") + problem
            outcomes.append(Outcome(name, output, value, _describe(expected), holds, note))
    return outcomes
