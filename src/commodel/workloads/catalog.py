"""The transformer configurations shipped in ``workloads/`` (one TOML file per model)."""

from __future__ import annotations

from functools import cache

from commodel.errors import unknown
from commodel.records import load_record
from commodel.resources import resource_dir
from commodel.workloads.schema import JobMixSpec, Transformer


@cache
def models() -> dict[str, Transformer]:
    """Every shipped model configuration by name (the file stem)."""
    folder = resource_dir("workloads")
    return {path.stem: load_record(path, Transformer) for path in sorted(folder.glob("*.toml"))}  # type: ignore[misc]


def model(name: str) -> Transformer:
    """One model configuration; an unknown name gets a suggestion."""
    table = models()
    if name not in table:
        raise unknown("model", name, table)
    return table[name]


@cache
def job_mixes() -> dict[str, JobMixSpec]:
    """Every shipped job mix by name (``workloads/job_mixes/NAME.toml``)."""
    folder = resource_dir("workloads") / "job_mixes"
    return {path.stem: load_record(path, JobMixSpec) for path in sorted(folder.glob("*.toml"))}  # type: ignore[misc]


def job_mix(name: str) -> JobMixSpec:
    """One job mix; an unknown name gets a suggestion."""
    table = job_mixes()
    if name not in table:
        raise unknown("job mix", name, table)
    return table[name]
