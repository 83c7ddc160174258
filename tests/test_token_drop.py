"""Token-drop MoE: the capacity factor's padding, its dropped share by hand and as properties, and
that dropless experts are never faster than a capacity factor of the same shape."""

import numpy as np
import pandas as pd
import pytest

from commodel.pricing.evaluator import evaluator
from commodel.pricing.training import job_layouts
from commodel.workloads.model.catalog import model
from commodel.workloads.moe.token_drop import dropped_share


def _layouts(**values):
    return job_layouts(
        {"model": "qwen3-30b-a3b", "system": "dgx-h100", "gpus": 8, "ep": 8, "seq": 4096, **values}
    )


def test_dropped_share_by_hand_under_balanced_routing():
    """Capacity factor 1 with multinomial routing: E[(n - mu)+] / mu = phi(0) / sqrt(mu)."""
    net = model("qwen3-30b-a3b")  # 128 experts, top 8
    mu = 4096 * 8 / 128
    assert dropped_share(net, _layouts(capacity_factor=1.0)) == pytest.approx(
        0.3989423 / np.sqrt(mu), rel=1e-6
    )
    assert dropped_share(net, _layouts()) == 0  # dropless


def test_dropped_share_falls_with_the_capacity_and_rises_with_the_imbalance():
    net = model("qwen3-30b-a3b")
    factors = np.array([1.0, 1.1, 1.25, 1.5, 2.0])
    shares = dropped_share(net, _layouts(capacity_factor=factors))
    assert (np.diff(shares) < 0).all() and (shares >= 0).all() and shares[0] < 1
    loads = np.array([1.0, 1.2, 1.5, 2.0])
    worse = dropped_share(net, _layouts(capacity_factor=1.0, expert_load=loads))
    assert (np.diff(worse) > 0).all() and (worse < 1).all()


def test_dropless_is_never_faster_than_an_equal_shape_capacity_factor():
    """Over 600 random jobs: padding every expert to the load the dropless run's busiest rank carries
    computes the same shapes, without the dispatcher's host sync: never slower."""
    rng = np.random.default_rng(31)
    jobs = pd.DataFrame({
        "model": rng.choice(["qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b"], 600),
        "system": rng.choice(["dgx-h100", "gb200-nvl72", "dgx-b200"], 600),
        "micro_batch": rng.choice([1, 2, 4], 600), "seq": rng.choice([1024, 4096], 600),
        "expert_load": rng.choice([1.0, 1.2, 1.5], 600), "dispatcher": rng.choice(["alltoall", "deepep"], 600),
    })  # fmt: skip
    jobs["gpus"], jobs["ep"], jobs["global_batch"] = 8, 8, 64
    dropless = evaluator("training")(jobs)
    padded = evaluator("training")(jobs.assign(capacity_factor=jobs.expert_load))
    runs = dropless.valid.to_numpy()  # the rest do not fit: no step to compare
    assert runs.mean() > 0.3 and (padded.valid == dropless.valid).all()
    assert (padded.step_time_s[runs] <= dropless.step_time_s[runs] * (1 + 1e-12)).all()
    assert (padded.dropped_share > 0).all() and (dropless.dropped_share == 0).all()
    captured = evaluator("training")(
        jobs.assign(capacity_factor=jobs.expert_load, cuda_graphs="attn,moe_router,moe")
    )
    assert (captured.valid == dropless.valid).all()
    assert (captured.step_time_s[runs] <= padded.step_time_s[runs] * (1 + 1e-12)).all()


def test_the_hardware_computes_the_capacity_the_model_flops_count_top_k():
    """Every expert computes X times the mean (padded or cut to it): the hardware's FLOPs are the
    dropless ones plus (X - 1) x 8 x the routed experts' weights per token under full recomputation
    (forward, backward, forward again), where the model FLOPs (MFU) stay top_k copies per token."""
    net = model("qwen3-30b-a3b")
    jobs = pd.DataFrame({"model": "qwen3-30b-a3b", "system": "dgx-h100", "gpus": 8, "ep": 8, "global_batch": 64,
                         "recompute": "full", "offload": "optimizer", "capacity_factor": [np.nan, 0.5, 1.25]})  # fmt: skip
    r = evaluator("training")(jobs)
    assert r.valid.all()
    flops = lambda name: r[name] * r.step_time_s * r.gpus * 1e12  # noqa: E731
    tokens = 64 * net.seq
    routed = net.moe_layers * net.moe.top_k * 3 * net.hidden * net.moe.expert_ffn_hidden
    assert np.allclose(flops("tflops_per_gpu"), flops("tflops_per_gpu")[0])
    extra = flops("hw_tflops_per_gpu") - flops("hw_tflops_per_gpu")[0]
    assert np.allclose(extra, [0, -0.5 * 8 * routed * tokens, 0.25 * 8 * routed * tokens])
