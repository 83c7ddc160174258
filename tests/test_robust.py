"""Uncertain hardware numbers, Monte Carlo bands of a sweep's designs and robust Pareto fronts."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from commodel.errors import CommodelError
from commodel.explore.robust import drivers, nan_percentiles
from commodel.explore.spec import load_spec
from commodel.explore.sweep import evaluate_all, run_sweep
from commodel.hardware.loader import OVERLAY_ENV, default_db, using
from commodel.hardware.schema import Link
from commodel.hardware.uncertain import ASSUMED_RANGE, draws, moved, uncertain_parameters
from commodel.records import validate_record

RATIOS = ({"collective": np.array([0.9, 1.0, 1.1, 1.05])}, {"gemm": np.array([0.98, 1.0, 1.02])})

LINK = {
    "description": "a test fabric",
    "kind": "infiniband",
    "bandwidth": {"value": "400 Gbit/s", "source": "datasheet"},
    "latency": {"value": "1 us", "source": "assumed: one switch"},
    "efficiency": {"value": 0.9, "source": "datasheet", "range": [0.8, 0.95]},
}


def test_a_stated_range_is_parsed_in_units_and_must_hold_the_value():
    link = validate_record(LINK, Link, "test.toml")
    assert link.efficiency.range == (0.8, 0.95)
    timed = {**LINK, "latency": {"value": "1 us", "source": "x", "range": ["0.5 us", "2 us"]}}
    assert validate_record(timed, Link, "test.toml").latency.range == pytest.approx((0.5e-6, 2e-6))
    with pytest.raises(CommodelError, match=r"test.toml: field 'efficiency'.*hold the value"):
        validate_record(
            {**LINK, "efficiency": {"value": 0.9, "source": "x", "range": [0.5, 0.8]}}, Link, "test.toml"
        )


def test_each_uncertain_number_names_its_source_and_facts_never_move():
    db = default_db()
    found = {p.label: p for p in uncertain_parameters(db, ["dgx-h100"], RATIOS)}
    # calibrated on one NVLS row: it varies as the collective class's held-out errors
    nvls = found["nvlink4.nvls_channel_bandwidth"]
    assert "4 held-out collective rows" in nvls.source
    assert (nvls.low, nvls.high) == pytest.approx(tuple(np.percentile(RATIOS[0]["collective"], (10, 90))))
    # calibrated where the class has too few held-out rows: residuals and held-out errors together
    assert "calibration residuals" in found["h100-sxm.matmul_efficiency.bf16"].source
    # assumed: the documented default range; a time's range is the inverse of a speed's
    assert (found["ib-ndr.efficiency"].low, found["ib-ndr.efficiency"].high) == ASSUMED_RANGE
    assert found["nvlink4.nvls_latency"].low == pytest.approx(1 / nvls.high)
    # datasheet values, counts and capacities stay put
    assert not any(
        k.endswith(("peak_flops.bf16", "compute_units", "memory_capacity", "links_per_gpu")) for k in found
    )


def test_moving_the_database_scales_values_caps_fractions_and_leaves_the_original_alone():
    db = default_db()
    params = [p for p in uncertain_parameters(db, ["dgx-h100"], RATIOS) if p.label in
              ("ib-ndr.efficiency", "ib-ndr.latency")]  # fmt: skip
    factors = np.array([1.25 if p.label == "ib-ndr.efficiency" else 2.0 for p in params])
    changed = moved(db, params, factors)
    assert changed.link("ib-ndr").efficiency.value == 1.0  # 0.96 x 1.25 capped: no path carries more
    assert changed.link("ib-ndr").latency.value == pytest.approx(2 * db.link("ib-ndr").latency.value)
    assert db.link("ib-ndr").efficiency.value == 0.96
    with using(changed):
        assert default_db() is changed
    assert default_db() is db


def test_draws_fill_each_range_uniformly_in_the_logarithm():
    params = uncertain_parameters(default_db(), ["dgx-b200"], RATIOS)
    f = draws(params, 200, seed=3)
    low, high = np.array([p.low for p in params]), np.array([p.high for p in params])
    assert f.shape == (200, len(params)) and np.all((f >= low) & (f <= high))
    assert np.allclose(np.median(np.log(f), axis=0), (np.log(low) + np.log(high)) / 2, atol=0.05)
    assert np.array_equal(f, draws(params, 200, seed=3))


def test_drivers_find_the_number_the_value_follows():
    rng = np.random.default_rng(0)
    f = np.exp(rng.uniform(-0.2, 0.2, size=(64, 3)))
    values = np.column_stack([f[:, 0] ** 2 * f[:, 1] ** 0.1, f[:, 2], np.ones(64)])
    best, share = drivers(np.log(f), values)
    assert list(best[:2]) == [0, 2] and share[0] > 0.9 and share[1] == pytest.approx(1.0)
    assert share[2] == 0.0  # a value that never moves has no driver


SPEC = """
[study]
name = "robust"
evaluate = "training"
constraints = ["fits == true"]
[fixed]
model = "llama3-70b"
train_tokens = 1e12
global_batch = 512
seq = 8192
sequence_parallel = true
zero = 1
recompute = "selective"
pp = 4
tp = 8
micro_batch = 1
overlap = "serial"
pue = 1.2
price_per_gpu_hour = 2.5
[variables]
system = { choice = ["dgx-h100", "dgx-b200"] }
fabric = { choice = ["roce-400g", "ib-ndr"] }
nodes = { int = [16, 64], log = true }
[objectives]
time_to_train_days = "min"
cost_usd = "min"
[uncertainty]
samples = 16
robust = "p90"
"""


def write(tmp_path: Path, text: str = SPEC, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("q", [(10, 90), 90, 0, 100, 37.5])
def test_band_percentiles_are_numpys_to_the_last_bit_for_every_column_at_once(q):
    """NumPy's nanpercentile calls itself once per column where any draw is NaN (a design failing under
    some draws); the vectorized one gives its numbers exactly, NaN for a column without values."""
    rng = np.random.default_rng(3)
    values = rng.lognormal(size=(60, 3000)) * 10.0 ** rng.integers(-3, 6, 3000)
    values[rng.random(values.shape) < 0.05] = np.nan
    values[:, :7] = np.nan
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning, match="All-NaN"):
        expected = np.nanpercentile(values, q, axis=0)
    assert np.array_equal(nan_percentiles(values, q), expected, equal_nan=True)
    assert np.all(nan_percentiles(np.full((5, 2), np.inf), 90) == np.inf)


def test_bands_hold_the_draws_and_a_wider_range_widens_them(tmp_path, monkeypatch):
    spec = load_spec(write(tmp_path))
    nominal = evaluate_all(spec)
    t, lo, hi, rob = (nominal[f"time_to_train_days{s}"] for s in ("", "_p10", "_p90", "_robust"))
    assert np.all(lo <= hi) and np.allclose(rob, hi)  # p90 of a minimized objective
    assert np.all((t >= lo * 0.97) & (t <= hi * 1.03))
    b200 = nominal.system == "dgx-b200"
    assert set(nominal.time_to_train_days_driver[b200]) == {"b200-sxm.matmul_efficiency.bf16"}

    def width(frame: pd.DataFrame) -> np.ndarray:
        return (frame.time_to_train_days_p90 / frame.time_to_train_days_p10)[
            frame.system == "dgx-b200"
        ].to_numpy()

    for low, high in ((0.6, 0.62), (0.4, 0.8)):
        overlay = tmp_path / f"b200-{low}.toml"
        overlay.write_text(
            f'[gpus.b200-sxm.matmul_efficiency]\nbf16 = {{ value = 0.613, source = "test", range = [{low}, {high}] }}\n'
        )
        monkeypatch.setenv(OVERLAY_ENV, str(overlay))
        if low == 0.6:
            narrow = width(evaluate_all(spec))
        else:
            wide = width(evaluate_all(spec))
    assert np.all(narrow < 1.05) and np.all(wide > 1.3)


def test_a_robust_sweep_writes_both_fronts_and_marks_who_drops_off(tmp_path):
    summary = run_sweep(load_spec(write(tmp_path)), tmp_path / "out", progress=False)
    front = pd.read_csv(tmp_path / "out" / "pareto.csv")
    robust = pd.read_csv(tmp_path / "out" / "pareto_robust.csv")
    assert (
        summary["robust_pareto"] == len(robust) and summary["off_robust_front"] == (~front.robust_front).sum()
    )
    assert set(front.point[front.robust_front]) == set(robust.point[robust.nominal_front])
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["robust_pareto"] == len(robust)
    # a Dask worker draws in its own process (it may not fork): the same draws, the same bands
    pytest.importorskip("dask.distributed")
    run_sweep(load_spec(write(tmp_path)), tmp_path / "dask", executor="dask", progress=False)
    pd.testing.assert_frame_equal(front, pd.read_csv(tmp_path / "dask" / "pareto.csv"))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ('robust = "p100"', "0 < NN < 100"),
        ('robust = "90"', "percentile 'pNN'"),
        ("band = [90, 10]", "0 < low < high < 100"),
        ("samples = 1", "greater than or equal to 2"),
    ],
)
def test_bad_uncertainty_sections_are_one_clear_error(tmp_path, section, message):
    text = SPEC.replace('samples = 16\nrobust = "p90"', section)
    with pytest.raises(CommodelError, match=message):
        load_spec(write(tmp_path, text))


def test_a_repeated_table_prices_as_the_evaluator_does_on_every_draw():
    """Monte Carlo draws price one table many times: held as columns, its inputs checked on the first
    call only, the objectives are the frame path's to the last bit, on the default and on a moved
    database; a table whose inputs break a rule stops at the first call."""
    from commodel.pricing.evaluator import evaluator, objective_values

    frame = pd.DataFrame(
        {"model": "llama3-70b", "system": ["dgx-h100", "dgx-b200", "mi300x-8"], "gpus": 64, "tp": 8, "pp": 2,
         "global_batch": 256, "train_tokens": 1e11, "price_per_gpu_hour": 2.0}
    )  # fmt: skip
    names = ["time_to_train_days", "energy_MWh", "cost_usd", "gpus"]
    training = evaluator("training")
    price = training.repeated(frame, names)
    params = uncertain_parameters(default_db(), ["dgx-h100", "dgx-b200", "mi300x-8"], RATIOS)
    db = moved(default_db(), params, np.linspace(0.8, 1.2, len(params)))
    seen = []
    for database in (default_db(), db):
        with using(database):
            seen.append(price())
            assert np.array_equal(seen[-1], objective_values(training(frame), names), equal_nan=True)
    assert not np.array_equal(seen[0], seen[1])  # the moved database moves the objectives
    with pytest.raises(CommodelError, match="--tp"):
        training.repeated(frame.assign(tp=0), names)()


def test_a_repeated_serving_table_reads_its_batch_as_the_frame_path_does():
    from commodel.pricing.evaluator import evaluator, objective_values

    frame = pd.DataFrame({"model": "llama3-8b", "system": "dgx-h100", "gpus": [1, 8], "tp": [1, 8],
                          "prompt": 1000, "output": 200, "batch": ["max", 8], "price_per_gpu_hour": 2.0})  # fmt: skip
    names = ["output_tokens_per_s", "cost_per_million_tokens_usd"]
    serving = evaluator("serving")
    assert serving.columns is not None
    assert np.array_equal(serving.repeated(frame, names)(), objective_values(serving(frame), names))
