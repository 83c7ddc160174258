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

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

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


#: The largest whole number an input may hold: a count beyond 2^53 has no exact float, and a table's
#: counts are floats and 64-bit integers.
LARGEST_COUNT = 2**53


class Job(BaseModel):
    """What every job declaration shares: no unknown fields, categorical inputs checked against their
    names (:class:`Choices` in a field's annotation), finite numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    #: What the job's inputs are called in messages ("not a training input").
    noun: ClassVar[str] = "job"
    #: Fields a cross-field rule of the declaration reads together: a table's distinct combinations
    #: of them are checked as whole jobs (every other field is checked value by value).
    together: ClassVar[tuple[str, ...]] = ()

    @field_validator("*", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        """NaN and infinity refused before a field's bounds read them (NaN fails every bound, and
        the bound's message would not say why)."""
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        return value

    @field_validator("*")
    @classmethod
    def _known(cls, value: Any, info: Any) -> Any:
        choices = choices_of(cls, info.field_name)
        if choices is not None and isinstance(value, str):
            choices.check(value)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > LARGEST_COUNT:
            raise ValueError(f"must be at most 2^53 ({LARGEST_COUNT:.3g}), got {value:.3g}")
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


def missing(value: Any) -> bool:
    """Whether a table cell or a job value is left empty (None or NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


#: A job's inputs that shape its cluster beyond the system record (pods, the core's oversubscription,
#: trays per rack), each with its type.
CLUSTER_SHAPE = {"pod_gpus": int, "oversubscription": float, "trays_per_rack": int, "power_limit": float}


def cluster_shape(values: Mapping[str, Any]) -> dict[str, Any]:
    """The :func:`~commodel.hardware.cluster.cluster` keywords a job's values (or a table group's key)
    state in :data:`CLUSTER_SHAPE`; None where a value is left empty (None or NaN): the record's."""
    return {name: None if missing(v := values.get(name)) else kind(v) for name, kind in CLUSTER_SHAPE.items()}
