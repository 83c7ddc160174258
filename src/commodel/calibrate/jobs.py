"""Fit the constants a user's training or serving runs depend on, inside their stated uncertainty.

**Which constants.** Every uncertain number of the records the runs' systems use
(:func:`commodel.validate.bands.hardware_uncertainty`: a GPU's GEMM and memory efficiency per dtype,
the host's cost per operator and per CUDA-graph replay, the links' efficiencies and latencies, ...),
each bounded by its range: a calibrated number's from ``commodel validate``'s held-out errors, an
assumed one's from its record or the assumed factor. A fit never leaves that range: a run the model
misses by more than its constants can move points at a mechanism the model lacks, and the report says
the constant stopped at its bound.

**How many.** The constants the runs determine (:func:`commodel.calibrate.fit.determined`) are chosen
greedily, the one that lowers the runs' mean |log error| most first, up to one per run (one run
cannot tell two constants apart); a constant is added only if it lowers that mean by
:data:`~commodel.calibrate.fit.MIN_GAIN`. Each fit is :func:`commodel.calibrate.fit.fit`: never a worse
median error than the defaults, and with no gain, no overlay.

**Held out** (:func:`leave_one_out`): with two or more runs, each in turn is predicted by the
constants fit on the others, the error before and after: what a user learns about the next design.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np
import pandas as pd

from commodel.calibrate.fit import MIN_GAIN, Bounded, Fit, determined, fit, mean_log_error, median_error_pct
from commodel.calibrate.measured import MeasuredRun, about, fail
from commodel.calibrate.overlay import residual_range, system_overlay
from commodel.errors import CommodelError
from commodel.hardware.loader import default_db, using
from commodel.hardware.uncertain import Uncertain, moved
from commodel.pricing.run import serve, train
from commodel.pricing.training_job import TrainingJob
from commodel.validate.bands import hardware_uncertainty

#: The least spread (high over low factor) a constant's range needs to be fit: a narrower one is a
#: number validation already pins.
MIN_SPREAD = 1.01

#: Metrics where a larger value is a faster run.
RATES = ("tokens_per_s_per_gpu", "output_tokens_per_s")


def model_value(run: MeasuredRun) -> float:
    """The model's value of the metric ``run`` measured, on the database in use; a job the model
    says does not fit is an error (the run did fit: the model's memory is what is wrong)."""
    with about(run.path):
        result = train(run.job) if isinstance(run.job, TrainingJob) else serve(run.job)
    training = isinstance(run.job, TrainingJob)
    name = "tokens_per_s" if run.metric == "tokens_per_s_per_gpu" else run.metric
    value = _or_nan(result.get(name))
    if run.metric == "tokens_per_s_per_gpu":
        value = value / result["gpus"]
    if not np.isfinite(value):
        memory = _or_nan(result.get("memory_per_gpu_bytes")) / 2**30
        settings = "the log's recomputation" if training else "the server's --tp, --ep and --dtype"
        raise fail(
            run.path,
            f"the run fit its GPUs but the model puts {memory:.1f} GiB on each of {run.job.system}'s: check "
            f"--system (a GPU with more memory?) and {settings}; a run the model cannot price calibrates "
            "nothing",
        )
    return float(value)


def _or_nan(value: object) -> float:
    """An output as a float: NaN where the model gives none (a job that does not fit has no step and no
    throughput)."""
    return float("nan") if value is None else float(value)


def memory_note(run: MeasuredRun) -> str:
    """The log's peak memory per GPU beside the model's (the model's holds the CUDA context, NCCL's
    buffers and the allocator's share a log's allocated bytes leave out), or "" where it has none."""
    if run.peak_memory_bytes is None or not isinstance(run.job, TrainingJob):
        return ""
    model = train(run.job)["memory_per_gpu_bytes"]
    return (
        f"; peak memory {run.peak_memory_bytes / 2**30:.1f} GiB per GPU, the model's {model / 2**30:.1f} GiB"
    )


def _residuals(runs: list[MeasuredRun], chosen: list[Uncertain], factors: np.ndarray) -> np.ndarray:
    """``log(model / measured)`` of each run with the chosen constants moved by ``factors``."""
    with using(moved(default_db(), chosen, factors)):
        return np.log([model_value(run) / run.value for run in runs])


def factor_bounds(number: Uncertain) -> Bounded:
    """A constant's factor range, a fraction capped at 1 (no efficiency above the path)."""
    high = min(number.high, 1 / number.value) if number.fraction else number.high
    return Bounded(number.label, 1.0, (number.low, max(high, 1.0)))


@dataclass(frozen=True)
class RunCalibration:
    """The constants moved (``fitted``: label -> factor), every run's model value and error before
    and after, and the constants the runs determine."""

    runs: list[MeasuredRun]
    candidates: list[Uncertain]
    fitted: dict[str, float]
    before: np.ndarray
    after: np.ndarray
    determined: tuple[str, ...]

    def table(self) -> pd.DataFrame:
        """One row per run: the measured value, the model's before and after, errors in %."""
        measured = np.array([r.value for r in self.runs])
        return pd.DataFrame(
            {
                "log": [r.name for r in self.runs],
                "metric": [r.metric for r in self.runs],
                "measured": measured,
                "model_before": measured * np.exp(self.before),
                "model_after": measured * np.exp(self.after),
                "error_before_pct": 100 * np.expm1(self.before),
                "error_after_pct": 100 * np.expm1(self.after),
            }
        )

    def constants(self) -> list[tuple[Uncertain, float]]:
        """Each moved constant with its factor."""
        return [(c, self.fitted[c.label]) for c in self.candidates if c.label in self.fitted]

    def predict(self, run: MeasuredRun) -> tuple[float, float]:
        """A run's error (%) with the defaults and with this fit's constants."""
        chosen = [c for c, _ in self.constants()]
        factors = np.array([f for _, f in self.constants()])
        before, after = (
            _residuals([run], *moved_by)[0] for moved_by in (([], np.ones(0)), (chosen, factors))
        )
        return 100 * float(np.expm1(before)), 100 * float(np.expm1(after))

    def at_bound(self, number: Uncertain) -> bool:
        """Whether the fit moved ``number`` to an end of its range: the runs ask for more than its
        uncertainty allows."""
        factor = self.fitted.get(number.label)
        return factor is not None and any(abs(factor / b - 1) < 1e-3 for b in factor_bounds(number).bounds)

    def speed_ratios(self) -> np.ndarray:
        """Reality's speed over the model's, per run, after the fit."""
        rates = np.array([r.metric in RATES for r in self.runs])
        return np.where(rates, np.exp(-self.after), np.exp(self.after))

    def overlay(self, command: str) -> dict:
        """The hardware overlay with the moved constants (:mod:`commodel.calibrate.overlay`), or
        ``{}`` when none moved; one system's logs only (the runs' system)."""
        if not self.fitted:
            return {}
        systems = {r.job.system for r in self.runs}
        if len(systems) != 1:
            raise CommodelError(f"the logs ran on {len(systems)} systems; calibrate one system at a time")
        names = ", ".join(r.name for r in self.runs)
        source = (
            f"calibrated: commodel calibrate {command} {names} ({len(self.runs)} run(s); median |error| "
            f"{median_error_pct(self.before):.1f}% -> {median_error_pct(self.after):.1f}%; {date.today().isoformat()})"
        )
        changes = {(c.kind, c.name, c.path): c.value * factor for c, factor in self.constants()}
        ratios = self.speed_ratios()
        ranges = {
            (c.kind, c.name, c.path): residual_range(c.value * f, ratios, c.time) for c, f in self.constants()
        }
        return system_overlay(default_db(), systems.pop(), changes, source, ranges)


def calibrate_runs(runs: list[MeasuredRun], limit: int | None = None) -> RunCalibration:
    """Fit the constants ``runs`` depend on (module docstring); ``limit``: at most this many (default
    one per run)."""
    if not runs:
        raise CommodelError("give at least one log")
    systems = sorted({r.job.system for r in runs})
    candidates = [c for c in hardware_uncertainty(systems) if c.high > c.low * MIN_SPREAD]
    bounds = [factor_bounds(c) for c in candidates]
    moving = [candidates[i] for i in determined(bounds, lambda f: _residuals(runs, candidates, f))]
    defaults = _residuals(runs, [], np.ones(0))
    best = Fit(None, defaults, defaults)
    chosen: list[Uncertain] = []
    for _ in range(min(limit or len(runs), len(runs), len(moving))):
        trials = {
            c.label: fit(
                [factor_bounds(x) for x in (*chosen, c)], lambda f, c=c: _residuals(runs, [*chosen, c], f)
            )
            for c in moving
            if c not in chosen
        }
        label, trial = min(trials.items(), key=lambda kv: mean_log_error(kv[1].after))
        if trial.values is None or mean_log_error(best.after) - mean_log_error(trial.after) < MIN_GAIN:
            break
        chosen.append(next(c for c in moving if c.label == label))
        best = Fit(trial.values, best.before, trial.after)
    fitted = (
        {}
        if best.values is None
        else dict(zip((c.label for c in chosen), map(float, best.values), strict=True))
    )
    return RunCalibration(runs, candidates, fitted, best.before, best.after, tuple(c.label for c in moving))


def leave_one_out(runs: list[MeasuredRun], limit: int | None = None) -> pd.DataFrame:
    """Each run predicted by the constants fit on the others: its error with the defaults and with
    that fit (%), and which constants moved."""
    if len(runs) < 2:
        raise CommodelError("--check needs two or more logs: each is predicted from the others")
    rows = []
    for i, run in enumerate(runs):
        fitted = calibrate_runs(runs[:i] + runs[i + 1 :], limit)
        before, after = fitted.predict(run)
        moved_text = ", ".join(f"{c.label} x{f:.3g}" for c, f in fitted.constants()) or "none"
        rows.append({"held_out": run.name, "error_defaults_pct": before, "error_fitted_pct": after,
                     "fit_on_others": moved_text})  # fmt: skip
    return pd.DataFrame(rows)
