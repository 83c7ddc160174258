"""The host that issues a training step's kernels, and CUDA graphs: by hand, and as properties over
random jobs (graphs never slow a step; a larger micro-batch never lowers a host-bound step's tokens/s)."""

import numpy as np
import pandas as pd
import pytest
from conftest import picker
from typer.testing import CliRunner

from commodel.cli import app
from commodel.hardware import cluster
from commodel.pricing.evaluator import evaluator
from commodel.pricing.training import job_layouts
from commodel.workloads.model.catalog import model
from commodel.workloads.training.host_issue import (
    BACKWARD_OPS,
    GEMM_MODULES,
    SCOPE_OPS,
    host_issue_s,
    host_wait_s,
    scope_shares,
)

MOE_GRAPHS = "attn,moe_router,moe_preprocess"

#: Operators' worth of host time a Transformer Engine GEMM module adds, as the host records state it.
TE_MODULE_OPS = cluster("dgx-h100").system.initiation.te_module_ops.value


def test_a_dense_layers_host_time_by_hand():
    c = cluster("dgx-h100")
    x = job_layouts({"model": "llama3-8b", "system": "dgx-h100", "gpus": 8})
    fwd, bwd = host_issue_s(model("llama3-8b"), c, x, fp8=False)
    op = c.system.initiation.op_dispatch.value + c.gpu.launch_overhead.value  # 10.5 + 3 us
    ops = SCOPE_OPS["attn"] + SCOPE_OPS["mlp"] + 2 * GEMM_MODULES * TE_MODULE_OPS  # TE's four GEMM modules
    assert fwd == pytest.approx(ops * op) and bwd == pytest.approx(BACKWARD_OPS * ops * op)
    graphed = job_layouts({"model": "llama3-8b", "system": "dgx-h100", "gpus": 8, "cuda_graphs": "attn,mlp"})
    fwd, bwd = host_issue_s(model("llama3-8b"), c, graphed, fp8=False)
    assert fwd == bwd == pytest.approx(2 * c.system.initiation.graph_replay.value)


def test_recomputation_issues_again_what_it_runs_again():
    """Full recomputation runs the layer's forward again in the backward, so the host issues it again
    (a captured scope replays once more); a whole-module checkpoint re-issues its scope's operators."""
    c, net = cluster("dgx-h100"), model("llama3-8b")
    op = c.system.initiation.op_dispatch.value + c.gpu.launch_overhead.value

    def issue(**job: object) -> tuple[float, float]:
        x = job_layouts({"model": "llama3-8b", "system": "dgx-h100", "gpus": 8, **job})
        return tuple(float(v) for v in host_issue_s(net, c, x, fp8=False))

    fwd, bwd = issue()
    assert issue(recompute="full") == pytest.approx((fwd, bwd + fwd))
    assert issue(recompute="selective") == pytest.approx((fwd, bwd))  # one kernel: left out
    mlp = (SCOPE_OPS["mlp"] + GEMM_MODULES * TE_MODULE_OPS) * op
    assert issue(recompute_modules="mlp") == pytest.approx((fwd, bwd + mlp))
    graphed = issue(cuda_graphs="attn,mlp")
    assert issue(cuda_graphs="attn,mlp", recompute="full") == pytest.approx((graphed[0], 2 * graphed[1]))


def test_recomputation_never_speeds_a_host_bound_step_whose_collectives_ran_in_the_hosts_gaps():
    """Qwen3-30B-A3B under ZeRO-3 on 16 H200 is host-bound: its gathers and reduce-scatters run while
    the GPU waits for the host, and recomputing layers (more work for the GPU and for the host) only
    lengthens the step. Priced with the waits as compute-free time, a collective hid behind compute
    alone, so recomputation, by adding compute to hide behind, made the step 10% shorter."""
    job = {"model": "qwen3-30b-a3b", "system": "hgx-h200", "gpus": 16, "global_batch": 256, "micro_batch": 2,
           "zero": 3, "overlap": "occupancy-shaped"}  # fmt: skip
    steps = _steps(
        pd.DataFrame([{**job, "recompute": r} for r in ("none", "full", "full")]).assign(
            recompute_layers=[0, 15, 0]
        )
    )
    none, block, full = steps.step_time_s
    assert steps.valid.all() and steps.host_s[0] > 0.1 * none
    assert none < block < full


def test_recomputation_never_makes_a_step_faster():
    """Over 1,500 random jobs (dense and MoE models, five systems, every overlap strategy, ZeRO 0-3,
    CUDA graphs, userbuffers): recomputing every layer never shortens a step, where before the host's
    waits carried collectives it shortened a fifth of them, by up to 14%; under ideal overlap (no
    contention) ZeRO-3's exposure, the largest stage's, was added to smaller stages too; and the
    recomputed kernels added their time to a window but not their HBM bytes, so a collective beside
    them slowed less (by up to 1.2%: Mixtral 8x7B under ZeRO-3 on 16 H200, copy-engine)."""
    pick = picker(31, 1500)

    frame = pd.DataFrame({
        "model": pick("llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3"),
        "system": pick("dgx-h100", "hgx-h200", "gb200-nvl72", "dgx-b200", "mi300x-8"),
        "gpus": pick(8, 16, 64, 256), "tp": pick(1, 2, 4, 8), "pp": pick(1, 2, 4), "ep": pick(1, 1, 8),
        "global_batch": pick(256, 1024), "micro_batch": pick(1, 2, 4), "sequence_parallel": pick(True, False),
        "cuda_graphs": pick("", "", "attn"), "dtype": pick("bf16", "fp8"), "zero": pick(0, 1, 3),
        "overlap": pick("serial", "sm-partition", "occupancy-shaped", "ideal", "copy-engine", "in-network"),
        "tp_overlap": pick("none", "none", "userbuffers"),
    }).infer_objects()  # fmt: skip
    frame.loc[frame.model.isin(["llama3-8b", "llama3-70b"]), "ep"] = 1
    frame.loc[frame.tp == 1, "tp_overlap"] = "none"
    none, full = (_steps(frame.assign(recompute=r)) for r in ("none", "full"))
    both = none.valid & full.valid
    assert both.sum() > 400
    assert (full.step_time_s[both] >= none.step_time_s[both] * (1 - 1e-12)).all()


def test_a_lone_micro_batchs_all_to_alls_shorten_its_waits_for_the_host():
    """Qwen3-30B-A3B on 64 GB200 at tp 8, ep 8, micro-batch 1, 1F1B expert overlap: the host issues
    most of the step. The first forward and the last backward pair with no other micro-batch and run
    their all-to-alls exposed; the GPU, busy with them, waits that much less for the host. Added on
    top of the host's waits, they made ideal overlap 0.06% slower than serial execution (16.363 s
    against 16.353 s); every overlapping strategy now gives the host-bound step the same time."""
    job = {"model": "qwen3-30b-a3b", "system": "gb200-nvl72", "gpus": 64, "tp": 8, "ep": 8, "global_batch": 256,
           "micro_batch": 1, "sequence_parallel": True, "dtype": "fp8", "dispatcher": "hybridep",
           "ep_overlap": "1f1b"}  # fmt: skip
    strategies = ("ideal", "serial", "sm-partition", "occupancy-shaped")
    steps = _steps(pd.DataFrame([{**job, "overlap": name} for name in strategies]))
    ideal = steps.step_time_s[0]
    assert steps.valid.all() and steps.host_s[0] > 0.8 * ideal
    assert (steps.step_time_s >= ideal * (1 - 1e-12)).all()
    assert steps.step_time_s[2:].tolist() == pytest.approx([ideal, ideal], rel=1e-9)


def test_ideal_overlap_is_the_floor_of_every_strategy():
    """Over 1,000 random MoE and dense jobs (five systems, expert overlap, userbuffers, ZeRO 0-3, CUDA
    graphs): no strategy runs a step faster than ideal overlap, which hides every collective behind
    compute. Host-bound steps with 1F1B expert overlap ran up to 0.12% faster than ideal, the
    micro-batches that pair with none (the slowest stage's and, to 0.034%, the bubble's) exposing
    their all-to-alls on top of waits for the host that they shorten."""
    pick = picker(3, 1000)

    frame = pd.DataFrame({
        "model": pick("llama3-8b", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b"),
        "system": pick("dgx-h100", "gb200-nvl72", "mi300x-8", "dgx-b200"),
        "gpus": pick(16, 64, 256), "tp": pick(1, 2, 8), "pp": pick(1, 2, 4), "ep": pick(1, 8),
        "global_batch": pick(256, 512), "micro_batch": pick(1, 2), "recompute": pick("none", "full"),
        "sequence_parallel": True, "zero": pick(0, 1, 3), "dtype": pick("bf16", "fp8"),
        "cuda_graphs": pick("none", "full_iteration"), "dispatcher": pick("alltoall", "deepep", "hybridep"),
        "tp_overlap": pick("none", "userbuffers"), "ep_overlap": pick("none", "1f1b"),
    }).infer_objects()  # fmt: skip
    frame.loc[frame.model == "llama3-8b", "ep"] = 1
    ideal = _steps(frame.assign(overlap="ideal"))
    for name in ("serial", "sm-partition", "occupancy-shaped", "copy-engine"):
        other = _steps(frame.assign(overlap=name))
        both = ideal.valid & other.valid
        assert both.sum() > 150
        assert (other.step_time_s[both] >= ideal.step_time_s[both] * (1 - 1e-12)).all(), name


def test_mlas_five_attention_modules_issue_three_modules_more_than_gqas_two():
    """DeepSeek-V3's attention runs five Transformer Engine GEMM modules (the query's down and up
    projections, the key-value down and up projections, the output projection) where a GQA layer runs
    two: three more GEMMs, each with its module's own Python, and under FP8 its casts."""
    from commodel.workloads.training.host_issue import FP8_OPS_PER_GEMM_MODULE, scope_ops

    net = model("deepseek-v3")
    x = job_layouts({"model": "deepseek-v3", "system": "gb200-nvl72", "gpus": 64, "ep": 64, "pp": 1})
    gqa = net.model_copy(update={"mla": None})
    for fp8 in (False, True):
        mla_ops, _ = scope_ops(net, x, fp8, TE_MODULE_OPS)["attn"]
        gqa_ops, _ = scope_ops(gqa, x, fp8, TE_MODULE_OPS)["attn"]
        module = TE_MODULE_OPS + (FP8_OPS_PER_GEMM_MODULE if fp8 else 0.0)
        assert np.all(mla_ops - gqa_ops == pytest.approx(3 * (1 + module)))


def test_a_module_costs_its_operators_and_transformer_engines_own_python():
    """TransformerEngine issue 2053's host times per Linear forward: a TE module costs 2.69 operators'
    worth, a torch module one, and a Grace host's operator about 2.75 x86 ones (34.1 + 3 us against
    10.5 + 3 us): the model's figures follow the CPU and the module."""
    from commodel.workloads.training.host_issue import module_host_s

    grace, x86 = cluster("gb200-nvl72"), cluster("dgx-h100")
    assert module_host_s(grace, "te-linear") == pytest.approx(2.69 * module_host_s(grace, "torch-linear"))
    assert 2.5 < module_host_s(grace, "torch-linear") / module_host_s(x86, "torch-linear") < 3.0


def test_a_te_modules_own_host_cost_is_the_hosts_and_an_overlay_moves_it(tmp_path, monkeypatch):
    """The host's cost per Transformer Engine module (``initiation.te_module_ops``) is a system record's,
    with a stated range ``commodel calibrate`` fits within: an overlay that doubles it adds one
    operator's worth to a TE Linear's forward, and more to a host-bound MoE layer's issue."""
    from commodel.hardware.loader import OVERLAY_ENV
    from commodel.workloads.training.host_issue import module_host_s

    net = model("qwen3-30b-a3b")
    x = job_layouts({"model": "qwen3-30b-a3b", "system": "gb200-nvl72", "gpus": 8, "ep": 8})
    te, issue = (
        module_host_s(cluster("gb200-nvl72"), "te-linear"),
        host_issue_s(net, cluster("gb200-nvl72"), x, False),
    )
    (tmp_path / "systems").mkdir()
    (tmp_path / "systems" / "gb200-nvl72.toml").write_text(
        '[initiation]\nte_module_ops = { value = 2.1, range = [1.35, 2.1], source = "test" }\n'
    )
    monkeypatch.setenv(OVERLAY_ENV, str(tmp_path))
    grace = cluster("gb200-nvl72")
    assert module_host_s(grace, "te-linear") - te == pytest.approx(
        0.41 * module_host_s(grace, "torch-linear")
    )
    assert np.all(host_issue_s(net, grace, x, False)[0] > issue[0])


def test_the_gpu_waits_only_for_what_the_host_does_not_hide_and_for_the_dispatchers_sync():
    c = cluster("gb200-nvl72")
    net = model("qwen3-30b-a3b")
    x = job_layouts({"model": "qwen3-30b-a3b", "system": "gb200-nvl72", "gpus": 8, "ep": 8})
    fwd, bwd = host_issue_s(net, c, x, fp8=False)
    busy = sum(host_wait_s(net, c, x, False, 10 * fwd, 10 * bwd))  # a GPU-bound layer: only the sync refill
    starved = sum(host_wait_s(net, c, x, False, 0.5 * fwd, 0.5 * bwd))
    assert 0 < busy < 0.05 * fwd
    assert starved == pytest.approx(0.5 * (fwd + bwd) + busy)

    def refill(**job: object) -> float:
        x = job_layouts({"model": "qwen3-30b-a3b", "system": "gb200-nvl72", "gpus": 8, "ep": 8, **job})
        return float(sum(host_wait_s(net, c, x, False, 10 * fwd, 10 * bwd)))

    # dropless experts' counts reach the host whatever the dispatcher (Megatron's grouped experts hand
    # them to TE's GroupedLinear as a list): the same refill; padded experts (a capacity factor) need none
    assert refill(dispatcher="deepep") == refill(dispatcher="hybridep") == pytest.approx(float(busy))
    assert refill(dispatcher="deepep", capacity_factor=1.5) == refill(capacity_factor=1.5) == 0


def _random_jobs(seed: int, jobs: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "model": rng.choice(["llama3-8b", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b"], jobs),
        "system": rng.choice(["dgx-h100", "gb200-nvl72", "dgx-b200", "mi300x-8"], jobs),
        "micro_batch": rng.choice([1, 2, 4], jobs), "seq": rng.choice([1024, 4096], jobs),
        "dtype": rng.choice(["bf16", "fp8"], jobs),
    })  # fmt: skip
    frame["gpus"], frame["global_batch"] = 8, 64
    frame["ep"] = np.where(frame.model == "llama3-8b", 1, 8)
    return frame


def _runs(name: str, scopes: str) -> bool:
    """Whether model ``name`` runs every one of ``scopes`` (a scope it never runs is refused)."""
    shares = scope_shares(model(name))
    return scopes == "full_iteration" or all(shares[s] > 0 for s in scopes.split(","))


def _steps(jobs: pd.DataFrame) -> pd.DataFrame:
    return evaluator("training")(jobs)


def test_graphs_never_make_a_step_slower():
    """Over 2,000 random jobs (dense and MoE models, four systems, micro-batches, FP8): every scope a
    model can capture, alone and together, never makes the step slower, and it cuts the host's share."""
    jobs = _random_jobs(21, 400)
    moe = jobs.model != "llama3-8b"
    eager = _steps(jobs)
    runs = eager.valid.to_numpy()
    assert runs.mean() > 0.5 and eager.problem[~runs].str.startswith("does not fit").all()
    for scopes in ("attn", "mlp", "moe_router", MOE_GRAPHS, "full_iteration"):
        scope = np.where(moe & (scopes == "full_iteration"), MOE_GRAPHS, scopes)
        graphed = jobs.assign(
            cuda_graphs=np.where([_runs(m, s) for m, s in zip(jobs.model, scope, strict=True)], scope, "")
        )
        result = _steps(graphed)
        assert (result.valid == eager.valid).all()  # a graph takes no memory the model counts
        result, eager_runs = result[runs], eager[runs]
        assert (result.step_time_s <= eager_runs.step_time_s * (1 + 1e-12)).all(), scopes
        assert (result.host_s <= eager_runs.host_s + 1e-15).all(), scopes
    whole = _steps(jobs.assign(cuda_graphs="full_iteration")[~moe & runs])
    assert (eager.host_s > 0).any() and (whole.host_s == 0).all()


def test_a_larger_micro_batch_never_lowers_a_host_bound_steps_throughput():
    """Over 1,200 random jobs: where the host holds the step back, doubling the micro-batch (the GPU's
    work grows, the host's does not) never lowers the tokens per second."""
    jobs = _random_jobs(22, 600)
    small = _steps(jobs)
    large = _steps(jobs.assign(micro_batch=2 * jobs.micro_batch))
    bound = (small.host_s > 0.05 * small.step_time_s) & large.valid
    assert bound.sum() > 20
    assert (large.tokens_per_s[bound] >= small.tokens_per_s[bound] * (1 - 1e-12)).all()
    assert (
        large.host_s[bound] / large.step_time_s[bound] < small.host_s[bound] / small.step_time_s[bound]
    ).all()


def test_a_slower_host_cpu_holds_a_small_micro_batch_back_more(tmp_path, monkeypatch):
    """The driving input: the system record's per-operator dispatch. Doubling it raises the host's
    share of a host-bound step."""
    from commodel.hardware.loader import OVERLAY_ENV

    job = {"model": ["qwen3-30b-a3b"], "system": ["gb200-nvl72"], "gpus": [8], "ep": [8], "seq": [4096]}
    before = _steps(pd.DataFrame(job))
    (tmp_path / "systems").mkdir()
    (tmp_path / "systems" / "gb200-nvl72.toml").write_text(
        '[initiation]\nop_dispatch = { value = "68.2 us", range = ["34.1 us", "136.4 us"], source = "test: a host '
        'twice as slow" }\n'
    )
    monkeypatch.setenv(OVERLAY_ENV, str(tmp_path))
    after = _steps(pd.DataFrame(job))
    assert after.host_s[0] > 1.5 * before.host_s[0] > 0
    assert after.step_time_s[0] > before.step_time_s[0]


def _waited(output: str) -> float:
    """The share of the step a ``train`` output says the GPUs wait for the host (%)."""
    return float(output.split("the GPUs wait ")[1].split("%")[0])


def test_the_output_names_a_host_bound_step_and_what_would_fix_it():
    """Qwen3-30B-A3B at micro-batch 1 on 8 GB200: Grace's 34 us per operator leaves the GPUs waiting
    for the host; the output names the graphs and the larger micro-batch, and each cuts the wait (the
    dropless experts stay eager, so graphs alone leave part of it)."""
    args = ["train", "--model", "qwen3-30b-a3b", "--system", "gb200-nvl72", "--gpus", "8", "--ep", "8",
            "--seq", "4096", "--global-batch", "64"]  # fmt: skip
    out = CliRunner().invoke(app, args).output
    assert "host-bound: the GPUs wait" in out and f"--cuda-graphs {MOE_GRAPHS}" in out
    graphed = CliRunner().invoke(app, [*args, "--cuda-graphs", MOE_GRAPHS]).output
    larger = CliRunner().invoke(app, [*args, "--micro-batch", "4"]).output
    for fixed in (graphed, larger):
        assert "host-bound" not in fixed or _waited(fixed) < _waited(out)
