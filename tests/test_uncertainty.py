"""Uncertainty bands from the validation record: honest coverage when a row does not inform its own
band, sensible bands on predictions, bad percentiles refused."""

import json

import pytest
from typer.testing import CliRunner

from commodel.cli import app
from commodel.errors import CommodelError
from commodel.uncertainty import band, coverage
from commodel.validate import validation_table


@pytest.fixture(scope="module")
def table():
    return validation_table()


def test_leave_one_out_coverage_of_the_80_percent_band_is_honest(table):
    covered = coverage(table)
    for kind in ("collective", "training", "serving"):
        share, rows = covered[kind]
        assert rows >= 15 and 0.65 <= share <= 0.95, (kind, share)


def test_bands_wrap_predictions_and_times_invert():
    result = CliRunner().invoke(
        app,
        ["train", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--uncertainty", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["tokens_per_s_p10"] < data["tokens_per_s_p90"]
    assert data["step_time_s_p10"] < data["step_time_s_p90"]
    b = band("training")
    assert data["step_time_s_p90"] == pytest.approx(data["step_time_s"] / b.low)
    assert "training rows" in data["band_source"]


@pytest.mark.parametrize("percentiles", [(0.0, 90.0), (90.0, 10.0), (10.0, 100.0)])
def test_a_percentile_outside_0_100_is_refused(percentiles):
    with pytest.raises(CommodelError, match="percentiles"):
        band("training", percentiles)
