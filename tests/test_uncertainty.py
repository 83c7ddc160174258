"""Uncertainty bands from the validation record: honest coverage when a row does not inform its own
band, sensible bands on predictions, bad percentiles refused."""

import json

import pytest
from typer.testing import CliRunner

from commodel.cli import app
from commodel.errors import CommodelError
from commodel.validate import validation_table
from commodel.validate.bands import band, coverage


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
        [
            *("train", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--recompute", "full"),
            "--uncertainty",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["tokens_per_s_p10"] < data["tokens_per_s_p90"]
    assert data["step_time_s_p10"] < data["step_time_s_p90"]
    b = band("training")
    assert data["step_time_s_p90"] == pytest.approx(data["step_time_s"] / b.low)
    assert "training rows" in data["band_source"]
    # the hardware's uncertain numbers: a band around the same prediction, and what drives it
    assert (
        data["tokens_per_s_params_p10"]
        <= data["tokens_per_s"] * 1.01
        <= data["tokens_per_s_params_p90"] * 1.02
    )
    assert "uncertain hardware numbers" in data["params_source"]
    assert data["step_time_s_params_driver"].startswith("h100-sxm.matmul_efficiency.bf16")


def test_a_collectives_parameter_band_follows_the_fabric_it_crosses():
    args = ["collective", "allreduce", "--system", "dgx-h100", "--size", "256MiB", "--uncertainty", "--json"]
    inside = json.loads(CliRunner().invoke(app, args).output)[0]
    across = json.loads(CliRunner().invoke(app, [*args, "--nodes", "4"]).output)[0]
    assert "nvlink4" in inside["busbw_GBps_params_driver"] and "ib-ndr" in across["busbw_GBps_params_driver"]
    assert across["busbw_GBps_params_p10"] < across["busbw_GBps"] <= across["busbw_GBps_params_p90"]


def test_a_dispatchs_bands_come_from_the_deepep_rows_and_the_link_it_waits_on():
    """comm dispatch --uncertainty: the DeepEP rows' class band around each call, and a parameter band
    from the uncertain number the call waits on: inside a node DeepEP's own share of NVLink (NVLink's
    numbers are stated without a range; the share is calibrated, so the DeepEP rows' spread is its
    range), across nodes the network's efficiency."""
    args = ["comm", "dispatch", "--system", "hgx-h800", "--mode", "high-throughput", "--tokens", "4096",
            "--uncertainty", "--json"]  # fmt: skip
    inside = json.loads(CliRunner().invoke(app, args).output)[0]
    across = json.loads(CliRunner().invoke(app, [*args, "--ep", "32"]).output)[0]
    assert inside["time_us_p10"] < inside["time_us"] < inside["time_us_p90"]
    assert across["rdma_GBps_p10"] < across["rdma_GBps"] < across["rdma_GBps_p90"]
    assert inside["time_us_params_p10"] < inside["time_us_params_p90"]
    assert inside["time_us_params_driver"].startswith("h100-sxm.expert_dispatch.nvlink_share")
    assert across["time_us_params_p10"] < across["time_us_params_p90"]
    assert across["time_us_params_driver"].startswith("ib-ndr.efficiency")


@pytest.mark.parametrize("percentiles", [(0.0, 90.0), (90.0, 10.0), (10.0, 100.0)])
def test_a_percentile_outside_0_100_is_refused(percentiles):
    with pytest.raises(CommodelError, match="percentiles"):
        band("training", percentiles)


def test_thecached_validation_table_is_kept_under_a_digest_of_what_it_reads(tmp_path, monkeypatch):
    """Bands read ``commodel validate``'s table; the first process computes it and keeps it in the
    cache folder, the next reads it back unchanged without running validate; an overlay (any input)
    changes the digest, so a changed input is never served a stale table."""
    import pandas as pd

    from commodel.hardware.loader import OVERLAY_ENV
    from commodel.validate import bands as uncertainty

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    uncertainty.cached_validation_table.cache_clear()
    first = uncertainty.cached_validation_table()
    assert list((tmp_path / "commodel").glob("validation-*.parquet"))
    uncertainty.cached_validation_table.cache_clear()
    monkeypatch.setattr(uncertainty, "validation_table", lambda: pytest.fail("validate ran again"))
    read = ["id", "kind", "role", "metric", "measured", "model", "error_pct"]  # what the bands read
    pd.testing.assert_frame_equal(uncertainty.cached_validation_table()[read], first[read])
    digest = uncertainty._inputs_digest()
    overlay = tmp_path / "mine.toml"
    overlay.write_text('[gpus.h100-sxm]\ntdp = { value = "650 W", source = "mine" }\n')
    monkeypatch.setenv(OVERLAY_ENV, str(overlay))
    assert uncertainty._inputs_digest() != digest
    uncertainty.cached_validation_table.cache_clear()


def test_the_software_regime_band_names_the_defaults_and_holds_the_value():
    """A training job that leaves CUDA graphs and the dispatcher at their defaults gets a band over the
    tuned settings, which holds its own value; one that states them gets a band of its value alone."""
    from commodel.pricing.run import train
    from commodel.validate.bands import regime_bands

    job = {
        "model": "qwen3-30b-a3b",
        "system": "gb200-nvl72",
        "gpus": 8,
        "ep": 8,
        "seq": 4096,
        "global_batch": 64,
    }
    result = train(**job)
    band = regime_bands("training", result, lambda **changes: train(**{**job, **changes}), job)
    assert "--cuda-graphs attn,moe_router,moe_preprocess" in band["regime_settings"]
    assert "--dispatcher hybridep" in band["regime_settings"]  # the rack outgrows DeepEP's 8 NVLink peers
    low, high = band["tokens_per_s_regime_low"], band["tokens_per_s_regime_high"]
    assert low == pytest.approx(result["tokens_per_s"]) and high > 1.1 * low
    stated = {**job, "cuda_graphs": "attn,moe_router,moe_preprocess", "dispatcher": "deepep"}
    tuned = train(**stated)
    none = regime_bands("training", tuned, lambda **changes: train(**{**stated, **changes}), stated)
    assert none["regime_settings"] == "" and none["tokens_per_s_regime_high"] == pytest.approx(
        tuned["tokens_per_s"]
    )


def test_a_serving_job_band_spans_the_engine_settings_it_leaves_at_their_defaults():
    """serve --uncertainty: a job that leaves the host loop serial and the KV reservation full gets a
    band reaching the overlap scheduler's and paged KV's throughput, both higher here; one that states
    both gets a band of its value alone."""
    from commodel.pricing.run import serve
    from commodel.validate.bands import regime_bands

    job = {"model": "qwen3-30b-a3b", "system": "gb200-nvl72", "tp": 1, "gpus": 1, "prompt": 1000,
           "output": 1000, "dtype": "fp4"}  # fmt: skip
    result = serve(**job)
    band = regime_bands("serving", result, lambda **changes: serve(**{**job, **changes}), job)
    assert band["regime_settings"] == "--host-schedule overlapped, --kv-reserve paged"
    low, high = band["output_tokens_per_s_regime_low"], band["output_tokens_per_s_regime_high"]
    assert low == pytest.approx(result["output_tokens_per_s"]) and high > 1.2 * low
    assert band["tpot_s_regime_low"] < result["tpot_s"] * (1 + 1e-12)
    stated = {**job, "host_schedule": "overlapped", "kv_reserve": "paged"}
    mine = serve(**stated)
    none = regime_bands("serving", mine, lambda **changes: serve(**{**stated, **changes}), stated)
    assert none["regime_settings"] == ""
    assert none["output_tokens_per_s_regime_high"] == pytest.approx(mine["output_tokens_per_s"])


def test_draws_that_move_a_design_out_of_its_memory_leave_the_band_and_are_counted():
    """Llama 3 8B at sequence 8448 over an H100 and an MI300X node fills the H100's 80 GiB (18 layers,
    77 GiB): where a draw makes the H100 faster, the pipeline gives it more layers and the design no
    longer fits. Such draws have no throughput; the band is over the draws that fit, and the source
    says how many did not."""
    import json

    from typer.testing import CliRunner

    from commodel.cli import app

    args = ["train", "--model", "llama3-8b", "--system", "dgx-h100:1,mi300x-8:1", "--pp", "2", "--seq", "8448", "--uncertainty"]  # fmt: skip
    result = CliRunner().invoke(app, [*args, "--json"])
    record = json.loads(result.output)
    assert result.exit_code == 0 and "do not fit" in record["params_source"]
    assert 0 < record["tokens_per_s_params_p10"] <= record["tokens_per_s_params_p90"] < float("inf")


def test_deepeps_costs_are_the_gpus_and_an_overlay_moves_them(tmp_path, monkeypatch):
    """DeepEP's share of NVLink and its low-latency call's own phases are a GPU record's
    (``expert_dispatch``): an overlay that lowers the share slows a dispatch inside a node, one that
    raises the phases slows a low-latency call, in proportion to what each prices."""
    from commodel.hardware.loader import OVERLAY_ENV

    def time_us(mode):
        args = ["comm", "dispatch", "--system", "hgx-h800", "--mode", mode, "--tokens", "4096", "--json"]
        return json.loads(CliRunner().invoke(app, args).output)[0]["time_us"]

    high, low = time_us("high-throughput"), time_us("low-latency")
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "h100-sxm.toml").write_text(
        '[expert_dispatch]\nnvlink_share = { value = 0.42, source = "test" }\n'
        'low_latency_call = { value = "71.2 us", source = "test" }\n'
    )
    monkeypatch.setenv(OVERLAY_ENV, str(tmp_path))
    assert time_us("high-throughput") > 1.5 * high
    assert time_us("low-latency") == pytest.approx(low + 35.6, rel=0.02)
