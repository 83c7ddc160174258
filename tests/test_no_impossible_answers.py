"""No answer that cannot be true: a design that does not fit its GPUs' memory, or asks for more requests
than its engine admits, has no step, latency, throughput, power, energy or cost, in any front end; and
no memory or time comes out negative."""

import json

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from commodel.hardware import cluster
from commodel.pricing.evaluator import evaluator
from commodel.pricing.run import serve, train

#: Training outputs that need the job to run.
RUNNING = ("step_time_s", "tokens_per_s", "mfu", "tflops_per_gpu", "compute_s", "gpu_power_W", "power_kW",
           "energy_per_token_J", "time_to_train_days", "cost_usd")  # fmt: skip
#: Serving outputs that need the deployment to run.
SERVING = ("ttft_s", "tpot_s", "output_tokens_per_s", "requests_per_s", "gpu_power_W", "energy_per_token_J")


def _random_training(seed: int, rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "model": rng.choice(["llama3-8b", "llama3-70b", "qwen3-30b-a3b", "gpt3-175b"], rows),
        "system": rng.choice(["dgx-h100", "dgx-a100", "dgx-b200", "mi300x-8"], rows),
        "gpus": rng.choice([8, 16, 64], rows), "tp": rng.choice([1, 2, 8], rows), "pp": rng.choice([1, 2], rows),
        "global_batch": 64, "micro_batch": rng.choice([1, 2, 4], rows), "seq": rng.choice([2048, 8192], rows),
        "recompute": rng.choice(["none", "selective", "full", "auto"], rows), "zero": rng.choice([1, 3], rows),
        "sequence_parallel": rng.random(rows) < 0.5,
    })  # fmt: skip


def test_no_training_design_has_a_throughput_without_fitting():
    """Over 1,500 random jobs: a row either runs (it fits, every figure finite and positive, MFU at most
    1), or does not fit (memory above what its GPU holds, its problem says so, no figure that needs it
    to run), or breaks a rule (no memory either); memory and times are never negative."""
    jobs = _random_training(5, 1500)
    table = evaluator("training")(jobs)
    held = jobs.system.map(lambda s: cluster(s).gpu.memory_capacity.value)
    runs, unfit = table.valid.to_numpy(), table.problem.str.startswith("does not fit").to_numpy()
    assert runs.any() and unfit.any() and (table.valid | (table.problem != "")).all()
    assert table.fits[runs].all() and (table.memory_per_gpu_bytes[runs] <= held[runs] * (1 + 1e-9)).all()
    assert (table.memory_per_gpu_bytes[unfit] > held[unfit]).all() and not table.fits[unfit].any()
    for name in RUNNING:  # cost is 0 where no price is given
        assert (table[name][runs] >= 0).all() and table[name][~runs].isna().all(), name
    assert (
        (table.mfu[runs] > 0).all() and (table.mfu[runs] <= 1).all() and (table.step_time_s[runs] > 0).all()
    )
    memory = table.filter(like="memory_").to_numpy()
    times = table.filter(regex="_s$").to_numpy()
    assert (memory[runs | unfit] >= 0).all() and (times[runs] >= 0).all()


def test_no_serving_design_has_a_throughput_without_fitting_or_above_its_engines_limit():
    """Over 1,200 random deployments, batches up to 8,192 against engine limits of 64 to 2,048 and
    prompts up to 30,000 tokens: a row that runs fits and holds no more requests than its engine
    admits or its tokens per iteration keep decoding; one that does not fit shows the memory its
    batch needs, above the GPU's, and no latency, throughput or energy."""
    rng = np.random.default_rng(11)
    n = 1200
    jobs = pd.DataFrame({
        "model": rng.choice(["llama3-8b", "llama3-70b", "qwen3-30b-a3b"], n),
        "system": rng.choice(["dgx-h100", "dgx-a100", "dgx-b200"], n), "tp": rng.choice([1, 2, 8], n),
        "batch": rng.choice(["max", "1", "64", "512", "4096", "8192"], n),
        "max_batch_size": rng.choice([64, 256, 2048], n), "prompt": rng.choice([128, 2048, 30000], n),
        "output": rng.choice([128, 2048], n), "dtype": rng.choice(["bf16", "fp8"], n),
    })  # fmt: skip
    table = evaluator("serving")(jobs)
    held = jobs.system.map(lambda s: cluster(s).gpu.memory_capacity.value)
    runs = table.valid.to_numpy()
    unfit = table.problem.str.startswith("does not fit").to_numpy()
    over = table.problem.str.contains("requests in flight per replica, above").to_numpy()
    assert runs.any() and unfit.any() and over.any()
    assert table.fits[runs].all() and (table.batch_in_flight[runs] <= jobs.max_batch_size[runs]).all()
    assert (table.batch_in_flight[runs] <= table.max_batch[runs]).all()
    assert table.problem.str.contains("cannot all decode").any()
    assert (table.memory_per_gpu_bytes[unfit] > held[unfit]).all()
    stated = jobs.batch != "max"
    assert (table.batch_in_flight[over & stated] > jobs.max_batch_size[over & stated]).all()
    for name in SERVING:
        assert (table[name][runs] > 0).all() and table[name][~runs].isna().all(), name
    assert (table.filter(like="memory_").to_numpy()[runs | unfit] >= 0).all()


def test_serve_says_a_batch_does_not_fit_with_the_memory_it_needs(capsys, monkeypatch):
    """Llama 3 8B on one H100 holds 228 requests of 2,048 tokens: 300 need about 98 GiB, shown as such,
    with no latency or throughput; 4,096 are above TensorRT-LLM's batch limit and refused."""
    result = serve(model="llama3-8b", system="dgx-h100", batch=300)
    assert not result["fits"] and result["output_tokens_per_s"] is None and result["ttft_s"] is None
    assert result["memory_per_gpu_bytes"] > cluster("dgx-h100").gpu.memory_capacity.value
    assert "at most" in result["notes"][0]
    code, out = run_cli(
        ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--batch", "300"], capsys, monkeypatch
    )
    assert code == 0 and "DOES NOT FIT" in out.out and "tokens/s" not in out.out
    code, out = run_cli(
        ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--batch", "4096"], capsys, monkeypatch
    )
    assert code == 2 and "above --max-batch-size 2048" in out.err and out.out == ""


def test_a_request_longer_than_the_models_context_is_refused(capsys, monkeypatch):
    """LLaMA-7B serves 2,048 tokens a request: 2,000 + 48 runs, 2,000 + 49 is refused in the table
    (no latency or throughput) and at the command line (exit 2, naming the context), as is a spread of
    lengths whose long requests must pass it; a model whose context is not stated takes any request."""
    jobs = pd.DataFrame({"model": ["llama-7b", "llama-7b", "megatron-gpt-4b", "llama-7b"], "system": "dgx-h100",
                         "prompt": [2000, 2000, 2000, 1000], "output": [48, 49, 49, 48],
                         "output_cv": [0.0, 0.0, 0.0, 6.0]})  # fmt: skip
    table = evaluator("serving")(jobs)
    # the last: spread outputs put 1,000 + 48 (1 + 36) / 2 = 1,888 tokens in flight on average, fine;
    # at cv 7, 1,000 + 48 x 50 / 2 = 2,200 passes the context, so some request must exceed it
    assert table.valid.tolist() == [True, False, True, True]
    wide = evaluator("serving")(jobs.iloc[3:].assign(output_cv=7.0))
    assert "context of 2,048" in wide.problem.iloc[0]
    assert "context of 2,048 tokens" in table.problem[1] and np.isnan(table.output_tokens_per_s[1])
    args = ["serve", "--model", "llama3.1-8b", "--system", "dgx-h100", "--prompt", "131000", "--output", "73"]
    code, out = run_cli(args, capsys, monkeypatch)
    assert code == 2 and "llama3.1-8b's context of 131,072 tokens" in out.err and out.out == ""


def test_train_prints_memory_and_a_fix_not_a_throughput_for_a_job_that_does_not_fit(capsys, monkeypatch):
    """Llama 3 405B on one H100 needs terabytes: no step, throughput or MFU, and a note saying what is
    left (more GPUs per copy); Llama 3 70B at tp 8 without sequence parallelism is told the fix."""
    args = ["train", "--model", "llama3-405b", "--system", "dgx-h100", "--gpus", "1", "--global-batch", "8"]
    code, out = run_cli(args, capsys, monkeypatch)
    assert code == 0 and "DOES NOT FIT" in out.out and "MFU" not in out.out and "tokens/s" not in out.out
    assert "more GPUs per model copy" in out.out
    code, out = run_cli([*args, "--json"], capsys, monkeypatch)
    data = json.loads(out.out)
    assert data["fits"] is False and not {"step_time_s", "mfu", "tokens_per_s", "breakdown"} & set(data)
    job = dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=8, pp=2, global_batch=256, seq=8192)
    notes = train(**job, advise=True)["notes"]
    assert any(note.startswith("--sequence-parallel") and "makes it fit" in note for note in notes)


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--model", "llama3-70b", "--system", "dgx-h100", "--gpus", "64", "--tp", "8"],
        ["serve", "--model", "llama3-405b", "--system", "dgx-h100", "--gpus", "1", "--tp", "1"],
    ],
)
def test_uncertainty_on_a_job_that_does_not_fit_says_there_is_no_band(args, capsys, monkeypatch):
    """``--uncertainty`` spreads a speed and a time: a job that does not fit has neither, so it gets no
    band (and says why), in the table and in JSON, where a band would be a range around nothing."""
    code, out = run_cli([*args, "--uncertainty"], capsys, monkeypatch)
    assert code == 0 and "DOES NOT FIT" in out.out and "bands: none: the job does not fit" in out.out
    assert "p10-p90" not in out.out
    code, out = run_cli([*args, "--uncertainty", "--json"], capsys, monkeypatch)
    data = json.loads(out.out)
    assert data["bands"].startswith("none") and not any(key.endswith("_p90") for key in data)


def test_compare_marks_a_design_that_does_not_fit_with_its_fix(capsys, monkeypatch):
    common = "model=llama3-70b,dtype=fp8,gpus=64,tp=8,pp=2,global_batch=256,seq=8192,system=dgx-h100"
    args = ["compare", "--common", common, "--a", "sequence_parallel=false", "--b", "sequence_parallel=true"]
    code, out = run_cli(args, capsys, monkeypatch)
    lines = out.out.splitlines()
    assert code == 0 and lines[0].endswith("DOES NOT FIT") and not lines[1].endswith("DOES NOT FIT")
    step = next(line for line in lines if line.startswith("step time"))
    assert step.split()[3] == "-" and "A does not fit" in out.out and "makes it fit" in out.out
    code, out = run_cli([*args, "--plot", "/tmp/never.png"], capsys, monkeypatch)
    assert code == 2 and "no step to draw" in out.err


@pytest.mark.parametrize("global_batch", [2**40, 963761198400])
def test_the_largest_micro_batch_is_searched_among_divisors_of_any_global_batch(global_batch):
    """--micro-batch max prices the global batch's divisors (6,720 for 963,761,198,400), not every
    number up to it: a trillion-sequence batch answers, here that nothing fits and what would."""
    with pytest.raises(Exception, match=r"no micro-batch fits: at micro-batch 1 .* makes it fit"):
        train(model="llama3-8b", system="dgx-h100", gpus=8, global_batch=global_batch, micro_batch="max")
    found = train(model="llama3-8b", system="dgx-h100", gpus=8, global_batch=global_batch, micro_batch="max",
                  recompute="full", zero=3)  # fmt: skip
    assert found["fits"] and global_batch % found["micro_batch"] == 0 and found["micro_batch"] > 1


def test_an_overlap_whose_gemm_or_buffer_does_not_fit_the_gpu_has_no_time(capsys, monkeypatch):
    """A GEMM beside a collective on one H100: 8192^3 with a 256 MiB all-gather runs; a 10^9-cube GEMM
    (its operands exabytes) or a 100 GiB buffer does not fit 80 GB, so it has no time, in the table or
    at the command line, as roofline gemm already refused such a GEMM."""
    big = 1_000_000_000
    jobs = pd.DataFrame({"system": "dgx-h100", "m": [8192, big, 8192], "n": [8192, big, 8192],
                         "k": [8192, big, 8192], "size_bytes": [2**28, 2**28, 100 * 2**30]})  # fmt: skip
    table = evaluator("overlap")(jobs)
    assert table.valid.tolist() == [True, False, False] and table.time_s[1:].isna().all()
    assert table.problem[1:].str.endswith("it does not fit").all() and "100 GiB buffer" in table.problem[2]
    code, out = run_cli(["overlap", "--system", "dgx-h100", "--size", "100GiB"], capsys, monkeypatch)
    assert code == 2 and "does not fit" in out.err and out.out == ""


def test_a_collective_whose_buffer_does_not_fit_the_gpu_is_refused(capsys, monkeypatch):
    """nccl-tests holds at least the buffer on every GPU (in place): 64 GiB reads on an 80 GB H100,
    1 TiB was priced at 4 s and is refused, at the command line and in the collective evaluator."""
    args = ["collective", "allreduce", "--system", "dgx-h100", "--size"]
    assert run_cli([*args, "64GiB"], capsys, monkeypatch)[0] == 0
    code, out = run_cli([*args, "1TiB"], capsys, monkeypatch)
    assert code == 2 and "1 TiB buffer does not fit" in out.err and out.out == ""
    table = evaluator("collective")(
        pd.DataFrame({"op": "allreduce", "system": "dgx-h100", "size_bytes": [2**36, 2**40]})
    )
    assert table.valid.tolist() == [True, False] and "does not fit" in table.problem[1]


def test_a_dispatch_whose_tokens_do_not_fit_the_gpu_is_refused(capsys, monkeypatch):
    """DeepEP's dispatch of DeepSeek-V3 at 100 million tokens per H100 (1.3 TiB of activations) was
    priced; each GPU holds at least its tokens' activations, so it is refused, and 128 tokens run."""
    args = ["comm", "dispatch", "--model", "deepseek-v3", "--system", "dgx-h100", "--tokens"]
    assert run_cli([*args, "128"], capsys, monkeypatch)[0] == 0
    code, out = run_cli([*args, "100000000"], capsys, monkeypatch)
    assert code == 2 and "tokens' activations take" in out.err and "does not fit" in out.err and out.out == ""


def test_a_message_or_stencil_subdomain_no_gpu_holds_is_refused(capsys, monkeypatch):
    """A 1 PiB message between two H100 nodes, and a stencil subdomain of 100,000 cells per side on an
    MI250X GCD (two arrays of 10^15 doubles), were priced; a sender holds at least its message and a
    GPU its subdomain's arrays, so both are refused, and their neighbours (8 B; 1,000 cells) run."""
    code, out = run_cli(["comm", "schemes", "--system", "dgx-h100", "--size", "1PiB"], capsys, monkeypatch)
    assert code == 2 and "message's sender holds at least its buffer" in out.err and out.out == ""
    sent = evaluator("initiation")(
        pd.DataFrame({"system": "dgx-h100", "scheme": "host-driven", "size_bytes": [8, 2.0**50]})
    )
    halo = evaluator("halo")(pd.DataFrame({"system": "frontier-node", "scheme": "host-driven", "n": [1000, 100_000],
                                           "gpus": 8, "halo": 1}))  # fmt: skip
    for table in (sent, halo):
        assert table.valid.tolist() == [True, False] and "does not fit" in table.problem[1]
