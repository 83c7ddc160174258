"""Physical invariants of every answer: stages hold the model's layers, one rank moves nothing."""

import numpy as np
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
    from commodel.workloads.model.catalog import model as get_model

    result = train(model=model, system="dgx-h100", gpus=8 * pp, tp=8, pp=pp, global_batch=8 * pp)
    stages = [int(n) for n in result["stage_layers"].split(",")]
    assert len(stages) == pp and sum(stages) == get_model(model).layers and min(stages) >= 1


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
    assert "not one request's KV cache fits beside the weights" in out and "output tokens/s" not in out


@pytest.mark.parametrize("storage", [50.0, 2000.0, 50_000.0])
def test_checkpoints_fall_between_steps_and_never_closer_than_their_write(storage):
    result = train(model="llama3-405b", system="dgx-h100", gpus=16384, tp=8, pp=16, global_batch=2048,
                   sequence_parallel=True, recompute="auto", checkpoint="async", failures="llama3-h100",
                   storage_GBps=storage)  # fmt: skip
    interval, step = 60 * result["checkpoint_interval_min"], result["step_time_s"]
    from commodel.ops.goodput import STATE_BYTES_PER_PARAM
    from commodel.workloads.model.catalog import model
    from commodel.workloads.model.transformer import parameters

    state = parameters(model("llama3-405b"))["total"] * STATE_BYTES_PER_PARAM
    write = state / (storage * 1e9)  # the state, to storage in the background
    assert interval >= max(step, write) * (1 - 1e-9)
    assert interval / step == pytest.approx(round(interval / step), abs=1e-6)


JOBS = 5000


def _random_training_jobs(rng):
    import pandas as pd

    return pd.DataFrame({
        "model": rng.choice(["llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b"], JOBS),
        "system": rng.choice(["dgx-h100", "dgx-b200", "gb200-nvl72", "mi300x-8", "dgx-a100"], JOBS),
        "gpus": rng.choice([8, 16, 64, 256, 1024], JOBS), "tp": rng.choice([1, 2, 4, 8], JOBS),
        "pp": rng.choice([1, 2, 3, 4, 6, 8, 16], JOBS), "global_batch": rng.choice([64, 256, 1024], JOBS),
        "micro_batch": rng.choice([1, 2], JOBS), "zero": rng.choice([0, 1, 3], JOBS),
        "recompute": rng.choice(["none", "full", "auto"], JOBS),
        "failures": rng.choice(["", "llama3-h100"], JOBS), "checkpoint": rng.choice(["sync", "async"], JOBS),
        "storage_GBps": rng.choice([50.0, 2000.0, 50_000.0], JOBS),
    })  # fmt: skip


def test_every_valid_training_job_holds_the_physical_invariants():
    """Over 5,000 random jobs: stages hold the model's layers, GPU power lies between idle and TDP,
    and checkpoints fall a whole number of steps apart, no closer than their write."""
    from commodel.hardware.loader import default_db
    from commodel.ops.goodput import STATE_BYTES_PER_PARAM
    from commodel.pricing.evaluator import evaluator
    from commodel.workloads.model.catalog import model
    from commodel.workloads.model.transformer import parameters

    rng = np.random.default_rng(11)
    result = evaluator("training")(_random_training_jobs(rng))
    valid = result[result.valid]
    assert len(valid) > 1000
    layers = valid.model.map(lambda name: model(name).layers)
    stages = valid.stage_layers.map(lambda text: sum(int(n) for n in text.split(",")) if text else 0)
    piped = valid.pp > 1
    assert (stages[piped] == layers[piped]).all() and (valid.stage_layers[~piped] == "").all()
    gpus = {name: default_db().gpu(default_db().system(name).gpu) for name in valid.system.unique()}
    idle = valid.system.map({s: g.idle_power.value for s, g in gpus.items()})
    tdp = valid.system.map({s: g.tdp.value for s, g in gpus.items()})
    assert ((valid.gpu_power_W >= idle - 1e-9) & (valid.gpu_power_W <= tdp + 1e-9)).all()
    failing = valid[valid.failures != ""]
    state = failing.model.map(lambda name: parameters(model(name))["total"] * STATE_BYTES_PER_PARAM)
    interval = 60 * failing.checkpoint_interval_min
    steps = interval / failing.step_time_s
    assert (steps >= 1 - 1e-9).all() and np.allclose(steps, np.round(steps), atol=1e-6)
    assert (interval >= state / (failing.storage_GBps * 1e9) * (1 - 1e-9))[
        failing.checkpoint == "async"
    ].all()


def test_recomputing_more_never_makes_a_step_shorter():
    """Over 3,000 random jobs priced with no recomputation, selective and full, at the same micro-batch:
    each recomputes more and takes at least as long where it fits. Host-bound steps included (small
    micro-batches of MoE models on Grace's GB200): a pass's collectives are its own, so recomputed
    work fills the host's gaps and never shortens them; apportioned by the compute's share, the
    expert all-to-alls had moved into the backward with the recomputed kernels and made selective
    recomputation up to 1.3% faster than none (15 of 939 jobs)."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    rng = np.random.default_rng(14)
    n = 3000
    jobs = pd.DataFrame({
        "model": rng.choice(["llama3-8b", "llama3-70b", "qwen3-30b-a3b", "mixtral-8x7b"], n),
        "system": rng.choice(["dgx-h100", "dgx-b200", "gb200-nvl72", "mi300x-8"], n),
        "gpus": rng.choice([8, 16, 64], n), "tp": rng.choice([1, 2, 4, 8], n), "pp": rng.choice([1, 2, 4], n),
        "ep": rng.choice([1, 2, 8], n), "micro_batch": rng.choice([1, 2, 4], n), "seq": rng.choice([4096, 8192], n),
        "global_batch": rng.choice([256, 1024], n), "zero": rng.choice([0, 1, 3], n),
        "sequence_parallel": rng.choice([True, False], n), "dtype": rng.choice(["bf16", "fp8"], n),
    })  # fmt: skip
    steps = []
    for recompute in ("none", "selective", "full"):
        priced = evaluator("training")(jobs.assign(recompute=recompute))
        steps.append(np.where(priced.valid & priced.fits, priced.step_time_s, np.nan))
    none, selective, full = steps
    both = ~np.isnan(none) & ~np.isnan(selective)
    assert both.sum() > 300 and (selective[both] >= none[both] * (1 - 1e-9)).all()
    more = ~np.isnan(selective) & ~np.isnan(full)
    assert more.sum() > 300 and (full[more] >= selective[more] * (1 - 1e-9)).all()


def test_every_serving_job_holds_the_physical_invariants():
    """Over 5,000 random deployments: power between idle and TDP; a deployment where not one request
    fits does not fit; and Little's law: the requests in flight are the requests per second times a
    request's time in flight, its first token then its ``o - 1`` decode iterations (the throughput
    and the per-request times had come from two laws of how many prompts an iteration starts, up to
    16% apart; with attention data parallelism's replicas in lockstep an iteration held the other
    replicas' starts as if independent of the slowest's, up to 4.6% apart)."""
    import pandas as pd

    from commodel.hardware.loader import default_db
    from commodel.pricing.evaluator import evaluator

    rng = np.random.default_rng(12)
    jobs = pd.DataFrame({
        "model": rng.choice(["llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "qwen3-30b-a3b"], JOBS),
        "system": rng.choice(["dgx-h100", "dgx-b200", "dgx-a100", "mi300x-8"], JOBS),
        "tp": rng.choice([1, 2, 4, 8], JOBS), "prompt": rng.choice([128, 1024, 8192], JOBS),
        "output": rng.choice([1, 128, 2048], JOBS), "dtype": rng.choice(["bf16", "fp8"], JOBS),
        "attention_dp": rng.choice([False, True], JOBS), "batch": rng.choice(["max", "1", "16"], JOBS),
    })  # fmt: skip
    jobs["ep"] = np.where(jobs.attention_dp, jobs.tp, 1)
    result = evaluator("serving")(jobs)
    valid = result[result.valid]
    assert len(valid) > 1000
    gpus = {name: default_db().gpu(default_db().system(name).gpu) for name in valid.system.unique()}
    idle = valid.system.map({s: g.idle_power.value for s, g in gpus.items()})
    tdp = valid.system.map({s: g.tdp.value for s, g in gpus.items()})
    assert ((valid.gpu_power_W >= idle - 1e-9) & (valid.gpu_power_W <= tdp + 1e-9)).all()
    nothing = valid[valid.max_batch == 0]
    assert (~nothing.fits).all() and nothing.output_tokens_per_s.isna().all() and nothing.ttft_s.isna().all()
    served = valid[valid.fits]
    in_flight = served.ttft_s + (served.output - 1) * served.tpot_s
    assert np.allclose(served.requests_per_s * in_flight, served.batch_in_flight * served.replicas, rtol=1e-9)


def test_every_collective_path_takes_longer_as_its_message_grows():
    """Over 5,000 random calls (systems, collectives, node and GPU counts, pods, every algorithm and
    protocol that runs there): a path's time never falls as the message doubles. (NCCL's own choice
    may: its tuner does not see the channels it cuts for small messages, so it can pick ring LL where
    LL128 on twice the bytes is faster.)"""
    from commodel.comm.collectives import candidates, pair_time
    from commodel.comm.fabric import fabric_of

    rng = np.random.default_rng(13)
    sizes = 2.0 ** np.arange(3, 35)
    calls = 0
    while calls < JOBS:
        system = str(rng.choice(["dgx-h100", "dgx-b200", "dgx-a100", "mi300x-8", "gb200-nvl72", "a3-mega"]))
        op = str(rng.choice(["allreduce", "allgather", "reducescatter", "broadcast", "alltoall"]))
        nodes = int(rng.choice([1, 2, 4, 16]))
        where = cluster(system, nodes, oversubscription=float(rng.choice([1, 4])))
        gpus = int(rng.choice([2, where.total_gpus])) if nodes == 1 else where.total_gpus
        frame = run(op, where, sizes, gpus)
        fab, domains = fabric_of(where), frame.domains.iloc[0]
        for algo, protocol in candidates(op, fab):
            time = pair_time(op, algo, protocol, sizes, gpus, domains, fab)[0]
            finite = time[np.isfinite(time)]
            assert (np.diff(finite) >= -1e-12 * finite[1:]).all(), (system, op, nodes, algo, protocol)
            calls += len(sizes)
