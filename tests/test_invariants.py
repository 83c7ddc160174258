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
