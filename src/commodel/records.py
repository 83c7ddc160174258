"""Strict, sourced records read from TOML: the primitives every data file (hardware, workloads) uses.

A :class:`Sourced` number carries its value in SI units and the ``source`` it came from (a datasheet, a
measurement row id, or an explicit assumption), and may state the ``range`` it is believed to lie in
(what :mod:`commodel.hardware.uncertain` propagates). :func:`load_record` is the one place TOML is parsed:
errors name the file and the field, and suggest the closest valid key.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from commodel.errors import CommodelError, suggest
from commodel.io import read_text
from commodel.units import parse_quantity

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base for every record: immutable, unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Sourced(Strict):
    """A positive number with its unit parsed to SI, the source it came from and, optionally, the
    ``range = [low, high]`` (same unit) it is believed to lie in."""

    KIND: ClassVar[str | None] = None
    value: float
    source: str
    note: str = ""
    range: tuple[float, float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError('expected a table {value = ..., source = "..."}')
        if "value" in data and cls.KIND is not None:
            data = {**data, "value": parse_quantity(data["value"], cls.KIND)}
        if isinstance(data.get("range"), list | tuple) and cls.KIND is not None:
            data = {**data, "range": [parse_quantity(v, cls.KIND) for v in data["range"]]}
        return data

    @model_validator(mode="after")
    def _value_in_range(self) -> Sourced:
        if self.range is not None and not 0 < self.range[0] <= self.value <= self.range[1]:
            raise ValueError(f"range {list(self.range)} must be positive and hold the value {self.value:g}")
        return self

    @field_validator("value")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"must be a finite number, got {v}")
        if not v > 0:
            raise ValueError(f"must be positive, got {v}")
        return v

    @field_validator("source")
    @classmethod
    def _has_source(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("every number needs a non-empty source")
        return v


class Bandwidth(Sourced):
    KIND = "bandwidth"


class Duration(Sourced):
    KIND = "time"


class ByteSize(Sourced):
    KIND = "bytes"


class FlopRate(Sourced):
    KIND = "flop_rate"


class Power(Sourced):
    KIND = "power"


class Rate(Sourced):
    """Events per second (a bare number in 1/s)."""

    KIND: ClassVar[str | None] = "rate"


class Count(Sourced):
    """A positive whole number (SM count, links, NICs)."""

    @field_validator("value")
    @classmethod
    def _whole(cls, v: float) -> float:
        if v != int(v):
            raise ValueError(f"must be a whole number, got {v}")
        return v


class Fraction(Sourced):
    """A dimensionless fraction in (0, 1]: an achievable share of a peak."""

    @field_validator("value")
    @classmethod
    def _at_most_one(cls, v: float) -> float:
        if v > 1:
            raise ValueError(f"must be at most 1, got {v}")
        return v


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML document at ``path``; a file that is not a regular UTF-8 file (:func:`read_text`) or
    bad syntax is a :class:`CommodelError`."""
    try:
        return tomllib.loads(read_text(path, "TOML file"))
    except tomllib.TOMLDecodeError as exc:
        raise CommodelError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # the parser recurses into each nested array or table
        raise CommodelError(f"{path}: arrays or tables nested too deeply to be a commodel file") from None


def validate_record(data: Any, model: type[M], where: str | Path) -> M:
    """Validate ``data`` as a ``model`` record; errors name ``where`` (a file, or a file and table)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise CommodelError(_describe(where, model, exc)) from None


def load_record(path: Path, model: type[BaseModel]) -> BaseModel:
    """Parse and validate one TOML file as a ``model`` record."""
    return validate_record(read_toml(path), model, path)


def _describe(path: str | Path, model: type[BaseModel], exc: ValidationError) -> str:
    """One line: the file, then each problem's dotted field path and what is wrong (missing keys
    together)."""
    missing, problems = [], []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"] if not str(p).startswith("function-")]
        field = ".".join(loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            problems.append(f"unknown key '{field}'{suggest(loc[-1], allowed)}")
        elif err["type"] == "missing":
            missing.append(f"'{field}'")
        else:
            message = str(err["msg"]).removeprefix("Value error, ")
            problems.append(f"field '{field}': {message}")
    if missing:  # after the unknown keys, which often explain them (a misspelling)
        problems.append(f"missing key{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    return f"{path}: " + "; ".join(problems)


def _allowed_keys(model: type[BaseModel], loc: list[str]) -> list[str]:
    """Field names of the (nested) model at ``loc``, for 'did you mean' suggestions."""
    for part in loc:
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def load_folder(folder: Path, model: type[M]) -> dict[str, M]:
    """Every ``*.toml`` record in ``folder`` (not its subfolders), by file stem."""
    return {path.stem: load_record(path, model) for path in sorted(folder.glob("*.toml"))}  # type: ignore[misc]
