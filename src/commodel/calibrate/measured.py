"""What every run-log parser returns: the job a run priced as, the value it measured, and how the value
was read; with the helpers the parsers share (the steady iterations, the model a log names or
describes, ``name .... value`` settings)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from commodel.errors import CommodelError, suggest
from commodel.pricing.job import Job
from commodel.pricing.training_job import TrainingJob, training_job
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.model.catalog import models
from commodel.workloads.model.schema import Transformer

#: Iterations a training log's first reports cover that are warm-up (the first step's allocation,
#: NCCL's communicators, CUDA-graph capture, torch.compile), and never a steady report.
WARMUP_ITERATIONS = 3


@dataclass(frozen=True)
class MeasuredRun:
    """One run of a user's log: the job it ran, the metric it measured (``step_time_s``,
    ``tokens_per_s_per_gpu`` or ``output_tokens_per_s``), its value, how it was read (``how``:
    which reports were kept, and why), and the peak memory per GPU the log reports (bytes; ``None``
    where it reports none)."""

    path: Path
    job: Job
    metric: str
    value: float
    how: str
    peak_memory_bytes: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.value) and self.value > 0):
            raise fail(self.path, f"its {self.metric} is {self.value:g}: not a positive number")

    @property
    def name(self) -> str:
        return self.path.name


def fail(path: Path, message: str) -> CommodelError:
    """A one-line error about a log: the file and what is wrong with it."""
    return CommodelError(f"{path}: {message}")


@contextmanager
def about(path: Path) -> Iterator[None]:
    """Inside the block, an error (a job the log states that commodel refuses, a run the model cannot
    price) names the log it came from."""
    try:
        yield
    except CommodelError as exc:
        raise fail(path, str(exc)) from None


def reported(path: Path, text: str, what: str) -> float:
    """A number a log reports (``what``, and where), thousands separators allowed: text that is no
    number is an error naming it, not a report passed over (whose iterations the median would lose)."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise fail(path, f"the {what} is '{text}': not a number") from None


def steady_median(path: Path, iterations: list[int], values: list[float], what: str) -> tuple[float, str]:
    """The median of ``values`` over the reports past warm-up: a report whose iterations may include
    one of the first :data:`WARMUP_ITERATIONS` is dropped (a report at iteration ``i`` covers the
    iterations since the previous report), and the description says how many were."""
    if not values:
        raise fail(path, f"no {what} reported: the log ends before the first iteration report")
    for iteration, value in zip(iterations, values, strict=True):
        if not (math.isfinite(value) and value > 0):
            raise fail(path, f"the {what} at iteration {iteration} is {value:g}: not a positive number")
    starts = [0, *iterations[:-1]]
    kept = [v for start, v in zip(starts, values, strict=True) if start >= WARMUP_ITERATIONS]
    if not kept:
        raise fail(
            path,
            f"every {what} report includes warm-up (the first {WARMUP_ITERATIONS} iterations); run "
            "longer or log more often",
        )
    dropped = len(values) - len(kept)
    how = (
        f"median {what} of {len(kept)} report(s) to iteration {iterations[-1]}, "
        f"the first {dropped} dropped as warm-up (iterations 1-{WARMUP_ITERATIONS} are never steady)"
    )
    return float(np.median(kept)), how


#: How far a figure every report shares may differ between reports: the printed rounding of the
#: numbers it is made of.
ONE_NUMBER = 0.01


def one_number(path: Path, values: list[tuple[int, float]], what: str) -> None:
    """Where each report's ``what`` (per step or iteration, the value of ``values``) is one number for
    the run, such as the FLOPs of an iteration at one batch: a report off their median by more than
    :data:`ONE_NUMBER` has one of its figures edited, or comes from another run."""
    if not values:
        return
    typical = float(np.median([value for _, value in values]))
    for step, value in values:
        if abs(value - typical) > ONE_NUMBER * typical:
            raise fail(
                path,
                f"the report at {step} gives {value / typical:.3g}x the {what} of the others: an edited or "
                "mixed log",
            )


def peak_memory(pattern: re.Pattern[str], text: str, unit: float) -> float | None:
    """The largest memory the log's reports give (``pattern``'s first group, in ``unit`` bytes), or
    ``None`` where it gives none."""
    found = [float(m[1]) * unit for m in pattern.finditer(text)]
    return max(found) if found else None


def named_model(path: Path, name: str) -> str:
    """The shipped model a log names (a Hugging Face id such as ``meta-llama/Llama-3.1-8B`` or a
    commodel name), else an error suggesting ``--model``."""
    table = models()
    short = name.rstrip("/").split("/")[-1].lower().replace("meta-llama-", "llama").replace("llama-", "llama")
    bare = re.sub(r"(-(instruct|base|hf|fp8|fp4|bf16|\d{4}))+$", "", short)
    candidates = (short, bare)
    found = next((c for c in candidates if c in table), None)
    if found is None:
        raise fail(
            path, f"the run's model '{name}' is none of commodel's{suggest(short, table)}; give --model"
        )
    return found


def described_model(path: Path, shape: Mapping[str, int]) -> str:
    """The shipped model whose architecture is ``shape`` (``layers``, ``hidden``, ``heads``,
    ``ffn_hidden``; ``experts`` 0 for a dense model), else an error naming the shape."""
    matches = {id(m): n for n, m in models().items() if _shape(m) == dict(shape)}
    if len(matches) == 1:
        return next(iter(matches.values()))
    said = ", ".join(f"{k} {v}" for k, v in shape.items())
    if not matches:
        raise fail(path, f"the run's model ({said}) is none of commodel's; give --model NAME or a model file")
    raise fail(
        path, f"the run's model ({said}) could be {' or '.join(sorted(matches.values()))}; give --model"
    )


def _shape(m: Transformer) -> dict[str, int]:
    ffn = m.moe.expert_ffn_hidden if m.moe is not None else m.ffn_hidden
    return {
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "ffn_hidden": ffn,
        "experts": m.moe.experts if m.moe is not None else 0,
    }


def model_of(given: str | None, found: Callable[[], str]) -> str:
    """The ``--model`` given (checked), else the one the log names or describes."""
    if given is not None:
        get_model(given)
        return given
    return found()


def setting(path: Path, settings: Mapping[str, Any], name: str, kind: type = int, default: Any = None) -> Any:
    """A log setting as ``kind`` (``None``/``"None"`` and a missing one give ``default``), or one
    error naming it."""
    value = settings.get(name)
    if value is None or value == "None":
        if default is None:
            raise fail(path, f"the log does not state {name}")
        return default
    if kind is bool:
        if isinstance(value, bool):
            return value
        if str(value) in ("True", "False"):
            return str(value) == "True"
        raise fail(path, f"{name} = {value!r}: expected True or False")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise fail(path, f"{name} = {value!r}: expected {kind.__name__}") from None
    if kind in (int, float) and not (math.isfinite(number) and number >= 0):
        raise fail(path, f"{name} = {value!r}: expected a non-negative number")
    return number


def training(path: Path, model: str, system: str, settings: Mapping[str, Any]) -> TrainingJob:
    """The training job a log states, or one error naming the file and what the job refuses."""
    with about(path):
        return training_job(model=model, system=system, **settings)
