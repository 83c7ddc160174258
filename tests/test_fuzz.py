"""Fuzzing what users write by hand: sweep specifications, hardware overlays, training and serving
jobs. Whatever the input, it either works (finite numbers) or raises one CommodelError (never another
exception)."""

from pathlib import Path

import numpy as np
import tomli_w
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from commodel.errors import CommodelError
from commodel.explore.spec import load_spec
from commodel.hardware import cluster, default_db
from commodel.hardware.loader import apply_overlay
from commodel.pricing.run import serve, train
from commodel.workloads.model.catalog import models
from commodel.workloads.training.hetero import is_node_groups, parse_node_groups

SCALARS = st.one_of(
    st.integers(-(2**40), 2**40), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.text(max_size=12), st.sampled_from(["1 GB", "3.35 TB/s", "700 W", "0.6 us", "-5 W", "GB", "fp8", ""]),
)  # fmt: skip
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(
    st.sampled_from(["value", "source", "choice", "int", "real", "lookup", "values", "log", "points"]), inner,
    max_size=3)), max_leaves=8)  # fmt: skip
SPEC_KEYS = {
    "study": ["name", "evaluate", "method", "budget", "seed", "chunk_size", "constraints", "title"],
    "fixed": ["model", "system", "gpus", "tp", "pue", "global_batch", "seq"],
    "variables": ["tp", "pp", "system", "nodes", "pue"],
    "derived": ["global_batch", "price_per_gpu_hour"],
    "objectives": ["step_time_s", "cost_usd", "nonsense"],
    "parameters": ["paper"],
}


def _toml_safe(value: object) -> bool:
    try:
        tomli_w.dumps({"x": value})
        return True
    except (TypeError, ValueError):
        return False


@st.composite
def specs(draw: st.DrawFn) -> dict:
    document = {}
    for table, keys in SPEC_KEYS.items():
        if draw(st.booleans()):
            document[table] = {
                k: draw(VALUES) for k in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True))
            }
    if draw(st.booleans()):  # often a valid core, so the fuzzing reaches deeper checks
        document.setdefault("study", {}).update(name="fuzz", evaluate="training", method="grid")
        document.setdefault("fixed", {}).update(model="llama3-8b", system="dgx-h100")
        document.setdefault("objectives", {}).update(step_time_s="min")
    return document


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs())
def test_any_spec_loads_or_is_one_commodel_error(tmp_path_factory, document):
    if not _toml_safe(document):
        return
    path = Path(tmp_path_factory.mktemp("spec")) / "spec.toml"
    path.write_text(tomli_w.dumps(document))
    try:
        load_spec(path)
    except CommodelError as exc:
        assert str(exc).strip()


@st.composite
def overlays(draw: st.DrawFn) -> dict:
    kind = draw(st.sampled_from(["gpus", "links", "systems", "switches"]))
    name = draw(st.sampled_from(["h100-sxm", "nvlink4", "dgx-h100", "new-thing"]))
    fields = draw(st.dictionaries(
        st.sampled_from(["memory_bandwidth", "tdp", "bandwidth", "latency", "gpu", "gpus_per_node",
                         "efficiency", "description", "vendor", "kind", "peak_flops", "bogus"]),
        VALUES, max_size=3))  # fmt: skip
    return {kind: {name: fields}}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overlays())
def test_any_hardware_overlay_applies_or_is_one_commodel_error(tmp_path_factory, document):
    if not _toml_safe(document):
        return
    path = Path(tmp_path_factory.mktemp("hw")) / "overlay.toml"
    path.write_text(tomli_w.dumps(document))
    try:
        apply_overlay(default_db(), path)
    except CommodelError as exc:
        assert str(exc).strip()


POWERS = st.sampled_from([1, 2, 4, 8])
SYSTEMS = st.sampled_from(["dgx-a100", "dgx-h100", "hgx-h800", "dgx-b200", "gb200-nvl72", "gb300-nvl72", "mi300x-8",
                           "a40-pcie-8"])  # fmt: skip


@st.composite
def training_jobs(draw: st.DrawFn) -> dict:
    """Layouts as a user types them: often valid, with the options that interact (offload, vpp,
    uneven stages, pipeline layouts, MoE dispatch, precisions) drawn freely."""
    name = draw(st.sampled_from(sorted(models())))
    tp, pp, cp = draw(POWERS), draw(POWERS), draw(st.sampled_from([1, 2]))
    job = {"model": name, "system": draw(SYSTEMS), "tp": tp, "pp": pp, "cp": cp,
           "gpus": tp * pp * cp * draw(st.sampled_from([1, 2, 4, 16])),
           "global_batch": draw(st.sampled_from([16, 64, 256])), "seq": draw(st.sampled_from([None, 1024, 8192]))}  # fmt: skip
    optional = {
        "ep": POWERS, "vpp": st.sampled_from([2, 3, 4]), "micro_batch": st.sampled_from([1, 2]),
        "recompute": st.sampled_from(["none", "selective", "full", "auto"]), "offload_layers": st.integers(1, 8),
        "dtype": st.sampled_from(["bf16", "fp8", "mxfp8", "fp8-block"]), "zero": st.integers(0, 3),
        "first_stage_layers": st.integers(1, 6), "last_stage_layers": st.integers(1, 6), "mtp_layers": st.just(1),
        "ends_as_layers": st.just(True), "schedule": st.sampled_from(["1f1b", "dualpipe"]),
        "pipeline_layout": st.sampled_from(["Et*4|(t*4|)*14tmL", "Et|t|tL", "E|t*2|L"]),
        "dispatcher": st.sampled_from(["alltoall", "deepep", "hybridep"]), "bf16_moments": st.just(True),
        "permute_fusion": st.just(True), "sequence_parallel": st.just(True), "expert_load": st.floats(1, 3),
        "overlap": st.sampled_from(["serial", "sm-partition", "occupancy-shaped", "in-network"]),
        "tp_overlap": st.sampled_from(["none", "async", "userbuffers", "t3", "cais"]),
        "failures": st.sampled_from(["llama3-h100", "bloom-a100", "opt-a100"]),
        "storage_share": st.floats(0.01, 1.0), "storage_node_GBps": st.floats(1.0, 1000.0),
        "reshard_after_forward": st.booleans(), "elementwise": st.sampled_from(["fused", "eager"]),
    }  # fmt: skip
    for key in draw(st.lists(st.sampled_from(sorted(optional)), max_size=5, unique=True)):
        job[key] = draw(optional[key])
    return job


@settings(max_examples=300, deadline=None)
@given(training_jobs())
@example({"model": "gpt3-175b", "system": "a40-pcie-8", "tp": 4, "pp": 1, "cp": 1, "gpus": 8, "global_batch": 64,
          "seq": 2048, "offload_layers": 1})  # fmt: skip
def test_any_training_job_prices_or_is_one_commodel_error(job):
    """A job that fits is priced (a finite, positive step within the GPU's peak); one that does not has
    its memory, more than its GPUs hold, and no step, throughput, MFU or energy; any other is refused
    with one CommodelError: no other exception, no infinite or NaN step (a stated offload on a system
    with no host memory once priced an infinite one)."""
    try:
        result = train(**job)
    except CommodelError as exc:
        assert str(exc).strip()
        return
    assert np.isfinite(result["memory_per_gpu_bytes"]) and result["memory_per_gpu_bytes"] > 0
    if not result["fits"]:
        system = job["system"]
        names = [name for name, _ in parse_node_groups(system)] if is_node_groups(system) else [system]
        held = min(cluster(name).gpu.memory_capacity.value for name in names)
        assert result["memory_per_gpu_bytes"] > held
        assert not {"step_time_s", "tokens_per_s", "mfu", "energy_per_token_J", "breakdown"} & set(result)
        return
    assert np.isfinite(result["step_time_s"]) and result["step_time_s"] > 0
    assert 0 < result["mfu"] <= 1


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(models())), SYSTEMS, POWERS, st.sampled_from([1, 2]),
    st.sampled_from([1, 128, 8192]), st.sampled_from([1, 2, 2048]), st.sampled_from(["bf16", "fp8", "fp4"]),
    st.sampled_from([{}, {"prompt_cv": 1.0}, {"slo_ttft": 1.0}, {"max_num_tokens": 4}, {"prefill_gpus": 2},
                     {"host_schedule": "overlapped"}, {"host_schedule": "overlapped", "slo_tpot": 0.05}]),
)  # fmt: skip
def test_any_serving_job_prices_or_is_one_commodel_error(name, system, tp, pp, prompt, output, dtype, extra):
    """Likewise for serving, with one output token (prefill only, which once failed on an empty
    decode GEMM) and the engine's limits."""
    try:
        result = serve(model=name, system=system, tp=tp, pp=pp, gpus=tp * pp * 2, prompt=prompt, output=output,
                       dtype=dtype, **extra)  # fmt: skip
    except CommodelError as exc:
        assert str(exc).strip()
        return
    numbers = {k: v for k, v in result.items() if isinstance(v, float)}
    assert all(np.isfinite(v) and v >= 0 for v in numbers.values()), numbers
    if result["max_batch"] == 0:  # nothing fits beside the weights: nothing is timed
        assert result["output_tokens_per_s"] is None and not result["fits"]
    else:
        assert result["output_tokens_per_s"] > 0


#: Lines of real nccl-tests output (all_reduce_perf on 8 GPUs), which the fuzzer mixes, drops and mangles.
LOG_LINES = [
    "# nccl-tests version 2.13.10 nccl-headers=22304 nccl-library=22304",
    "# Collective test starting: all_reduce_perf",
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
    "validation: 1 graph: 0",
    "#  Rank  0 Group  0 Pid  12345 on   node-a device  0 [0x18] NVIDIA H100 80GB HBM3",
    "#  Rank  1 Group  0 Pid  12346 on   node-a device  1 [0x2a] NVIDIA H100 80GB HBM3",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    "           8             2     float     sum      -1    38.25    0.00    0.00      0    36.86    0.00    0.00      0",
    "     1048576        262144     float     sum      -1    44.10   23.78   41.61      0    43.90   23.89   41.80      0",
    "  1073741824     268435456     float     sum      -1   4380.2  245.13  428.98      0   4378.1  245.25  429.19      0",
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : 123.4",
]
LOG_FRAGMENTS = st.one_of(
    st.sampled_from(LOG_LINES),
    st.text(max_size=60),
    st.builds(lambda line, cut: line[:cut], st.sampled_from(LOG_LINES), st.integers(0, 120)),
    st.builds(lambda line, old, new: line.replace(old, new), st.sampled_from(LOG_LINES),
              st.sampled_from(["float", "sum", "-1", "38.25", "0", "#", "size"]),
              st.sampled_from(["half", "none", "3", "nan", "-5", "", "x", "inf"])),
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(LOG_FRAGMENTS, max_size=14), st.sampled_from(["all_reduce_perf.log", "run.txt", "x.log"]))
@example(LOG_LINES, "run.txt")
def test_any_nccl_tests_log_reads_or_is_one_commodel_error(tmp_path_factory, lines, name):
    from commodel.calibrate.nccl_tests import read

    path = tmp_path_factory.mktemp("log") / name
    path.write_text("\n".join(lines) + "\n")
    try:
        log = read(path)
    except CommodelError as exc:
        assert str(exc).strip() and "\n" not in str(exc).strip()
        return
    assert len(log.rows) > 0 and (log.rows.time_s > 0).all() and log.op


RUN_LOGS = Path(__file__).parent / "data" / "logs"
RUN_LOG_LINES = [line for log in sorted(RUN_LOGS.glob("*.log")) for line in log.read_text().splitlines()]
RUN_FRAGMENTS = st.one_of(
    st.sampled_from(RUN_LOG_LINES),
    st.builds(lambda line, cut: line[:cut], st.sampled_from(RUN_LOG_LINES), st.integers(0, 200)),
    st.builds(lambda line, old, new: line.replace(old, new), st.sampled_from(RUN_LOG_LINES),
              st.sampled_from(["True", "1", "8", "'", "{", ":", "deepep", "2048", "."]),
              st.sampled_from(["False", "0", "-1", "", "nan", "1e400", "None", "[", "x"])),
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(RUN_FRAGMENTS, max_size=40), st.sampled_from(["train", "serve"]))
def test_any_run_log_reads_or_is_one_commodel_error(tmp_path_factory, lines, kind):
    """Training and serving logs cut, spliced and edited: a run with a positive measurement, or one
    line naming the file (never a traceback)."""
    from commodel.calibrate.logs import read_serving, read_training

    path = tmp_path_factory.mktemp("log") / "run.log"
    path.write_text("\n".join(lines) + "\n")
    try:
        if kind == "train":
            run = read_training(path, "dgx-h100")
        else:
            run = read_serving(path, "dgx-h100", "gpt-oss-120b", {"tp": 8})
    except CommodelError as exc:
        assert str(exc).strip() and "\n" not in str(exc).strip() and str(path) in str(exc)
        return
    assert run.value > 0 and np.isfinite(run.value)


HF_KEYS = ["model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "vocab_size", "max_position_embeddings", "head_dim", "tie_word_embeddings",
           "num_experts", "num_experts_per_tok", "moe_intermediate_size", "n_routed_experts", "num_local_experts",
           "first_k_dense_replace", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim"]  # fmt: skip
HF_VALUES = st.one_of(
    st.integers(-4, 1 << 20), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.sampled_from(["llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss", "bert", ""]),
    st.lists(st.integers(0, 8), max_size=3),
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(HF_KEYS), HF_VALUES, max_size=len(HF_KEYS)), st.booleans())
def test_any_model_config_loads_or_is_one_commodel_error(tmp_path_factory, config, from_real):
    """A Hugging Face config.json, a real one with fields overwritten or a random one: a model with
    positive sizes, or one CommodelError naming the file."""
    import json

    from commodel.workloads.model.files import load_model_file

    base = (
        json.loads((Path(__file__).parent / "data" / "hf" / "qwen3-30b-a3b.json").read_text())
        if from_real
        else {}
    )
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps({**base, **config}))
    try:
        model = load_model_file(path)
    except CommodelError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc).strip()
        return
    assert model.layers >= 1 and model.hidden >= 1 and model.vocab >= 1


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["none", "fixed", "sync", "streamguard"]), st.integers(2, 64), st.floats(10.0, 5000.0),
    st.floats(0.1, 100.0), st.floats(1.0, 2000.0), st.floats(0.0, 5.0), st.floats(0.0, 600.0),
)  # fmt: skip
def test_any_stream_run_prices_or_is_one_commodel_error(
    arm, workers, work_s, state_GB, mttf_s, anomalies, restart_s
):
    """A stream run is priced (its extra time at least its checkpoints', none negative, an on-time share
    between 0 and 100%), or refused: bad input with one CommodelError, a run the model cannot price in
    its row's problem."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    row = {"arm": arm, "workers": workers, "work_s": work_s, "state_GB": state_GB, "mttf_s": mttf_s,
           "anomalies_per_crash": anomalies, "restart_s": restart_s, "trials": 50}  # fmt: skip
    try:
        out = evaluator("stream")(pd.DataFrame([row])).iloc[0]
    except CommodelError as exc:
        assert str(exc).strip()
        return
    if not out.valid:  # a run the model refuses says why
        assert out.problem.strip() and np.isnan(out.impact_pct)
        return
    assert out.impact_pct >= out.overhead_pct - 1e-9 >= -1e-9 and 0 <= out.on_time_pct <= 100


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["hpc-cpu", "hpc-gpu", "shared-ai"]), st.sampled_from(["exclusive", "tres"]),
    st.floats(0.05, 0.97), st.floats(0.0, 600.0), st.floats(0.0, 60.0), st.integers(1, 64),
)  # fmt: skip
def test_any_partition_with_power_saving_prices_or_is_one_commodel_error(
    mix, policy, load, suspend, resume, nodes
):
    """A simulated partition with Slurm's power saving is priced (waits and boots non-negative,
    energy positive where the mix states node power), or refused: bad input with one CommodelError, a
    partition the model cannot price in its row's problem."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    row = {"job_mix": mix, "policy": policy, "load": load, "method": "simulation", "jobs": 300, "nodes": nodes,
           "suspend_after_min": suspend, "resume_min": resume}  # fmt: skip
    try:
        out = evaluator("scheduling")(pd.DataFrame([row])).iloc[0]
    except CommodelError as exc:
        assert str(exc).strip()
        return
    if not out.valid:  # a partition the model cannot price says why
        assert out.problem.strip() and np.isnan(out.mean_wait_min)
        return
    assert out.mean_wait_min >= 0 and out.boots_per_job >= 0
    assert np.isnan(out.energy_kWh_per_job) or out.energy_kWh_per_job > 0


#: A valid job of each built-in evaluator, which a test changes one input of.
EVALUATOR_JOBS = {
    "training": {"model": "llama3-8b", "system": "dgx-h100", "gpus": 8}, "serving": {"model": "llama3-8b",
    "system": "dgx-h100"}, "collective": {"size_bytes": 2**20}, "disaggregation": {"pool_servers": 4},
    "rollout": {"policy": "fixed"}, "scheduling": {"load": 0.5, "policy": "exclusive"}, "stream": {"arm": "fixed"},
    "initiation": {"scheme": "host-driven"}, "halo": {"scheme": "host-driven", "gpus": 8}, "moe_dispatch": {},
    "gemm": {}, "overlap": {},
}  # fmt: skip
#: What a table's cell may hold, typed by hand or read from a spreadsheet: numbers (huge, tiny, negative,
#: not finite), flags, text (numbers written as text, names, units), nothing, and containers.
CELLS = st.one_of(
    st.sampled_from([0, 1, 2, 3, 8, 64, -1, 2**40, 2**60, 1e-9, 0.5, 1e300, float("nan"), float("inf"), True,
                     False, None, "", "x", "8", "0.5", "-3", "1 GiB", "auto", "none", [1], {"a": 1}]),
    st.integers(-(2**20), 2**20), st.floats(-1e6, 1e6),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(EVALUATOR_JOBS)), st.data())
def test_any_cell_of_any_evaluators_table_prices_or_is_one_commodel_error(name, data):
    """A table handed to any evaluator (a script's DataFrame, a sweep file's values) with one input
    changed to anything a cell can hold is priced, or refused with one CommodelError: a number written
    as text is read as the declaration reads it (once a crash in the overlap and rollout models), a
    count beyond 2^53 and a container in a cell are named (once a crash)."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    price = evaluator(name)
    field = data.draw(st.sampled_from(sorted(price.job.model_fields)))
    row = {**EVALUATOR_JOBS[name], field: data.draw(CELLS)}
    try:
        out = price(pd.DataFrame([row]))
    except CommodelError as exc:
        assert str(exc).strip()
        return
    assert len(out) == 1
