"""Physical invariants of every answer: stages hold the model's layers, one rank moves nothing."""

import pytest

from commodel.comm.calls import run
from commodel.hardware import cluster
from commodel.pricing.run import train


@pytest.mark.parametrize(
    ("model", "pp"),
    [("llama3-405b", 16), ("llama3-70b", 6), ("deepseek-v3", 16), ("llama3-8b", 32), ("llama3-8b", 3)],
)
def test_pipeline_stages_hold_the_models_layers(model, pp):
    """Stages add up to the model's layers, even where pp does not divide them (and pp = layers)."""
    from commodel.workloads.catalog import model as get_model

    result = train(model=model, system="dgx-h100", gpus=8 * pp, tp=8, pp=pp, global_batch=8 * pp)
    stages = [int(n) for n in result["stage_layers"].split(",")]
    assert len(stages) == pp and sum(stages) == get_model(model).layers and min(stages) >= 1


def test_a_collective_over_one_rank_is_nothing_by_no_algorithm():
    frame = run("allreduce", cluster("dgx-h100"), [8, 2**30], 1)
    assert (frame.time_s == 0).all() and (frame.algo == "none").all() and (frame.protocol == "none").all()


def test_a_deployment_whose_weights_leave_no_room_prints_no_throughput(capsys, monkeypatch):
    from commodel.cli import main
    from commodel.pricing.run import serve

    result = serve(model="llama3-405b", system="dgx-a100", gpus=8, tp=8)
    assert result["max_batch"] == 0 and not result["fits"]
    assert result["output_tokens_per_s"] is None and result["ttft_s"] is None
    monkeypatch.setattr("sys.argv", ["commodel", "serve", "--model", "llama3-405b", "--system", "dgx-a100",
                                     "--gpus", "8", "--tp", "8"])  # fmt: skip
    main()
    out = capsys.readouterr().out
    assert "no request fits beside the weights" in out and "output tokens/s" not in out


@pytest.mark.parametrize("storage", [50.0, 2000.0, 50_000.0])
def test_checkpoints_fall_between_steps_and_never_closer_than_their_write(storage):
    result = train(model="llama3-405b", system="dgx-h100", gpus=16384, tp=8, pp=16, global_batch=2048,
                   checkpoint="async", failures="llama3-h100", storage_GBps=storage)  # fmt: skip
    interval, step = 60 * result["checkpoint_interval_min"], result["step_time_s"]
    from commodel.ops.goodput import STATE_BYTES_PER_PARAM
    from commodel.workloads.catalog import model
    from commodel.workloads.transformer import parameters

    state = parameters(model("llama3-405b"))["total"] * STATE_BYTES_PER_PARAM
    write = state / (storage * 1e9)  # the state, to storage in the background
    assert interval >= max(step, write) * (1 - 1e-9)
    assert interval / step == pytest.approx(round(interval / step), abs=1e-6)
