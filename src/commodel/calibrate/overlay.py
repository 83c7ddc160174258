"""The hardware overlay a calibration writes: the calibrated systems' own copies of the records whose
numbers it fit, each fitted number with its source and the range the fit's residuals leave it in.

Built-in GPU and link records are shared by many systems; a fit on one system's logs says nothing
about the others. So a fitted GPU or link field goes into a copy named ``SYSTEM-RECORD`` that only
the calibrated system points to (its ``gpu``, its scale-up, scale-out or host-memory ``link``, or its
GPU's ``host_link``), and a fitted system field into the system itself. Other systems are untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from commodel.hardware.loader import HardwareDB

#: ``(kind, record name, field path) -> fitted value``.
Changes = Mapping[tuple[str, str, tuple[str, ...]], float]


def residual_range(value: float, reality_over_model: np.ndarray, is_time: bool) -> list[float]:
    """The range a fitted value's residuals leave it in: the p10-p90 of reality over the model across
    the fit's points (inverted for a time, where a slower reality is a longer time), widened to hold
    the value."""
    low, high = np.percentile(reality_over_model, (10, 90))
    if is_time:
        low, high = 1 / high, 1 / low
    return [float(min(value * low, value)), float(max(value * high, value))]


def _sourced(value: float, source: str, spread: list[float]) -> dict[str, Any]:
    return {"value": float(value), "source": source, "range": spread}


def _set(fields: dict[str, Any], path: tuple[str, ...], number: dict[str, Any]) -> None:
    for key in path[:-1]:
        fields = fields.setdefault(key, {})
    fields[path[-1]] = number


def system_overlay(
    db: HardwareDB,
    system: str,
    changes: Changes,
    source: str,
    ranges: Mapping[tuple[str, str, tuple[str, ...]], list[float]],
) -> dict[str, dict[str, Any]]:
    """The overlay (``{"gpus": ..., "links": ..., "systems": ...}``, only the tables it needs) giving
    ``system`` the fitted ``changes``, each with ``source`` and its range; empty without changes."""
    record = db.system(system)
    gpu = db.gpu(record.gpu)
    refs = {
        ("gpu", record.gpu): ("gpu",),
        ("link", record.scale_up.link): ("scale_up", "link"),
        ("link", record.scale_out.link): ("scale_out", "link"),
        ("link", gpu.host_link): None,  # the GPU's own reference
    }
    if record.host_memory is not None:
        refs[("link", record.host_memory.link)] = ("host_memory", "link")
    tables: dict[str, dict[str, Any]] = {"gpus": {}, "links": {}, "systems": {}}
    own: dict[str, Any] = {}
    for (kind, name, path), value in changes.items():
        number = _sourced(value, source, ranges[(kind, name, path)])
        if kind == "system":
            _set(own, path, number)
            continue
        copy = f"{system}-{name}"
        table = tables[f"{kind}s"]
        if copy not in table:
            table[copy] = db.get(kind, name).model_dump(exclude_none=True)
        _set(table[copy], path, number)
    for (kind, name), where in refs.items():
        copy = f"{system}-{name}"
        if copy not in tables[f"{kind}s"]:
            continue
        if where is None:  # the GPU's host link: the GPU's own copy points to it
            tables["gpus"].setdefault(f"{system}-{record.gpu}", gpu.model_dump(exclude_none=True))[
                "host_link"
            ] = copy
            own["gpu"] = f"{system}-{record.gpu}"
        else:
            _set(own, where, copy)
    if own:
        tables["systems"][system] = own
    return {kind: table for kind, table in tables.items() if table}
