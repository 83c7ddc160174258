"""A GPU under a board power limit below its TDP: the clock its compute-bound work runs at."""

import re

import numpy as np
import pytest
from conftest import picker

from commodel.compute.kernels import gemm
from commodel.compute.power import POWER_CLOCK_EXPONENT, clock_share
from commodel.compute.roofline import achievable_bandwidth, kernel_time
from commodel.hardware import cluster, default_db
from commodel.ops.energy import gpu_power_W
from commodel.validate.measurements import load_measurements


def _limited(limit_W: float):
    gpu = default_db().gpu("h100-sxm-96gb")
    return gpu.model_copy(update={"power_limit": gpu.power_limit.model_copy(update={"value": limit_W})})


def test_no_limit_is_the_tdp_clock_and_a_lower_limit_a_lower_clock():
    assert clock_share(default_db().gpu("h100-sxm")) == 1.0
    assert clock_share(_limited(700.0)) == pytest.approx(1.0)
    shares = [clock_share(_limited(w)) for w in (300.0, 400.0, 500.0, 600.0, 700.0)]
    assert np.all(np.diff(shares) > 0) and 0 < shares[0] < shares[-1]


def test_the_limit_slows_compute_bound_gemms_and_not_memory():
    big, thin = gemm(8192, 8192, 8192, "bf16"), gemm(16, 8192, 8192, "bf16")
    full, capped = _limited(700.0), _limited(500.0)
    slow = kernel_time(capped, big, launch=False).time_s / kernel_time(full, big, launch=False).time_s
    assert slow == pytest.approx(1 / clock_share(capped), rel=1e-6)
    assert kernel_time(capped, thin).time_s == pytest.approx(kernel_time(full, thin).time_s, rel=0.02)
    assert achievable_bandwidth(capped) == achievable_bandwidth(full)


def test_the_exponent_predicts_the_clocks_it_was_not_fit_on():
    """MAF's FP16 and FP8 median clocks on MI300X (750 W) and MI325X (1000 W), read from the
    measurement rows the exponent was not fit on (it is fit on the BF16 pair), within 2%."""
    rows = load_measurements().set_index("id")
    db = default_db()
    dynamic = [db.gpu(g).tdp.value - db.gpu(g).idle_power.value for g in ("mi300x", "mi325x")]
    predicted = (dynamic[1] / dynamic[0]) ** (1 / POWER_CLOCK_EXPONENT)
    for dtype in ("fp16", "fp8"):
        mhz = [
            float(re.search(r"(\d+) MHz", rows.source[f"{g}-maf-{dtype}"]).group(1))
            for g in ("mi300x", "mi325x")
        ]
        assert predicted == pytest.approx(mhz[1] / mhz[0], rel=0.02)


def test_a_limited_gpu_draws_at_most_its_limit():
    grand_teton = cluster("grand-teton-h100")
    assert gpu_power_W(grand_teton, 1.0, 3e12) == pytest.approx(500.0)
    assert gpu_power_W(grand_teton, 0.0) == pytest.approx(142.0)


def test_a_runs_power_limit_slows_its_step_and_lowers_its_gpus_power():
    """--power-limit: a lower board limit lowers the clock of the compute-bound work (the step grows)
    and the GPUs' draw; a system whose record states a limit prices the same at that limit given."""
    from commodel.pricing.run import train

    job = dict(model="llama3-8b", system="dgx-h100", gpus=8, zero=3, recompute="full")
    runs = [train(**job, **({"power_limit": w} if w else {})) for w in (None, 600, 500, 400)]
    steps, power = [r["step_time_s"] for r in runs], [r["gpu_power_W"] for r in runs]
    assert steps == sorted(steps) and power == sorted(power, reverse=True)
    assert power[2] <= 500
    teton = dict(job, system="grand-teton-h100")
    assert train(**teton, power_limit=500)["step_time_s"] == pytest.approx(train(**teton)["step_time_s"])


def test_a_serving_power_limit_slows_compute_bound_prefill_and_not_memory_bound_decode():
    """--power-limit on serve: a prefill-only pool (compute-bound GEMMs) loses about its clock share,
    a decode-only pool at a small batch (bound by reading the weights) keeps its pace."""
    from commodel.pricing.run import serve

    job = dict(model="llama3-70b", system="dgx-h100", gpus=8, tp=8, dtype="fp8", prompt=2000)
    share = clock_share(_limited(450.0))
    prefill = [
        serve(**job, phase="prefill", **limit)["input_tokens_per_s"] for limit in ({}, {"power_limit": 450})
    ]
    decode = [
        serve(**job, phase="decode", batch="4", **limit)["output_tokens_per_s"]
        for limit in ({}, {"power_limit": 450})
    ]
    assert share < prefill[1] / prefill[0] < 1.0
    assert decode[1] / decode[0] == pytest.approx(1.0, abs=0.02)


def test_the_kernel_table_runs_at_the_runs_power_limit():
    """``train --kernels`` lists the layer's kernels at the clock the run's --power-limit leaves, as the
    step prices them: a compute-bound GEMM takes 1 / clock share as long."""
    from commodel.pricing.run import train

    job = dict(model="llama3-8b", system="dgx-h100", gpus=8, zero=3, recompute="full", kernels=True)
    full, capped = (train(**job, **limit)["kernels"] for limit in ({}, {"power_limit": 450}))
    share = clock_share(_limited(450.0))
    ms = [[row["fwd_ms"] for row in table if row.get("bound") == "compute"] for table in (full, capped)]
    assert ms[0] and all(c == pytest.approx(f / share, rel=0.02) for f, c in zip(*ms, strict=True))


@pytest.mark.parametrize("evaluate", ["training", "serving"])
def test_a_limit_one_gpu_cannot_take_is_its_rows_problem_in_a_sweep_over_systems(evaluate):
    """500 W is above an A100's 400 W TDP and below an H100's 700 W: over both systems the A100 rows
    say why they are not priced and the H100 rows are priced at their limit."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    jobs = pd.DataFrame([{"model": "llama3.2-1b", "system": s, "gpus": 8, "power_limit": 500, "global_batch": 256,
                          "micro_batch": 1} for s in ("dgx-a100", "dgx-h100")])  # fmt: skip
    if evaluate == "serving":
        jobs = jobs.drop(columns=["global_batch", "micro_batch"])
    table = evaluator(evaluate)(jobs)
    assert (
        not table.valid[0] and "above the idle power" in table.problem[0] and "TDP 400 W" in table.problem[0]
    )
    assert table.gpu_power_W.isna()[0] and 0 < table.gpu_power_W[1] <= 500


def test_a_power_limit_never_makes_a_step_faster():
    """Over 1,500 random jobs (dense and MoE models, five systems, every overlap strategy, ZeRO 0-3):
    a board limited to 70% of its TDP never runs a step faster under ideal overlap, and by at most 1%
    under the others (a window's HBM load is its average). Qwen3-30B-A3B under ZeRO-3 on 64 MI300X at
    tp 2 ran 4.5% faster: its ZeRO-3 collectives hid behind the layers' compute alone, and the slower
    compute, which also hid more of the all-to-alls, gave them more to hide behind; they now run on
    beside the exposed all-to-alls as beside compute."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    pick = picker(41, 1500)

    frame = pd.DataFrame({
        "model": pick("llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b"),
        "system": pick("dgx-h100", "gb200-nvl72", "dgx-b200", "mi300x-8", "dgx-a100"),
        "gpus": pick(16, 64, 256), "tp": pick(1, 2, 4, 8), "pp": pick(1, 2, 4), "global_batch": pick(256, 1024),
        "micro_batch": pick(1, 2), "recompute": pick("auto", "full", "selective"),
        "sequence_parallel": pick(True, False), "zero": pick(0, 1, 3),
        "overlap": pick("serial", "sm-partition", "occupancy-shaped", "ideal"),
    }).infer_objects()  # fmt: skip
    tdp = {name: default_db().gpu(default_db().system(name).gpu).tdp.value for name in frame.system.unique()}
    free = evaluator("training")(frame)
    limited = evaluator("training")(frame.assign(power_limit=0.7 * frame.system.map(tdp)))
    both = free.valid & limited.valid
    assert both.sum() > 600
    assert (limited.step_time_s[both] >= 0.99 * free.step_time_s[both]).all()
    ideal = both & (frame.overlap == "ideal")
    assert (limited.step_time_s[ideal] >= free.step_time_s[ideal] * (1 - 1e-12)).all()
    job = {"model": "qwen3-30b-a3b", "system": "mi300x-8", "gpus": 64, "tp": 2, "global_batch": 256,
           "sequence_parallel": True, "overlap": "ideal", "zero": 3}  # fmt: skip
    pair = evaluator("training")(pd.DataFrame([job, {**job, "power_limit": 525.0}]))
    assert pair.step_time_s[1] > pair.step_time_s[0]
