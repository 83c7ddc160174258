"""The run settings behind the published measurements, as data (``data/runs.toml``): the job each
end-to-end training row and power load ran, what each latency row measured, which facility PUE a row
sets, and what Megatron-Bridge's recipes set beyond the layout their performance tables state.

Read once per process and checked strictly: an unknown key, a bad value or a job the training
declaration (:class:`~commodel.pricing.training_job.TrainingJob`) refuses is an error naming the file and the
field.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import Field, model_validator

from commodel.pricing.training_job import TrainingJob
from commodel.records import Strict, read_toml, validate_record
from commodel.resources import resource_dir


class TrainingRun(Strict):
    """A published training run: the job as its source states it, the metric the source reports,
    and how the source counts attention FLOPs (``causal``: half the square, as Megatron-Bridge does;
    ``full``: Narayanan et al. 2021, Megatron-LM's README)."""

    metric: Literal["tflops_per_gpu", "hw_tflops_per_gpu", "tokens_per_s_per_gpu", "mfu"]
    attention_flops: Literal["causal", "full"] = "causal"
    job: TrainingJob


class PowerRun(Strict):
    """The training load a node-power row is priced under."""

    job: TrainingJob


class LatencyRun(Strict):
    """What a latency row measured: a kernel launch of the GPU ``launch_of``, a small put by
    ``scheme`` between two nodes of ``system`` (round trip or one way; after a kernel ends or not), or
    the host time of one ``module``'s forward on ``system``'s host."""

    launch_of: str = ""
    scheme: str = ""
    module: Literal["", "torch-linear", "te-linear"] = ""
    system: str = ""
    round_trip: bool = False
    after_kernel: bool = False

    @model_validator(mode="after")
    def _one_kind(self) -> LatencyRun:
        kinds = [bool(self.launch_of), bool(self.scheme and self.system), bool(self.module and self.system)]
        if sum(kinds) != 1:
            raise ValueError(
                "give launch_of (a GPU), scheme and system (a put between two nodes), or module and system "
                "(a module's host time)"
            )
        return self


class PipelineLayout(Strict):
    pp: int = Field(ge=1)
    vp: int = Field(ge=1)
    layout: str


class RecipeSettings(Strict):
    """What Megatron-Bridge's recipe for a model sets beyond the layout its performance rows state
    (``data/runs.toml`` says what each setting means and where it comes from)."""

    ends_as_layers: bool = False
    bf16_moments: bool = False
    seq: int | None = Field(default=None, ge=1)
    layouts: list[PipelineLayout] = []

    def layout(self, pp: int, vp: int) -> str:
        """The recipe's pipeline layout for ``pp x vp`` ("" if it has none)."""
        return next((x.layout for x in self.layouts if (x.pp, x.vp) == (pp, vp)), "")


class Recipes(Strict):
    dtypes: dict[str, str]
    models: dict[str, RecipeSettings] = {}


class Runs(Strict):
    """``data/runs.toml``."""

    hardware_by_gpu: list[tuple[str, str, str]]
    training: dict[str, TrainingRun] = {}
    power: dict[str, PowerRun] = {}
    latency: dict[str, LatencyRun] = {}
    facility: dict[str, Literal["load-proportional", "baseline"]] = {}
    recipes: Recipes


@cache
def runs() -> Runs:
    """``data/runs.toml``, validated (read once per process)."""
    path = resource_dir("data") / "runs.toml"
    return validate_record(read_toml(path), Runs, path)
