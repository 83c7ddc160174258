"""Uncertainty bands from the models' own record: how far each model class lands from published
measurements (``commodel validate``), applied to a new prediction as an empirical distribution.

For each model class (collectives, training, serving, ...) the held-out validation rows (no constant
was fit to them) give ratios
``r = measured speed / model speed`` (a time row counts as ``model time / measured time``, so every
ratio reads "how much faster reality was"). A prediction of a speed ``v`` gets the band
``[v q_lo, v q_hi]`` with ``q`` the ratios' ``lo`` and ``hi`` percentiles; a prediction of a time
``t`` gets ``[t / q_hi, t / q_lo]``. The source of each band is named: the class and its row count.

:func:`parameter_bands` adds the other view: the prediction repeated on Monte Carlo draws of the
uncertain hardware numbers it uses (:mod:`commodel.hardware.uncertain`), with the number that drives
each band named.

The class bands are checked on the rows themselves without letting a row inform its own band: each row's
band comes from the other rows of its class (leave one out), and :func:`coverage` reports how often
the measurement falls inside; an 80% band should hold about 80% of the rows.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.hardware.loader import active_overlays, cache_dir, default_db
from commodel.hardware.uncertain import Uncertain, draws, drivers, on_draws, uncertain_numbers
from commodel.io import atomic_path, files_digest, prune_cache
from commodel.resources import resource_dir
from commodel.validate.gates import gates
from commodel.validate.table import validation_table
from commodel.workloads.model.catalog import model
from commodel.workloads.moe.dispatch import DEEPEP_NVL_PEERS
from commodel.workloads.training.hetero import is_node_groups, parse_node_groups
from commodel.workloads.training.host_issue import capturable_scopes

#: Metrics that are times (a larger value is slower); the rest are speeds.
TIME_METRICS = ("time", "step_time_s", "tpot_s")

#: The default band: 10th to 90th percentile.
BAND = (10.0, 90.0)


@dataclass(frozen=True)
class Band:
    """Percentile ratios of reality over the model for one model class, and what they came from."""

    kind: str
    low: float
    high: float
    rows: int

    @property
    def source(self) -> str:
        return f"commodel validate: {self.rows} {self.kind} rows"

    def speed(self, value: float) -> tuple[float, float]:
        """The band of a predicted speed (throughput, bandwidth, FLOP/s)."""
        return value * self.low, value * self.high

    def time(self, value: float) -> tuple[float, float]:
        """The band of a predicted time."""
        return value / self.high, value / self.low


def check_percentiles(low: float, high: float) -> None:
    if not 0 < low < high < 100:
        raise CommodelError(f"a band needs percentiles with 0 < low < high < 100, got {low:g} and {high:g}")


def _ratios(table: object, held_out: bool = True, gaps: bool = True) -> dict[str, np.ndarray]:
    """Reality-over-model speed ratios per model class, from a validation table: of the held-out rows,
    or (``held_out=False``) of every scored row, calibration residuals included; a published floor
    (``..._min``) is not a measurement and never counts. ``gaps=False`` leaves out the rows with a known
    gap (a mechanism the model lacks, not a constant off its value)."""
    scored = table[table.error_pct.notna() & ~table.metric.str.endswith("_min")]  # type: ignore[attr-defined]
    if held_out:
        scored = scored[scored.role == "validation"]
    if not gaps:
        scored = scored[~scored.id.isin(gates().known_gaps())]
    ratio = np.where(
        scored.metric.isin(TIME_METRICS), scored.model / scored.measured, scored.measured / scored.model
    )
    return {kind: ratio[(scored.kind == kind).to_numpy()] for kind in scored.kind.unique()}


def _inputs_digest() -> str:
    """A digest of everything ``commodel validate`` reads: commodel's code, its data, hardware and
    workload files, and the active hardware overlays."""
    roots = [Path(__file__).parents[1], *(resource_dir(n) for n in ("data", "hardware_db", "workloads"))]
    files = []
    for root in [*roots, *active_overlays()]:
        found = (
            [p for suffix in ("py", "csv", "toml") for p in root.rglob(f"*.{suffix}")]
            if root.is_dir()
            else [root]
        )
        files += sorted(p.resolve() for p in found)
    return files_digest(files, Path("/"))


@cache
def cached_validation_table() -> object:
    """``commodel validate``'s table, kept in the user's cache folder (Parquet) under a digest of its
    inputs (:func:`_inputs_digest`): any change to the code, data or overlays computes it afresh."""
    cached = cache_dir() / f"validation-{_inputs_digest()}.parquet"
    if cached.is_file():
        prune_cache(cached)
        try:
            return pd.read_parquet(cached)
        except (OSError, ValueError):  # a damaged cache: compute it below
            pass
    table = validation_table()
    try:
        with atomic_path(cached) as tmp:
            table.to_parquet(tmp, index=False)
        prune_cache(cached)
    except (OSError, ValueError):  # no writable cache folder, or a column Parquet cannot hold
        pass
    return table


def validation_ratios(held_out: bool = True, gaps: bool = True) -> dict[str, np.ndarray]:
    """:func:`_ratios` of ``commodel validate``'s own table (computed once per process)."""
    return _ratios(cached_validation_table(), held_out, gaps)


def hardware_uncertainty(names: Iterable[str]) -> list[Uncertain]:
    """The uncertain numbers of the hardware records ``names`` use, their ranges from ``commodel
    validate``'s errors (:func:`commodel.hardware.uncertain.uncertain_numbers` given
    :func:`validation_ratios`: held out, and every scored row), without the rows a known gap explains:
    a missing mechanism is no evidence about a constant's value."""
    ratios = (validation_ratios(gaps=False), validation_ratios(held_out=False, gaps=False))
    return uncertain_numbers(names, ratios)


def band(kind: str, percentiles: tuple[float, float] = BAND) -> Band:
    """The band of model class ``kind`` (collective, training, serving, ...)."""
    check_percentiles(*percentiles)
    ratios = validation_ratios()
    if kind not in ratios or len(ratios[kind]) < 3:
        raise CommodelError(f"no uncertainty band for {kind} predictions: fewer than 3 validation rows")
    low, high = np.percentile(ratios[kind], percentiles)
    return Band(kind, float(low), float(high), len(ratios[kind]))


def coverage(table: object, percentiles: tuple[float, float] = BAND) -> dict[str, tuple[float, int]]:
    """Per model class: the share of validation rows whose measurement falls inside the band built
    from the other rows of the class (leave one out), and the row count."""
    check_percentiles(*percentiles)
    out = {}
    for kind, ratios in _ratios(table).items():
        if len(ratios) < 4:
            continue
        inside = 0
        for i in range(len(ratios)):
            others = np.delete(ratios, i)
            low, high = np.percentile(others, percentiles)
            inside += low <= ratios[i] <= high
        out[kind] = (inside / len(ratios), len(ratios))
    return out


def coverage_table(table: object, percentiles: tuple[float, float] = BAND) -> object:
    """:func:`coverage` as a table: model class, rows, band, share of rows inside."""
    return pd.DataFrame(
        [{"kind": kind, "rows": rows, "band": f"p{percentiles[0]:g}-p{percentiles[1]:g}", "inside_pct": 100 * share}
         for kind, (share, rows) in coverage(table, percentiles).items()]
    )  # fmt: skip


def with_class_bands(
    result: dict,
    kind: str,
    speeds: tuple[str, ...],
    times: tuple[str, ...],
    percentiles: tuple[float, float] = BAND,
) -> dict:
    """``result`` with ``KEY_pLO`` and ``KEY_pHI`` for each speed and time key, and the band's source."""
    b = band(kind, percentiles)
    lo, hi = (f"p{p:g}" for p in percentiles)
    extra: dict = {"band_source": b.source}
    for key in speeds + times:
        low, high = (b.speed if key in speeds else b.time)(float(result[key]))
        extra[f"{key}_{lo}"], extra[f"{key}_{hi}"] = low, high
    return {**result, **extra}


def parameter_bands(
    run: Callable[[], Mapping],
    names: list[str],
    keys: tuple[str, ...],
    samples: int = 100,
    percentiles: tuple[float, float] = BAND,
    seed: int = 0,
) -> dict:
    """``KEY_params_pLO`` / ``_pHI`` for each of ``keys``: percentiles of ``run()`` (a prediction on
    the current hardware database: numbers, or arrays of them) over ``samples`` draws of the uncertain
    numbers of the records ``names`` use, ``KEY_params_driver`` (the number the key follows most, with
    its share of the variance) and the source. Scalars in, scalars out."""
    check_percentiles(*percentiles)
    parameters = hardware_uncertainty(names)
    factors = draws(parameters, samples, seed)
    results = on_draws(lambda _: run(), parameters, factors)
    # A draw can move a design out of its memory (a faster stage given more layers): it has no
    # throughput to spread, and the band is over the draws that fit.
    fits = np.array([all(k in r for k in keys) for r in results])
    if not fits.any():
        raise CommodelError(
            f"the design fits in none of the {samples} draws of its uncertain hardware numbers"
        )
    results, factors = [r for r, ok in zip(results, fits, strict=True) if ok], factors[fits]
    values = np.array([[np.atleast_1d(np.asarray(r[k], dtype=float)) for k in keys] for r in results])
    scalar = all(np.ndim(results[-1][k]) == 0 for k in keys)
    low, high = np.percentile(values, percentiles, axis=0)
    lo, hi = (f"p{p:g}" for p in percentiles)
    labels = [p.label for p in parameters]
    unfit = f", {int((~fits).sum())} of which do not fit" if not fits.all() else ""
    extra: dict = {"params_source": f"{samples} draws of {len(parameters)} uncertain hardware numbers{unfit}"}
    for i, key in enumerate(keys):
        extra[f"{key}_params_{lo}"], extra[f"{key}_params_{hi}"] = low[i], high[i]
        if parameters:
            best, share = drivers(np.log(factors), values[:, i, :])
            extra[f"{key}_params_driver"] = np.where(
                share >= 0.005,
                [f"{labels[b]} ({100 * r:.0f}%)" for b, r in zip(best, share, strict=True)],
                "",
            )
    if scalar:
        extra = {k: v if isinstance(v, str) else v.item() for k, v in extra.items()}
    return extra


def parameter_coverage(samples: int = 32, percentiles: tuple[float, float] = BAND, seed: int = 0) -> object:
    """How often the band of the hardware's uncertain numbers alone holds a held-out measurement: every
    ``commodel validate`` row priced on ``samples`` draws of every uncertain number in the database;
    per model class, the share of held-out rows whose measurement lies in the row's band. (A
    calibrated number's range comes from its class's error spread, not from any one row's error.)"""
    check_percentiles(*percentiles)
    base = default_db()
    parameters = hardware_uncertainty(n for kind in ("system", "gpu", "link") for n in base.table(kind))
    table = cached_validation_table()
    priced = on_draws(lambda _: validation_table().model.to_numpy(dtype=float), parameters,
                      draws(parameters, samples, seed))  # fmt: skip
    with warnings.catch_warnings():  # rows without a model are NaN in every draw
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanpercentile(np.array(priced), percentiles, axis=0)
    held = (table.role == "validation") & table.error_pct.notna()
    inside = (table.measured >= low) & (table.measured <= high)
    return pd.DataFrame(
        [{"kind": kind, "rows": int(rows.sum()), "band": f"p{percentiles[0]:g}-p{percentiles[1]:g}",
          "inside_pct": 100 * float(inside[rows].mean()), "parameters": len(parameters), "draws": samples}
         for kind in table.kind[held].unique() if (rows := held & (table.kind == kind)).sum() >= MIN_COVERAGE_ROWS]
    )  # fmt: skip


#: Held-out rows a class needs before its coverage is reported.
MIN_COVERAGE_ROWS = 4


#: Predictions each kind of job puts a band around: (speeds, times).
JOB_KEYS = {
    "training": (("tokens_per_s",), ("step_time_s", "time_to_train_days")),
    "serving": (("output_tokens_per_s",), ("ttft_s", "tpot_s")),
}


def job_bands(kind: str, result: dict, run: Callable[..., Mapping], job: Mapping[str, object]) -> dict:
    """A job's ``result`` (of ``kind``: training or serving) with its model class's band
    (:func:`with_class_bands`), the band of the uncertain numbers of the hardware records the job
    names (:func:`parameter_bands`, ``run`` pricing the job again on each draw) and, for training, the
    software regime's (:func:`regime_bands`)."""
    speeds, times = JOB_KEYS[kind]
    if any(result.get(key) is None for key in speeds + times):  # no step or latency: nothing to spread
        return {
            **result,
            "bands": "none: the job does not fit, so it has no speed or time to put a band around",
        }
    names = [name for v in job.values() if isinstance(v, str) for name in re.split(r"[,:]", v)]
    bands = {**with_class_bands(result, kind, speeds, times), **parameter_bands(run, names, speeds + times)}
    return {**bands, **regime_bands(kind, result, run, job)}


def regime_settings(kind: str, job: Mapping[str, object], result: Mapping) -> dict[str, object]:
    """The software settings a job leaves at their defaults that move it as much as the hardware
    does, each with the value a tuned engine or recipe sets (:func:`training_regime`; serving: the
    overlap scheduler's host loop and paged KV where the job leaves them serial and full)."""
    if kind == "training":
        return training_regime(job, result)
    tuned: dict[str, object] = {}
    if job.get("host_schedule", "serial") == "serial":
        tuned["host_schedule"] = "overlapped"
    if job.get("kv_reserve", "full") == "full" and not job.get("prefill_gpus"):
        tuned["kv_reserve"] = "paged"
    return tuned


def training_regime(job: Mapping[str, object], result: Mapping) -> dict[str, object]:
    """A training job's regime settings: CUDA graphs of every scope the model can capture, the flex
    dispatcher for expert parallelism (HybridEP where the NVLink domain outgrows DeepEP's 8 peers,
    else DeepEP), Transformer Engine's userbuffers overlap for tensor parallelism with sequence
    parallelism."""
    net, tuned = model(str(job["model"])), {}
    if not job.get("cuda_graphs"):
        tuned["cuda_graphs"] = capturable_scopes(net, padded=job.get("capacity_factor") is not None)
    if (
        net.moe is not None
        and int(result["layout"]["ep"]) > 1
        and job.get("dispatcher", "alltoall") == "alltoall"
    ):
        system = str(job["system"])
        names = [name for name, _ in parse_node_groups(system)] if is_node_groups(system) else [system]
        domain = min(cluster(name).domain_gpus for name in names)  # the narrowest group's NVLink domain
        tuned["dispatcher"] = "hybridep" if domain > DEEPEP_NVL_PEERS else "deepep"
    if (
        int(result["layout"]["tp"]) > 1
        and job.get("sequence_parallel")
        and job.get("tp_overlap", "none") == "none"
    ):
        tuned["tp_overlap"] = "userbuffers"
    return tuned


def regime_bands(kind: str, result: Mapping, run: Callable[..., Mapping], job: Mapping[str, object]) -> dict:
    """The range of a job's speed and time over the software settings it leaves at their defaults
    (:func:`regime_settings`): the job priced with each tuned setting alone and all together;
    ``regime_settings`` names them (empty: the job states every one, and the band is its value)."""
    tuned = regime_settings(kind, job, result)
    variants = [{name: value} for name, value in tuned.items()] + ([tuned] if len(tuned) > 1 else [])
    priced = [result]
    for changes in variants:
        try:
            priced.append(run(**changes))
        except CommodelError:  # a setting this layout cannot take (an overlay's system, a rule)
            continue
    speeds, times = JOB_KEYS[kind]
    out: dict = {"regime_settings": ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in tuned.items())}
    for key in speeds + times:
        values = [float(r[key]) for r in priced]
        out[f"{key}_regime_low"], out[f"{key}_regime_high"] = min(values), max(values)
    return out


def table_bands(
    kind: str,
    frame: pd.DataFrame,
    run: Callable[[], pd.DataFrame],
    system: str,
    time: str,
    speeds: tuple[str, ...],
) -> pd.DataFrame:
    """A command's table (``commodel collective``'s, ``comm dispatch``'s) with its model class's band
    (``kind``) on the ``time`` column and the ``speeds`` columns, and the band of the system's
    uncertain numbers (``run`` pricing the table again on each draw) with what drives it; the bands'
    sources and the class band's factors on time are in ``attrs``."""
    b = band(kind)
    bands = dict(zip((f"{time}_p10", f"{time}_p90"), b.time(frame[time]), strict=True))
    for key in speeds:
        bands |= dict(zip((f"{key}_p10", f"{key}_p90"), b.speed(frame[key]), strict=True))
    params = parameter_bands(run, [system], (time, *speeds))
    out = frame.assign(**bands, **{k: v for k, v in params.items() if k != "params_source"})
    out.attrs = {
        "band_source": b.source,
        "time_factors": (1 / b.high, 1 / b.low),
        "params_source": params["params_source"],
    }
    return out
