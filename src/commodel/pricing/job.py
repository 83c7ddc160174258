"""What every job declaration shares (DESIGN principle 7): a pydantic model whose fields are the job's
inputs, each with its default, bounds and help text, and whose categorical fields say where their
names come from (:class:`Choices`). The CLI's options, the scalar API and the table evaluators'
inputs, defaults, checks and group keys are all read from a declaration, never listed again.

Fields whose default is ``None`` are derived by the pricing function (a job's GPUs from its nodes, its
data-parallel size from its GPUs, its sequence from its model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, ClassVar, TypeVar

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from commodel.errors import CommodelError, suggest
from commodel.hardware import default_db
from commodel.workloads.model.catalog import models
from commodel.workloads.model.files import readable_model_file

#: Largest global batch (sequences) and sequence length a job may state: beyond, products of them
#: leave the range where float64 token counts are exact.
MAX_GLOBAL_BATCH = 2**40
#: The largest cluster a job may state (a cost that grows with the node count is bounded by it):
#: ten times today's largest training clusters.
MAX_NODES = 200_000
MAX_GPUS = 8 * MAX_NODES
MAX_SEQ = 2**25

J = TypeVar("J", bound="Job")


@dataclass(frozen=True)
class Choices:
    """A categorical input: what it is called in messages (``kind``), the names it may take (a
    collection, or a function that gives them when a value is checked: hardware names change with an
    overlay), how one value holds several names (``split``: module lists, node groups), whether rows
    that differ in it are priced apart (``group``: a group key; otherwise it is priced per row), and
    its number in a layout (``encode``; default: its position among the names); ``also`` accepts
    values beyond the names (a model file's path)."""

    kind: str
    names: Collection[str] | Callable[[], Collection[str]]
    split: Callable[[str], list[str]] | None = None
    group: bool = True
    encode: Callable[[str], float] | None = None
    also: Callable[[str], bool] | None = None

    def known(self) -> list[str]:
        return list(self.names() if callable(self.names) else self.names)

    def code(self, value: str) -> float:
        """The value's number in a layout."""
        return self.encode(value) if self.encode else float(self.known().index(value))

    def check(self, value: str) -> str:
        """``value``, or a ValueError naming the first unknown name in it and the closest known one."""
        known = self.known()
        try:
            names = self.split(value) if self.split else [value]
        except CommodelError as exc:
            raise ValueError(str(exc)) from None
        for name in names:
            try:
                accepted = name in known or bool(self.also and self.also(name))
            except CommodelError as exc:
                raise ValueError(str(exc)) from None
            if not accepted:
                shown = (
                    ", ".join(c for c in sorted(known) if c) if len(known) <= 40 else f"{len(known)} names"
                )
                raise ValueError(f"unknown {self.kind} '{name}'{suggest(name, known)}; known: {shown}")
        return value


#: The inputs most jobs name: a model of ``workloads/``, a system, GPU or link of the hardware database
#: in use (an overlay may add some).
MODEL = Choices("model", models, also=readable_model_file)
SYSTEM = Choices("system", lambda: list(default_db().systems))
GPU = Choices("GPU", lambda: list(default_db().gpus))
LINK = Choices("link", lambda: list(default_db().links))
#: A scale-out fabric to join a system's nodes with instead of its own ("" keeps its own).
FABRIC = Choices(
    "scale-out fabric",
    lambda: ["", *(name for name, link in default_db().links.items() if link.endpoint_power)],
)


#: The highest PUE taken: a facility drawing ten times its IT load is a typo, not a data center.
MAX_PUE = 10.0


def _at_least_one(value: float) -> float:
    if value < 1:
        raise ValueError(f"PUE is facility energy over IT energy, so at least 1; got {value}")
    if value > MAX_PUE:
        raise ValueError(f"PUE {value:g} is above {MAX_PUE:g}: facility energy over IT energy")
    return value


#: A facility PUE: facility energy over IT energy.
Pue = Annotated[float, AfterValidator(_at_least_one)]
#: A scale-out network's pods and the oversubscription of the core tier above them
#: (:class:`~commodel.hardware.schema.ScaleOut`), as a job may state them over the system's record.
PodGpus = Annotated[
    int | None,
    Field(
        ge=1,
        le=10**7,
        description="GPUs per non-blocking leaf-spine pod, above which a core tier joins the pods "
        "(default: the system's record; none stated: one pod).",
    ),
]
PowerLimit = Annotated[
    float | None,
    Field(
        gt=0,
        le=10**4,
        description="Watts each GPU's board is limited to (nvidia-smi -pl), between its idle power and its "
        "TDP: clock-bound rates fall with it, memory bandwidth does not (default: the record's limit, else "
        "its TDP).",
    ),
]
TraysPerRack = Annotated[
    int | None,
    Field(
        ge=1,
        le=1024,
        description="Trays (nodes) per rack-scale NVLink domain as deployed, where fewer than the system's "
        "(GB200/GB300 NVL72 racks of 16 of their 18 trays; default: the record's).",
    ),
]
Oversubscription = Annotated[
    float | None,
    Field(
        ge=1,
        le=1000,
        description="Downlinks per uplink of the core tier above the pods (1 = non-blocking; Meta's "
        "Llama 3 cluster: 7). Default: the system's record, else 1.",
    ),
]


class Job(BaseModel):
    """What every job declaration shares: no unknown fields, categorical inputs checked against their
    names (:class:`Choices` in a field's annotation), finite numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    #: What the job's inputs are called in messages ("not a training input").
    noun: ClassVar[str] = "job"
    #: Fields a cross-field rule of the declaration reads together: a table's distinct combinations
    #: of them are checked as whole jobs (every other field is checked value by value).
    together: ClassVar[tuple[str, ...]] = ()

    @field_validator("*")
    @classmethod
    def _known(cls, value: Any, info: Any) -> Any:
        choices = choices_of(cls, info.field_name)
        if choices is not None and isinstance(value, str):
            choices.check(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        return value

    @classmethod
    def inputs(cls) -> dict[str, object]:
        """Every field with its default (``None`` for required or derived ones)."""
        return {name: None if f.is_required() else f.default for name, f in cls.model_fields.items()}

    @classmethod
    def required(cls) -> tuple[str, ...]:
        return tuple(name for name, f in cls.model_fields.items() if f.is_required())

    @classmethod
    def group_keys(cls) -> tuple[str, ...]:
        """The categorical fields whose rows are priced apart (the rest are priced per row)."""
        return _group_keys(cls)


def listed_once(value: Any, alone: tuple[str, ...] = ()) -> Any:
    """A comma-separated list of names as a user writes it, checked: no empty name between commas, no
    name twice, and each of ``alone`` only by itself; other values pass through to the field's type."""
    if not isinstance(value, str) or not value.strip():
        return value
    items = [item.strip() for item in value.split(",")]
    if "" in items:
        raise ValueError(f"'{value}' has an empty name between commas")
    twice = sorted({item for item in items if items.count(item) > 1})
    if twice:
        raise ValueError(f"'{value}' names {', '.join(twice)} more than once")
    single = [name for name in alone if name in items and len(items) > 1]
    if single:
        raise ValueError(f"{single[0]} stands alone: it cannot go with other names ('{value}')")
    return value


@cache
def choices_of(schema: type[Job], name: str) -> Choices | None:
    """The :class:`Choices` of field ``name``, if it is categorical (a schema's fields are fixed, so
    the answer is kept)."""
    field = schema.model_fields.get(name)
    return next((m for m in field.metadata if isinstance(m, Choices)), None) if field else None


@cache
def _group_keys(schema: type[Job]) -> tuple[str, ...]:
    return tuple(
        name for name in schema.model_fields if (c := choices_of(schema, name)) is not None and c.group
    )


def cli_option(field: str) -> str:
    """A job field as the command line names it: ``--size-bytes`` for ``size_bytes``."""
    return f"--{field.replace('_', '-')}"


def job_error(
    exc: ValidationError, schema: type[Job], named: Callable[[str], str] = cli_option
) -> CommodelError:
    """A job's validation errors as one :class:`CommodelError` line per field, each field ``named`` (by
    default in the CLI's terms); a file's error that several fields' lookups share (a broken hardware
    overlay) once, at the first."""
    lines, said = [], set()
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = f"not a {schema.noun} input{suggest(field, schema.model_fields)}"
        if message in said and ".toml" in message:
            continue
        said.add(message)
        lines.append(f"{named(field)}: {message}" if field else message)
    return CommodelError("; ".join(lines))


def make_job(schema: type[J], **values: Any) -> J:
    """A validated job of ``schema``; bad values are a :class:`CommodelError` naming the option."""
    try:
        return schema(**values)
    except ValidationError as exc:
        raise job_error(exc, schema) from None


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of a column (one for a value broadcast: a default)."""
    array = np.asarray(values)
    if array.ndim == 1 and len(array) and array.strides == (0,):
        return array[:1]
    import pandas as pd  # slow: pandas (0.2 s), which one job does not need

    return pd.unique(array.ravel())


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
        broken |= given & np.isfinite(numbers) & (numbers != np.round(numbers))
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


def check_columns(schema: type[Job], columns: Mapping[str, np.ndarray]) -> None:
    """Every distinct value of every input of a table of jobs, by the declaration's own rules: a sweep
    gets the CLI's bounds and messages. A number whose field states only bounds is checked against them
    at once; any other value in a job that varies that one field of the first row's required fields;
    the fields a cross-field rule reads (``together``), only by their distinct combinations. A broken value
    is reported as the declaration words it."""
    base = {name: np.asarray(columns[name]).flat[0] for name in schema.required()}
    defaults = schema.inputs()
    distinct = {name: _distinct(columns[name]) for name in schema.model_fields}
    for name, values in distinct.items():
        if (len(values) == 1 and _same(values[0], defaults[name])) or name in schema.together:
            continue  # the declaration's own default, or a field checked with those it goes with
        if values.dtype.kind in "fiu" and _bounds_only(schema, name):
            broken = _first_broken(schema, name, values)
            values = [] if broken is None else [broken]
        for value in values:
            if not _missing(value):
                make_job(schema, **{**base, name: value.item() if isinstance(value, np.generic) else value})
    if schema.together:
        _check_together(schema, columns, base, distinct)


def _check_together(
    schema: type[Job],
    columns: Mapping[str, np.ndarray],
    base: dict[str, Any],
    distinct: dict[str, np.ndarray],
) -> None:
    """The distinct combinations of the fields a cross-field rule reads, each as a whole job."""
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
        make_job(schema, **{**base, **{k: v for k, v in together.items() if not _missing(v)}})


def _same(value: Any, default: Any) -> bool:
    return (
        value is default
        or (value is None and default is None)
        or (type(value) is type(default) and value == default)
    )


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


#: A job's inputs that shape its cluster beyond the system record (pods, the core's oversubscription,
#: trays per rack), each with its type.
CLUSTER_SHAPE = {"pod_gpus": int, "oversubscription": float, "trays_per_rack": int, "power_limit": float}


def cluster_shape(values: Mapping[str, Any]) -> dict[str, Any]:
    """The :func:`~commodel.hardware.cluster.cluster` keywords a job's values (or a table group's key)
    state in :data:`CLUSTER_SHAPE`; None where a value is left empty (None or NaN): the record's."""
    return {
        name: None if _missing(v := values.get(name)) else kind(v) for name, kind in CLUSTER_SHAPE.items()
    }
