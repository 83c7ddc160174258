"""Studies: the published systems commodel models, each a spec plus an evaluate function plus claims."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from pathlib import Path

from commodel.errors import CommodelError, pick
from commodel.explore.spec import SweepSpec
from commodel.studies.base import Claim, StudyResult

#: Study name -> (module, one-line description).
STUDIES: dict[str, tuple[str, str]] = {
    "overlap": ("commodel.studies.overlap", "occupancy-shaped vs naive computation-communication overlap"),
    "cais": ("commodel.studies.cais", "compute-aware in-switch reduction for tensor parallelism"),
    "disaggregation": (
        "commodel.studies.disaggregation",
        "pooling granularity vs stranding, scheduling and energy",
    ),
    "hetero": (
        "commodel.studies.hetero",
        "pipeline stages across AMD and NVIDIA nodes: device-direct, CPU-forwarding or Gloo for all",
    ),
    "rl-rollout": (
        "commodel.studies.rl_rollout",
        "RL rollouts on a serving cluster's spare capacity under its SLO",
    ),
    "tres": (
        "commodel.studies.tres",
        "node-exclusive allocation vs consumable-resource packing: queue waits",
    ),
    "streamguard": (
        "commodel.studies.streamguard",
        "a real-time stream to its deadline: no resilience, VeloC, Flink-like and StreamGuard",
    ),
    "gpu-centric": ("commodel.studies.gpu_centric", "who drives a message: GPU-centric schemes per fabric"),
    "gicc": ("commodel.studies.gicc", "GPU-triggered communication for a stencil on Slingshot"),
    "gin": ("commodel.studies.gin", "NCCL's GPU-initiated networking on MoE dispatch and combine"),
    "ncclbpf": (
        "commodel.studies.ncclbpf",
        "a size-aware tuner policy vs NCCL's default choice, and its cost",
    ),
}


def check_parameters(spec: SweepSpec, path: str | Path) -> None:
    """A spec's ``[parameters]`` are inputs a shipped study's own module reads (the paper's setup);
    in any other spec nothing reads them, so an entry there is an error naming it, not a value
    silently ignored."""
    if spec.parameters and spec.study.name not in STUDIES:
        name = next(iter(spec.parameters))
        raise CommodelError(
            f"{path}: [parameters] '{name}' is read by nothing: [parameters] holds the inputs of a shipped "
            f"study's module ({', '.join(STUDIES)}), and this spec's study is '{spec.study.name}'; give a "
            "job's input in [fixed] or [variables]"
        )


def study_runner(name: str) -> Callable[[], StudyResult]:
    """The ``run`` function of study ``name`` (imported on demand)."""
    return import_module(pick("study", name, STUDIES)[0]).run


def run_study(name: str) -> StudyResult:
    """Run study ``name`` from its shipped specification."""
    return study_runner(name)()


__all__ = ["STUDIES", "Claim", "StudyResult", "run_study"]
