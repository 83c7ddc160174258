"""The project's copy of the published measurements (``data/measurements.csv``), read once into a
table: one row per measurement, its hardware target and its stated run settings parsed."""

from __future__ import annotations

import io

import pandas as pd

from commodel.resources import resource_dir
from commodel.validate.runs import runs

#: Kinds of rows modelled on a system (the others on a GPU).
SYSTEM_KINDS = ("collective", "p2p", "training", "serving", "dispatch")


def load_measurements() -> pd.DataFrame:
    """The measurements (comment lines skipped). Sizes quoted as "large" (an asymptotic figure)
    become missing; missing run settings become empty. Rows in the shared format (without commodel's
    columns) are held out (``validation``) and run on the hardware their text names
    (``hardware_by_gpu`` in ``data/runs.toml``). ``settings``: the run settings a row states
    (``model_args``, ``partition=4;launch=graph;nvls=off;algo=tree``) as a dict."""
    path = resource_dir("data") / "measurements.csv"
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    table = pd.read_csv(io.StringIO("\n".join(lines)), dtype={"size_bytes": str, "model_args": str})
    table["size_bytes"] = pd.to_numeric(table.size_bytes, errors="coerce").astype("Int64")
    for column, default in (("model_target", ""), ("role", "validation"), ("model_args", "")):
        table[column] = table[column].fillna(default) if column in table else default
    inferred = [
        target or _hardware_named(text, kind in SYSTEM_KINDS)
        for kind, target, text in zip(table.kind, table.model_target, table.system.astype(str), strict=True)
    ]
    return table.assign(model_target=inferred, settings=[_settings(text) for text in table.model_args])


def _hardware_named(text: str, system: bool) -> str:
    """The system (or GPU) of the first GPU ``text`` names, "" if none."""
    return next((s if system else g for name, s, g in runs().hardware_by_gpu if name in text), "")


def _settings(text: str) -> dict[str, str]:
    """``partition=4;launch=graph`` as ``{"partition": "4", "launch": "graph"}``."""
    pairs = (item.split("=", 1) for item in str(text).split(";") if item)
    return {key.strip(): value.strip() for key, value in pairs}
