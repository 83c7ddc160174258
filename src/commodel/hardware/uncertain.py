"""Uncertain hardware parameters: which numbers of the database are not known exactly, how far off
they may be, and where that belief comes from; and the database with them moved.

Every :class:`~commodel.records.Sourced` number may be uncertain. Its range, as factors on its value,
comes from the first of these sources that applies (each is named in :attr:`Uncertain.source`):

1. **stated**: the record's own ``range = [low, high]`` (an overlay written by ``commodel calibrate``
   states the spread of its fit's residuals this way);
2. **validation** (numbers whose source says ``calibrated``): the 10th-90th percentile of reality over
   the model on the ``commodel validate`` rows of the model class the number feeds (:data:`FEEDS`; a
   link's efficiency feeds the collectives, a GPU's GEMM efficiency the GEMM rows): the held-out rows
   when the class has at least :data:`MIN_ROWS` of them (a constant fit to one row has no residual,
   so its error on other rows is the honest measure), else the calibration residuals and held-out
   errors together;
3. **assumed** (numbers whose source says ``assumed``, or calibrated ones whose class has fewer than
   :data:`MIN_ROWS` scored rows): :data:`ASSUMED_RANGE`, a factor of 1.25 either way.

Datasheet values and direct measurements are taken as exact. Counts and capacities (SMs, links,
bytes) never move: they are facts of the design, not beliefs about it. A moved fraction (an
efficiency) is capped at 1, so no draw carries more than the path can.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel

from commodel.hardware.loader import HardwareDB, default_db, using
from commodel.records import ByteSize, Count, Fraction, Sourced

T = TypeVar("T")

#: Factors on an assumed value with no stated range (a documented convention, not a fit).
ASSUMED_RANGE = (0.8, 1.25)

#: Held-out rows a model class needs before its errors stand for a calibrated number's range.
MIN_ROWS = 3

#: The ``commodel validate`` class each calibrated field feeds (by field name).
FEEDS = {
    "matmul_efficiency": "gemm",
    "memory_efficiency": "memory",
    "efficiency": "collective",
    "nvls_channel_bandwidth": "collective",
    "nvls_latency": "collective",
    "ring_step_latency": "collective",
    "latency": "collective",
    "net_plugin_latency": "collective",
    "idle_power": "power",
    "launch_overhead": "latency",
    "nvlink_share": "dispatch",
}

#: Reality-over-model ratios per model class: (held-out rows, every scored row).
Ratios = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]

#: Quantities that are facts of a design and never move.
FIXED_KINDS = (Count, ByteSize)


@dataclass(frozen=True)
class Uncertain:
    """One uncertain number: where it lives (``kind``, record ``name``, field ``path``), its value,
    the factors ``low`` and ``high`` it may be off by, the source of that range, and whether it is a
    fraction (capped at 1) or a time (larger is slower)."""

    kind: str
    name: str
    path: tuple[str, ...]
    value: float
    low: float
    high: float
    source: str
    fraction: bool = False
    time: bool = False

    @property
    def label(self) -> str:
        return f"{self.name}.{'.'.join(self.path)}"


def _walk(record: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Sourced]]:
    """Every sourced number in a record, with its field path."""
    if isinstance(record, Sourced):
        yield path, record
    elif isinstance(record, BaseModel):
        for field in type(record).model_fields:
            yield from _walk(getattr(record, field), (*path, field))
    elif isinstance(record, dict):
        for key, value in record.items():
            yield from _walk(value, (*path, str(key)))


def related(db: HardwareDB, names: list[str]) -> list[tuple[str, str]]:
    """``(kind, name)`` of every record among ``names`` (any kind) and of the records they name: a
    system's GPU and links (its CPU-memory link among them), a GPU's host link."""
    found: dict[tuple[str, str], None] = {}
    for name in names:
        for kind in ("system", "gpu", "link"):
            if name in db.table(kind):
                found[(kind, name)] = None
                if kind == "system":
                    record = db.system(name)
                    found[("gpu", record.gpu)] = None
                    found[("link", record.scale_up.link)] = None
                    found[("link", record.scale_out.link)] = None
                    if record.host_memory is not None:
                        found[("link", record.host_memory.link)] = None
    for kind, name in list(found):
        if kind == "gpu":
            found[("link", db.gpu(name).host_link)] = None
    return list(found)


def _class_ratios(feeds: str | None, ratios: Ratios) -> tuple[np.ndarray, str] | None:
    """The ratios that stand for a calibrated number's range, and their description."""
    held_out, scored = (r.get(feeds, np.empty(0)) for r in ratios)
    if len(held_out) >= MIN_ROWS:
        return held_out, f"{len(held_out)} held-out {feeds} rows"
    if len(scored) >= MIN_ROWS:
        return scored, f"{len(scored)} {feeds} rows (calibration residuals and held-out errors)"
    return None


def _range(number: Sourced, field: str, ratios: Ratios) -> tuple[float, float, str] | None:
    """``(low, high, source)`` factors of one number, or ``None`` when it is taken as exact."""
    if number.range is not None:
        low, high = number.range
        return low / number.value, high / number.value, f"stated range ({number.source})"
    text = number.source.lower()
    found = _class_ratios(FEEDS.get(field), ratios) if text.startswith("calibrated") else None
    if found is not None:
        speed_low, speed_high = np.percentile(found[0], (10, 90))
        source = f"validation: p10-p90 of {found[1]}"
        if number.KIND == "time":  # a larger time is a slower path
            return 1 / speed_high, 1 / speed_low, source
        return float(speed_low), float(speed_high), source
    if text.startswith(("calibrated", "assumed")):
        return (*ASSUMED_RANGE, f"assumed: default x{ASSUMED_RANGE[0]:g}-x{ASSUMED_RANGE[1]:g}")
    return None


def uncertain_parameters(db: HardwareDB, names: list[str], ratios: Ratios) -> list[Uncertain]:
    """The uncertain numbers of the records ``names`` use (see :func:`related`), given the validation
    ratios (reality over model) per model class: held out, and all scored rows."""
    out = []
    for kind, name in related(db, names):
        for path, number in _walk(db.get(kind, name)):
            if isinstance(number, FIXED_KINDS):
                continue
            field = next((p for p in reversed(path) if p in FEEDS), path[0])
            found = _range(number, field, ratios)
            if found is None or found[0] == found[1] == 1:
                continue
            low, high, source = found
            fraction = isinstance(number, Fraction)
            time = number.KIND == "time"
            out.append(Uncertain(kind, name, path, number.value, low, high, source, fraction, time))
    return out


def uncertain_numbers(names: Iterable[str], ratios: Ratios, db: HardwareDB | None = None) -> list[Uncertain]:
    """:func:`uncertain_parameters` of the records ``names`` use (strings that name no record are
    ignored), given the validation ratios (:func:`commodel.validate.bands.validation_ratios` gives
    ``commodel validate``'s own)."""
    return uncertain_parameters(db or default_db(), sorted(set(names)), ratios)


def _replaced(record: Any, path: tuple[str, ...], value: float) -> Any:
    """``record`` (a record or a table of them) with the number at ``path`` set to ``value``; copies,
    not re-validated (a factor is positive, a fraction is capped by the caller)."""
    head, rest = path[0], path[1:]
    current = record[head] if isinstance(record, dict) else getattr(record, head)
    new = _replaced(current, rest, value) if rest else current.model_copy(update={"value": value})
    return {**record, head: new} if isinstance(record, dict) else record.model_copy(update={head: new})


def moved(db: HardwareDB, parameters: list[Uncertain], factors: np.ndarray) -> HardwareDB:
    """``db`` with each parameter's value multiplied by its factor (a fraction capped at 1)."""
    tables = {kind: dict(db.table(kind)) for kind in ("gpu", "link", "system")}
    for parameter, factor in zip(parameters, factors, strict=True):
        value = parameter.value * float(factor)
        table = tables[parameter.kind]
        table[parameter.name] = _replaced(table[parameter.name], parameter.path,
                                          min(value, 1.0) if parameter.fraction else value)  # fmt: skip
    return HardwareDB(tables["gpu"], tables["link"], tables["system"], db.root)  # type: ignore[arg-type]


def factors_of(parameters: list[Uncertain], unit: np.ndarray) -> np.ndarray:
    """Points of the unit cube (one column per parameter) as factors, uniform in the logarithm of
    each range (a factor of 0.8 is as likely as 1.25)."""
    low = np.log([p.low for p in parameters])
    high = np.log([p.high for p in parameters])
    return np.exp(low + np.asarray(unit, dtype=float).reshape(-1, len(parameters)) * (high - low))


def drivers(log_factors: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per design: the index of the factor whose logarithm best explains the logarithm of ``values``
    (draws x designs) and its squared correlation with it (0 where the value does not move): the
    first-order index of a model linear in the logs, as a Latin hypercube estimates it."""
    x = log_factors - log_factors.mean(axis=0)
    y = np.log(np.abs(values))
    y = y - np.nanmean(y, axis=0)
    y = np.where(np.isfinite(y), y, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = (x.T @ y) / np.sqrt((x**2).sum(axis=0)[:, None] * (y**2).sum(axis=0)[None, :])
    share = np.nan_to_num(corr**2)
    best = np.argmax(share, axis=0)
    return best, share[best, np.arange(share.shape[1])]


def on_draws(run: Callable[[int], T], parameters: list[Uncertain], factors: np.ndarray) -> list[T]:
    """``run(i)`` for each row ``i`` of ``factors``, on the default database with the parameters
    moved by that row (:func:`moved`, :func:`commodel.hardware.loader.using`)."""
    base = default_db()
    results = []
    for i, row in enumerate(factors):
        with using(moved(base, parameters, row)):
            results.append(run(i))
    return results


def draws(parameters: list[Uncertain], samples: int, seed: int = 0) -> np.ndarray:
    """``samples`` x parameters factors: a Latin hypercube over the parameters' ranges."""
    from scipy.stats import qmc  # slow: scipy.stats (0.6 s), for uncertainty bands only

    if not parameters:
        return np.ones((samples, 0))
    return factors_of(parameters, qmc.LatinHypercube(d=len(parameters), seed=seed).random(samples))
