"""The transformer configurations, job mixes and failure models shipped in ``workloads/`` (one TOML file each)."""

from __future__ import annotations

from functools import cache

from commodel.errors import pick
from commodel.records import load_folder
from commodel.resources import resource_dir
from commodel.workloads.schema import FailureModel, JobMixSpec, Transformer


@cache
def models() -> dict[str, Transformer]:
    """Every shipped model configuration by name (``workloads/NAME.toml``) and by its aliases."""
    own = load_folder(resource_dir("workloads"), Transformer)
    return own | {alias: config for config in own.values() for alias in config.aliases}


def model(name: str) -> Transformer:
    """One model configuration; an unknown name gets a suggestion."""
    return pick("model", name, models())


@cache
def job_mixes() -> dict[str, JobMixSpec]:
    """Every shipped job mix by name (``workloads/job_mixes/NAME.toml``)."""
    return load_folder(resource_dir("workloads") / "job_mixes", JobMixSpec)


def job_mix(name: str) -> JobMixSpec:
    """One job mix; an unknown name gets a suggestion."""
    return pick("job mix", name, job_mixes())


@cache
def failure_models() -> dict[str, FailureModel]:
    """Every shipped failure model by name (``workloads/failures/NAME.toml``)."""
    return load_folder(resource_dir("workloads") / "failures", FailureModel)


def failure_model(name: str) -> FailureModel:
    """One failure model; an unknown name gets a suggestion."""
    return pick("failure model", name, failure_models())
