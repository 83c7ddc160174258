"""The transformer configurations, job mixes and failure models shipped in ``workloads/`` (one TOML file each)."""

from __future__ import annotations

from functools import cache

from commodel.errors import pick
from commodel.records import load_folder
from commodel.resources import resource_dir
from commodel.workloads.model.files import SUFFIXES, is_model_file, load_model_file
from commodel.workloads.model.schema import FailureModel, JobMixSpec, Transformer


@cache
def models() -> dict[str, Transformer]:
    """Every shipped model configuration by name (``workloads/NAME.toml``, read by the same loader as
    a user's model file) and by its aliases."""
    own = {path.stem: load_model_file(path) for path in sorted(resource_dir("workloads").glob("*.toml"))}
    return own | {alias: config for config in own.values() for alias in config.aliases}


def known_model(name: object) -> Transformer | None:
    """The model ``name`` names (shipped or a file), or ``None`` where it names none (its own check
    says why)."""
    if isinstance(name, str) and (name in models() or is_model_file(name)):
        return model(name)
    return None


def model(name: str) -> Transformer:
    """One model: a shipped configuration by name, or a model file (commodel TOML or Hugging Face
    ``config.json``) by path; an unknown name gets a suggestion."""
    if name not in models() and name.endswith(SUFFIXES):
        return load_model_file(name)
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
