"""One declaration per job kind: the CLI, the scalar API and a one-row sweep read the same inputs,
with the same defaults, and give the same answer for the same job."""

import inspect
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from commodel.cli import app, command_app
from commodel.pricing.evaluator import evaluator
from commodel.pricing.run import serve, train
from commodel.pricing.serving_job import ServingJob
from commodel.pricing.training_job import TrainingJob

GIVEN = {"model": "llama3-8b", "system": "dgx-h100"}


def _cli_defaults(command: str) -> dict[str, object]:
    """The defaults of a command's options, by the field each option sets."""
    callback = next(c.callback for c in command_app(command).registered_commands if c.name == command)
    return {name: p.default for name, p in inspect.signature(callback).parameters.items()}


@pytest.mark.parametrize(
    ("command", "kind", "schema"), [("train", "training", TrainingJob), ("serve", "serving", ServingJob)]
)
def test_the_cli_the_scalar_api_and_the_sweep_read_one_set_of_defaults(command, kind, schema):
    declared = schema.inputs()
    cli = _cli_defaults(command)
    assert {name: cli[name] for name in declared if name not in schema.required()} == {
        name: value for name, value in declared.items() if name not in schema.required()
    }
    assert evaluator(kind).inputs == declared
    job = schema(**GIVEN)
    assert {name: getattr(job, name) for name in declared} == {**declared, **GIVEN}


@pytest.mark.parametrize("options", [{}, {"recompute": "full"}])
def test_a_training_job_with_no_options_prices_the_same_through_every_front_end(options):
    """``commodel train`` with only a model and a system (and one option), ``train()`` with the same,
    and a one-row table into the training evaluator: the same resolved layout and the same numbers,
    exactly. With no option Llama 3 8B does not fit 8 H100 (no recomputation of 8K tokens): each front
    end says so, with its memory and no step."""
    flags = [f"--{k}={v}" for k, v in options.items()]
    result = CliRunner().invoke(
        app, ["train", "--model", GIVEN["model"], "--system", GIVEN["system"], *flags, "--json"]
    )
    assert result.exit_code == 0, result.output
    cli, scalar = json.loads(result.output), train(**GIVEN, **options)
    row = evaluator("training")(pd.DataFrame([GIVEN | options])).iloc[0]
    assert (cli["gpus"], cli["nodes"], cli["layout"]["dp"]) == (
        scalar["gpus"],
        scalar["nodes"],
        scalar["layout"]["dp"],
    )
    assert (int(row.gpus), int(row.nodes), int(row.dp)) == (
        scalar["gpus"],
        scalar["nodes"],
        scalar["layout"]["dp"],
    )
    assert cli["memory_per_gpu_bytes"] == scalar["memory_per_gpu_bytes"] == float(row.memory_per_gpu_bytes)
    assert cli["fits"] is scalar["fits"] is bool(row.fits) is bool(options)
    if not options:
        assert row.problem.startswith("does not fit") and np.isnan(row.step_time_s) and not row.valid
        assert "step_time_s" not in cli and "step_time_s" not in scalar
        return
    for name in ("step_time_s", "tokens_per_s", "mfu", "gpu_power_W", "time_to_train_days"):
        assert cli[name] == scalar[name] == float(row[name]), name
    assert cli["breakdown"] == scalar["breakdown"] == {k: float(row[f"{k}_s"]) for k in scalar["breakdown"]}


def test_a_serving_job_with_no_options_prices_the_same_through_every_front_end():
    result = CliRunner().invoke(
        app, ["serve", "--model", GIVEN["model"], "--system", GIVEN["system"], "--json"]
    )
    assert result.exit_code == 0, result.output
    cli, scalar = json.loads(result.output), serve(**GIVEN)
    row = evaluator("serving")(pd.DataFrame([GIVEN])).iloc[0]
    for name in ("ttft_s", "tpot_s", "output_tokens_per_s", "memory_kv_cache_bytes", "power_kW"):
        assert cli[name] == scalar[name] == float(row[name]), name
    assert cli["batch_in_flight"] == scalar["batch_in_flight"] == int(row.batch_in_flight)


def test_a_collective_call_prices_the_same_from_the_cli_and_a_one_row_sweep():
    """``commodel collective`` and the collective evaluator read one declaration: the same defaults
    (DGX H100, NCCL's own choice) give the same time."""
    result = CliRunner().invoke(app, ["collective", "allreduce", "--size", "1GiB", "--json"])
    assert result.exit_code == 0, result.output
    cli = json.loads(result.output)[0]
    row = evaluator("collective")(pd.DataFrame([{"size_bytes": 2**30}])).iloc[0]
    assert cli["time_s"] == pytest.approx(float(row.time_s), rel=1e-12)  # (JSON keeps 15 digits)
    assert row.chosen == f"{cli['algo']}/{cli['protocol']}"
    assert np.isfinite(row.busbw_GBps) and row.busbw_GBps == pytest.approx(cli["busbw_GBps"])
    assert row.fastest == cli["fastest"] and row.fastest_time_s == pytest.approx(
        cli["fastest_time_s"], rel=1e-12
    )
    # where NCCL's tuner trails its fastest path, a sweep sees what a tuner plugin could take
    gap = evaluator("collective")(pd.DataFrame([{"system": "dgx-a100", "nodes": 4, "op": "allgather",
                                                  "size_bytes": 2**17}])).iloc[0]  # fmt: skip
    assert gap.chosen == "ring/ll" and gap.fastest == "ring/ll128" and gap.fastest_time_s < 0.9 * gap.time_s


def test_a_gemm_prices_the_same_from_the_cli_and_a_one_row_sweep():
    """``commodel roofline gemm`` and the ``gemm`` evaluator read one declaration (GemmJob)."""
    result = CliRunner().invoke(app, ["roofline", "gemm", "--gpu", "b200-sxm", "--m", "4096", "--dtype", "fp8",
                                      "--no-launch", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    cli = json.loads(result.output)
    row = evaluator("gemm")(
        pd.DataFrame([{"gpu": "b200-sxm", "m": 4096, "dtype": "fp8", "launch": False}])
    ).iloc[0]
    assert (row.time_s, row.tflops, row.bound) == (
        pytest.approx(cli["time_s"], rel=1e-12),
        cli["tflops"],
        cli["bound"],
    )
    launched = evaluator("gemm")(pd.DataFrame([{"gpu": "b200-sxm", "m": 4096, "dtype": "fp8"}])).iloc[0]
    assert launched.time_s > row.time_s  # a lone call pays its launch


@pytest.mark.parametrize(
    ("evaluate", "table", "field"),
    [
        ("collective", {"size_bytes": [1e6, float("nan")]}, "size_bytes"),
        ("training", {"model": ["llama3-8b", None], "system": ["dgx-h100", "dgx-h100"]}, "model"),
        ("halo", {"scheme": ["host-driven"], "gpus": [float("nan")]}, "gpus"),
    ],
)
def test_a_table_that_leaves_a_required_input_empty_is_an_error_naming_it(evaluate, table, field):
    """An empty cell takes the input's default; an input with none has no value to take, so the table
    is refused naming it (a collective of NaN bytes was priced invalid with no reason, and warned)."""
    from commodel.errors import CommodelError

    with pytest.raises(CommodelError, match=f"leaves input '{field}', which has no default, empty"):
        evaluator(evaluate)(pd.DataFrame(table))
