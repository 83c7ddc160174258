"""Model vs published measurement for every row of ``data/measurements.csv``.

Each row is priced by the same library functions the CLI uses. Rows whose kind has no model yet are
listed with the reason, not silently dropped. ``role`` says whether a named constant was fit to the row
(``calibration``) or it is held out (``validation``); accuracy gates use every row of their kind.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from commodel.comm.collectives import run
from commodel.comm.fabric import fabric_of
from commodel.compute import gemm, kernel_time
from commodel.compute.roofline import achievable_bandwidth, peak_flops
from commodel.errors import CommodelError
from commodel.hardware import HardwareDB, cluster, default_db
from commodel.pricing.jobs import TrainingJob, training_job
from commodel.pricing.run import train
from commodel.resources import resource_dir
from commodel.workloads.catalog import model as get_model
from commodel.workloads.layout import RECOMPUTE, module_bits
from commodel.workloads.mock_routing import mock_expert_load
from commodel.workloads.transformer import model_flops_per_token, recompute_flops_per_token

MiB = 2**20
#: Size used for collective rows that quote an asymptotic figure without a size.
ASYMPTOTIC_SIZE = 8 * 2**30


#: The hardware_db system and GPU a row runs on, by the first GPU its system text names, for rows that
#: do not say (no ``model_target``): "64xGB300 (NVL72)" -> gb300-nvl72 / gb300.
HARDWARE_BY_GPU = (
    ("GB300", "gb300-nvl72", "gb300"), ("GB200", "gb200-nvl72", "gb200"), ("B300", "dgx-b300", "b300-sxm"),
    ("B200", "dgx-b200", "b200-sxm"), ("H200", "hgx-h200", "h200-sxm"), ("H800", "hgx-h800", "h100-sxm"), ("H100", "dgx-h100", "h100-sxm"),
    ("A100", "dgx-a100", "a100-sxm-80gb"), ("MI300X", "mi300x-8", "mi300x"), ("MI250", "frontier-node", "mi250x"),
    ("A40", "a40-pcie-8", "a40"),
)  # fmt: skip
#: Kinds of rows modelled on a system (the others on a GPU).
SYSTEM_KINDS = ("collective", "p2p", "training", "serving", "dispatch")


def load_measurements() -> pd.DataFrame:
    """The project's copy of the published measurements (comment lines skipped). Sizes quoted as
    "large" (an asymptotic figure) become missing; missing run settings become empty. Rows in the
    shared format (without commodel's columns) are held out (``validation``) and run on the hardware
    their text names (:data:`HARDWARE_BY_GPU`)."""
    path = resource_dir("data") / "measurements.csv"
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    table = pd.read_csv(io.StringIO("\n".join(lines)), dtype={"size_bytes": str, "model_args": str})
    table["size_bytes"] = pd.to_numeric(table.size_bytes, errors="coerce").astype("Int64")
    for column, default in (("model_target", ""), ("role", "validation"), ("model_args", "")):
        table[column] = table[column].fillna(default) if column in table else default
    inferred = [
        target or _hardware_named(text, kind in SYSTEM_KINDS)
        for kind, target, text in zip(table.kind, table.model_target, table.system.astype(str), strict=True)
    ]
    return table.assign(model_target=inferred)


def _hardware_named(text: str, system: bool) -> str:
    """The system (or GPU) of the first GPU ``text`` names (:data:`HARDWARE_BY_GPU`), "" if none."""
    return next((s if system else g for name, s, g in HARDWARE_BY_GPU if name in text), "")


def model_args(row: pd.Series) -> dict[str, str]:
    """The run settings a row states (``partition=4;launch=graph;nvls=off;algo=tree``)."""
    pairs = (item.split("=", 1) for item in str(row.model_args).split(";") if item)
    return {key.strip(): value.strip() for key, value in pairs}


def _collective(row: pd.Series, db: HardwareDB) -> float:
    """nccl-tests' figure for the row's collective: on the row's GPUs, nodes (at least enough nodes to
    hold the GPUs) and run settings, with NCCL's own choice where the row says ``auto``."""
    system = db.system(row.model_target)
    per_node = int(system.gpus_per_node.value)
    gpus = int(row.gpus) if pd.notna(row.gpus) else 2 * per_node
    nodes = max(int(row.nodes) if pd.notna(row.nodes) else 1, -(-gpus // per_node))
    size = float(row.size_bytes) if pd.notna(row.size_bytes) else ASYMPTOTIC_SIZE
    settings = model_args(row)
    partition = int(settings["partition"]) if "partition" in settings else None
    where = cluster(row.model_target, nodes, db, partition=partition)
    fab = fabric_of(
        where,
        launch=settings.get("launch", "stream"),
        nvls=settings.get("nvls") != "off",
        gpus_per_process=int(settings.get("gpus_per_process", 1)),
    )
    algo = settings.get("algo", row.algo)
    result = run(row.op, where, [size], gpus, algo=algo, library="nccl", fab=fab)
    if row.metric == "time":
        return float(result.time_s.iloc[0]) * 1e6  # us
    busbw = float(result.busbw_GBps.iloc[0])
    if row.metric == "per_nic_busbw":
        return busbw / system.scale_out.nics_per_node.value
    return busbw


def _p2p(row: pd.Series, db: HardwareDB) -> float:
    """Copy-engine bandwidth: GPU-to-GPU over all of a GPU's links, host-to-device over its host link."""
    system = db.system(row.model_target)
    if row.op == "h2d":
        link = db.link(db.gpu(system.gpu).host_link)
        return link.bandwidth.value * link.efficiency.value / 1e9
    link = db.link(system.scale_up.link)
    return system.scale_up.links_per_gpu.value * link.bandwidth.value * link.efficiency.value / 1e9


_GEMM = re.compile(
    r"gemm (?P<dtype>\w+) (?:(?P<size>\d+)\^3|best shape)|large gemm (?P<large>\w+)", re.IGNORECASE
)


def _gemm(row: pd.Series, db: HardwareDB) -> float:
    """Square GEMMs through the roofline; "best shape" (MAMF) and "large GEMM" rows are the GPU's
    best-GEMM ceiling (peak x matmul efficiency)."""
    match = _GEMM.fullmatch(row.op)
    if match is None:
        raise CommodelError(f"cannot read GEMM description '{row.op}'")
    gpu = db.gpu(row.model_target)
    if match["size"] is None:
        dtype = (match["dtype"] or match["large"]).lower()
        return peak_flops(gpu, dtype) * gpu.efficiency(dtype) / 1e12
    s = int(match["size"])
    return float(kernel_time(gpu, gemm(s, s, s, match["dtype"].lower()), launch=False).achieved_flops) / 1e12


def _memory(row: pd.Series, db: HardwareDB) -> float:
    return achievable_bandwidth(db.gpu(row.model_target)) / 1e12


@dataclass(frozen=True)
class Run:
    """A published training run: the job as its source states it, the metric the source reports, and
    whether the source counts attention FLOPs causally (half the square, as Megatron-Bridge does) or
    in full (Narayanan et al. 2021, Megatron-LM's README)."""

    job: TrainingJob
    metric: str
    causal: bool = True
    note: str = ""


#: Training precisions as Megatron-Bridge's and NeMo's performance tables name them: current scaling
#: (CS), MXFP8 (MX), sub-channel (SC, SS: blockwise, 1 x 128 tiles) and delayed scaling (DS: per
#: tensor, priced as current scaling, whose extra amax pass is 2 B per cast element).
RECIPE_DTYPES = {
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "fp8-cs": "fp8",
    "fp8-ds": "fp8",
    "fp8-mx": "mxfp8",
    "mxfp8": "mxfp8",
    "fp8-sc": "fp8-block",
    "fp8-ss": "fp8-block",
    "fp8-block": "fp8-block",
}
#: Layout sizes a recipe description may give (``tp2``, ``gbs128``, ...), and the flag ``fsdp``.
RECIPE_SIZES = ("seq", "gbs", "mbs", "tp", "pp", "cp", "vp", "ep", "etp", "dp", "ga")


@dataclass(frozen=True)
class RecipeSettings:
    """What Megatron-Bridge's recipe for a model sets beyond the layout its performance rows state.

    ``ends_as_layers``: the embedding and the loss count as a layer each in the pipeline split
    (``account_for_embedding_in_pipeline_split`` and ``..._loss_...``: Llama 3.1 405B's 126 and
    Qwen3-235B's 94 layers fill ``pp x vp`` chunks evenly only so); ``bf16_moments``: the precision-
    aware optimizer's BF16 moments; ``balanced``: forced balance or a balancing loss (else the mock data
    route as :mod:`commodel.workloads.mock_routing` prices); ``layouts``: a pipeline layout with the
    multi-token prediction module for each (pp, vp) the recipe knows (other (pp, vp) take one from the
    performance scripts, not published with the rows)."""

    ends_as_layers: bool = False
    bf16_moments: bool = False
    balanced: bool = True
    layouts: dict[tuple[int, int], str] = field(default_factory=dict)


#: Release 0.2.0rc6 (the 25.11 container's) for Llama 3.1 405B, Qwen3-235B and DeepSeek-V3
#: (``map_pp_vp_to_layout``, ``use_precision_aware_optimizer`` with BF16 ``exp_avg_dtype`` and
#: ``exp_avg_sq_dtype``); 0.3.1 for gpt-oss (``moe_router_load_balancing_type = "none"``, not forced).
RECIPE_SETTINGS = {
    "llama3-405b": RecipeSettings(ends_as_layers=True),
    "qwen3-235b-a22b": RecipeSettings(ends_as_layers=True),
    "gpt-oss-120b": RecipeSettings(balanced=False),
    "deepseek-v3": RecipeSettings(
        bf16_moments=True,
        layouts={
            (4, 1): "Et*16|t*16|t*16|t*13mL",
            **dict.fromkeys(((8, 1), (4, 2)), "Et*8|(t*8|)*6t*5mL"),
            **dict.fromkeys(((16, 1), (8, 2), (4, 4)), "Et*4|(t*4|)*14tmL"),
        },
    ),
}


def recipe_run(description: str, gpus: int, system: str, metric: str) -> Run:
    """A training row described as Megatron-Bridge's performance tables give a recipe, ``train MODEL
    DTYPE [seqS] gbsG mbsM [fsdp] [tpT ppP cpC vpV epE etpE dpD gaA]``, as a job on ``gpus`` GPUs of
    ``system``: the layout as stated (sizes not given are 1, the sequence the model's own; a MoE
    model's expert tensor parallelism 1 and its tokens permuted by Transformer Engine's fused kernels,
    as Megatron-Bridge's MoE recipes and providers set ``expert_tensor_parallel_size`` and
    ``moe_permute_fusion`` (Qwen3, gpt-oss, DeepSeek-V3), where Megatron-Core's own defaults would be
    tp and unfused; what :data:`RECIPE_SETTINGS` says the model's recipe sets), distributed optimizer
    (or FSDP), gradients reduced in BF16 (the benchmark mode of Megatron-Bridge's performance recipes
    sets ``grad_reduce_in_fp32 = False`` with every precision, ``perf_recipes/_common.py`` in 0.6.2,
    which says it mirrors ``scripts/performance``; its training recipes keep FP32), communication
    overlapped, sequence parallelism with tensor parallelism and Transformer Engine's userbuffers
    overlap of its communication (the recipes' ``tp_comm_overlap``, with NeMo's per-GPU userbuffers
    configurations), and the recomputation the recipe needs to fit (``auto``: the rows do not state
    it). A stated ``dp`` or ``ga`` that disagrees with the GPUs and batch sizes is noted; the job is
    the one the GPUs and batch sizes give."""
    words = description.split()
    if len(words) < 3 or words[0] != "train" or words[2].lower() not in RECIPE_DTYPES:
        raise CommodelError(f"'{description}' is not 'train MODEL DTYPE SIZES...' (DTYPE one of "
                            f"{', '.join(RECIPE_DTYPES)})")  # fmt: skip
    sizes: dict[str, int] = {}
    for word in words[3:]:
        match = re.fullmatch(r"([a-z]+)(\d+)", word)
        if word != "fsdp" and (match is None or match[1] not in RECIPE_SIZES):
            raise CommodelError(f"cannot read '{word}' in '{description}' (sizes: {', '.join(RECIPE_SIZES)})")
        sizes |= {"fsdp": 1} if word == "fsdp" else {match[1]: int(match[2])}
    tp, pp, cp = (sizes.get(k, 1) for k in ("tp", "pp", "cp"))
    dp = max(gpus // (tp * pp * cp), 1)
    derived = {"dp": dp, "ga": sizes.get("gbs", 1024) // (sizes.get("mbs", 1) * dp)}
    off = {k: v for k, v in derived.items() if sizes.get(k, v) != v}
    config, notes = get_model(words[1]), []
    moe = config.moe
    if off:
        stated = ", ".join(f"{k}{sizes[k]}" for k in off)
        given = ", ".join(f"{k}{v}" for k, v in off.items())
        notes.append(f"states {stated} where its {gpus} GPUs and batch give {given}")
    # where Megatron-Core's default would split the experts tp ways
    if moe is not None and tp > 1 and "etp" not in sizes:
        notes.append("reads etp1, Megatron-Bridge's MoE recipes' expert tensor parallelism")
    vp, ep = sizes.get("vp", 1), sizes.get("ep", 1)
    recipe = next((r for name, r in RECIPE_SETTINGS.items() if get_model(name) is config), RecipeSettings())
    layout = recipe.layouts.get((pp, vp), "")
    if recipe.layouts and not layout:
        notes.append(
            f"its recipe has no pipeline layout for pp {pp} x vp {vp}: priced without its prediction module"
        )
    job = training_job(
        model=words[1], system=system, gpus=gpus, dtype=RECIPE_DTYPES[words[2].lower()], tp=tp, pp=pp, cp=cp,
        vpp=vp, pipeline_layout=layout, ep=ep, micro_batch=sizes.get("mbs", 1),
        etp=sizes.get("etp", 1 if moe is not None else None),
        global_batch=sizes.get("gbs", 1024), seq=sizes.get("seq"), zero=3 if "fsdp" in sizes else 1,
        sequence_parallel=tp > 1, recompute="auto", overlap="sm-partition", grad_reduce_in_fp32=False,
        tp_overlap="userbuffers" if tp > 1 else "none",
        ends_as_layers=recipe.ends_as_layers and pp > 1, bf16_moments=recipe.bf16_moments,
        permute_fusion=moe is not None,
        expert_load=1.0 if recipe.balanced else mock_expert_load(moe.experts, moe.top_k, ep, config.moe_layers),
    )  # fmt: skip
    return Run(job, metric, note="; ".join(notes))


def llama3_405b_run(gpus: int, cp: int = 1, seq: int = 8192) -> TrainingJob:
    """One of the Llama 3 paper's Table 4 pretraining runs on ``gpus`` H100 (tp 8, pp 16, ``cp``, the
    rest data parallel): 16M tokens per step of ``seq``-token sequences, sequence parallelism,
    optimizer states and gradients sharded (ZeRO-2; section 3.3.2's FSDP) and reduce-scattered in
    FP32, no activation checkpointing. Its section 3.3.2 balances the pipeline by taking a layer from
    the first and the last stage, so that "the first model chunk on the first stage has only the
    embedding, and the last model chunk on the last stage has only output projection and loss": a
    chunk is one layer's place, and the 126 layers with the two ends are 16 stages of 8 chunks (vpp 8;
    bubble (pp - 1) / (vpp m), the paper's own formula)."""
    return training_job(
        model="llama3-405b", system="dgx-h100", gpus=gpus, tp=8, cp=cp, pp=16, vpp=8, ends_as_layers=True,
        global_batch=2**24 // seq, seq=seq, sequence_parallel=True, zero=2, grad_reduce_in_fp32=True,
        overlap="sm-partition",
    )  # fmt: skip


#: The published end-to-end runs as their sources state them, and the metric each source reports.
#: Megatron's 2021 figure counts recomputation FLOPs and ran before FlashAttention; its data-parallel
#: allreduce was not overlapped. The 2024 runs overlap gradient reduction the default (naive) way.
TRAINING_RUNS: dict[str, Run] = {
    "megatron-1t": Run(
        training_job(
            model="megatron-1t",
            system="dgx-a100",
            gpus=3072,
            tp=8,
            pp=64,
            dp=6,
            global_batch=3072,
            seq=2048,
            recompute="full",
            attention="unfused",
            zero=0,
        ),
        "hw_tflops_per_gpu",
        causal=False,
    ),
    # The Llama 3 paper does not say how it counts attention FLOPs; its three runs do. Counted
    # causally (half the square, as FlashAttention computes it), the model misses all three (8K tokens
    # on 8K and 16K GPUs, 128K with cp 16) by about one level; counted in full, the 128K run would miss
    # by 40 points more, the full square being 1.3x its other matmuls (causally 0.67x; docs/models.md).
    **{
        name: Run(llama3_405b_run(*sizes), "tflops_per_gpu")
        for name, sizes in (
            ("llama3-405b-8k", (8192,)),
            ("llama3-405b-16k", (16384,)),
            ("llama3-405b-128k", (16384, 16, 131072)),
        )
    },
    # DeepSeek-V3's pretraining (technical report, sections 3.1-3.3): 2048 H800, pp 16 with DualPipe,
    # ep 64 over 8 nodes, ZeRO-1, no tensor parallelism, FP8 GEMMs with 1 x 128 tile and 128 x 128 block
    # scales (section 3.3.2: Transformer Engine's blockwise recipe), 4K sequences at the final batch of
    # 15360, one multi-token prediction module, experts reached on at most 4 nodes (the model's
    # group-limited routing) by the report's all-to-all kernels (DeepEP: a token crosses IB once per
    # node, then NVLink) on 20 SMs, dispatching in FP8, the norms and MLA's up-projections recomputed
    # (section 3.3.4), SwiGLU's inputs cached in FP8 and AdamW's moments kept in BF16 (section
    # 3.3.3). DualPipe runs one
    # micro-batch's all-to-alls beside another's compute: the 1F1B expert-parallel overlap is that
    # mechanism, under DualPipe's schedule and bubble. The report does not give its layers per stage;
    # the row takes the split that carries the prediction module and the logits: 4 layers per stage, 1
    # on the last (assumed). What else this model needs to fit, auto chooses.
    "deepseek-v3-h800": Run(
        training_job(
            model="deepseek-v3",
            system="hgx-h800",
            gpus=2048,
            pp=16,
            ep=64,
            global_batch=15360,
            seq=4096,
            dtype="fp8-block",
            zero=1,
            recompute="auto",
            overlap="sm-partition",
            ep_overlap="1f1b",
            schedule="dualpipe",
            mtp_layers=1,
            last_stage_layers=1,
            fp8_dispatch=True,
            dispatcher="deepep",
            ep_sms=20,
            recompute_modules="layernorm,mla_up_proj",
            fp8_activation_input=True,
            bf16_moments=True,
        ),
        "tokens_per_s_per_gpu",
    ),
    # 96 GPUs is the strong-scaling start: the smallest model-parallel group (tp 8 x pp 12, dp 1);
    # the README's scaling to 4608 GPUs multiplies dp by 48 at the same batch of 1152. Its Benchmark
    # Configuration: vocabulary 131,072 and 4096-token sequences (the model file), DP and TP
    # communication overlapped (--overlap-grad-reduce, --overlap-param-gather, --tp-comm-overlap).
    "megatron-gpt3-96": Run(
        training_job(
            model="gpt3-175b-mcore",
            system="dgx-h100",
            gpus=96,
            tp=8,
            pp=12,
            dp=1,
            global_batch=1152,
            sequence_parallel=True,
            zero=1,
            recompute="selective",
            overlap="sm-partition",
            tp_overlap="userbuffers",
        ),
        "mfu",
        causal=False,
    ),
}


def training_metric(run: Run, result: dict) -> float:
    """The metric a run's source reports, from the model's result, in the source's FLOP convention."""
    job = run.job
    if run.metric == "tokens_per_s_per_gpu":
        return result["tokens_per_s"] / result["gpus"]
    net = get_model(job.model)
    seq = job.seq or net.seq
    flops = model_flops_per_token(net, seq, run.causal)
    if run.metric == "hw_tflops_per_gpu":
        code, modules = RECOMPUTE.index(result["recompute"]), module_bits(job.recompute_modules)
        flops = flops + recompute_flops_per_token(net, seq, code, run.causal, modules)
    tflops = result["tokens_per_s"] / result["gpus"] * flops / 1e12
    if run.metric == "mfu":
        return tflops * 1e12 / peak_flops(default_db().gpu(default_db().system(job.system).gpu), "bf16")
    return tflops


#: Power rows: the training load each is priced under (the paper of h100-node-power does not state its
#: model, so a typical single-node job stands in: Llama 3 8B, ZeRO-3, naive overlap).
POWER_RUNS: dict[str, TrainingJob] = {
    "h100-node-power": training_job(
        model="llama3-8b",
        system="dgx-h100",
        gpus=8,
        global_batch=32,
        seq=4096,
        zero=3,
        recompute="selective",
        overlap="sm-partition",
    ),
}


def _configured(settings: dict[str, Any], row: pd.Series) -> Any:
    """What a row whose kind is configured row by row is modelled with; a row added without it is
    reported as not modelled rather than stopping the validation."""
    if row.id not in settings:
        raise CommodelError(f"no {row.kind} setting for row '{row.id}' yet (validate.py)")
    return settings[row.id]


def _power(row: pd.Series, db: HardwareDB) -> float:
    """Node power under a training load (kW), or a GPU's idle power (W), from the power model."""
    if row.id in POWER_RUNS:
        return float(train(POWER_RUNS[row.id])["node_power_kW"])
    return db.gpu(row.model_target).idle_power.value


def _facility(row: pd.Series, db: HardwareDB) -> float:
    """The facility PUE constants of the pooling model, which these two rows set."""
    from commodel.ops.pooling import BASELINE_PUE, PROPORTIONAL_OVERHEAD

    return _configured({"pue-google": 1 + PROPORTIONAL_OVERHEAD, "pue-industry": BASELINE_PUE}, row)


def _training_run(row: pd.Series) -> Run:
    """The run a training row describes: a configured one (:data:`TRAINING_RUNS`), or a recipe read
    from the row's description (:func:`recipe_run`)."""
    if row.id in TRAINING_RUNS:
        return TRAINING_RUNS[row.id]
    if pd.isna(row.gpus):
        raise CommodelError("the row gives no GPU count")
    return recipe_run(str(row.op), int(row.gpus), str(row.model_target), str(row.metric))


def _training(row: pd.Series, db: HardwareDB) -> float:
    """End-to-end runs through the training-step model, with the layout each source states."""
    run = _training_run(row)
    return float(training_metric(run, train(run.job)))


#: Latency rows by what each measured: (scheme, system, round trip, after a kernel end).
LATENCY_ROWS = {
    "gin-rtt": ("kernel-initiated", "dgx-h100", True, True),
    "slingshot-put": ("host-driven", "frontier-node", False, False),
}


def _latency(row: pd.Series, db: HardwareDB) -> float:
    """Kernel launch, or a small put (one way or round trip) by the scheme the row measured (us)."""
    from commodel.comm.initiation import path_of, put_latency

    if row.id == "launch-gb200":
        return db.gpu("gb200").launch_overhead.value * 1e6
    scheme, system, round_trip, after_kernel = _configured(LATENCY_ROWS, row)
    one_way = float(put_latency(scheme, path_of(cluster(system, 2, db)), 8, after_kernel))
    return (2 if round_trip else 1) * one_way * 1e6


def _serving(row: pd.Series, db: HardwareDB) -> float:
    """An offline-throughput run (trtllm-bench: every request queued, as many in flight as fit) as its
    description states it (``serve MODEL tpN islP oslO DTYPE``): total output tokens/s over its GPUs."""
    from commodel.pricing.run import serve

    _, model, *settings = str(row.op).split()
    sizes = {
        key: int(value) for key, value in (re.fullmatch(r"([a-z]+)(\d+)", s).groups() for s in settings[:-1])
    }
    result = serve(
        model=model, system=row.model_target, gpus=sizes["tp"], tp=sizes["tp"], prompt=sizes["isl"],
        output=sizes["osl"], dtype=settings[-1],
    )  # fmt: skip
    return result["output_tokens_per_s"]


def _dispatch(row: pd.Series, db: HardwareDB) -> float:
    """One DeepEP dispatch or combine (``deepep MODE OP MODEL tokensN`` on ``gpus`` expert-parallel
    GPUs) through :func:`commodel.workloads.moe_dispatch.exchange`: its time (us), or the bandwidth
    DeepEP's tests print (GB/s): ``nvl_bandwidth`` counts the tokens a GPU receives, once per token
    with any expert on it, its own included (``N q`` of every GPU's tokens, ``q = 1 - (1 - 1/N)^k``);
    ``rdma_bandwidth`` each token once per node its experts land on, its own node included
    (:func:`~commodel.workloads.moe_dispatch.domains_reached`)."""
    from commodel.workloads.moe_dispatch import COMBINE_BYTES, DISPATCH_BYTES, domains_reached, exchange

    words = str(row.op).split()
    if len(words) != 5 or words[0] != "deepep" or not re.fullmatch(r"tokens\d+", words[4]):
        raise CommodelError(f"'{row.op}' is not 'deepep MODE dispatch|combine MODEL tokensN'")
    _, mode, op, name, tokens_word = words
    net, tokens, ep = get_model(name), float(tokens_word.removeprefix("tokens")), int(row.gpus)
    where = cluster(row.model_target, int(row.nodes), db)
    element = DISPATCH_BYTES if op == "dispatch" else COMBINE_BYTES
    seconds = exchange(mode, "kernel-initiated", net, where, ep, tokens, element)["time_s"]
    if row.metric == "time":
        return seconds * 1e6
    k = net.moe.top_k
    counted = (
        ep * (1 - (1 - 1 / ep) ** k) if row.metric == "nvl_bandwidth" else domains_reached(net.moe, row.nodes)
    )
    return float(tokens * counted * net.hidden * element / seconds / 1e9)


MODELS: dict[str, Callable[[pd.Series, HardwareDB], float]] = {
    "collective": _collective,
    "p2p": _p2p,
    "gemm": _gemm,
    "memory": _memory,
    "training": _training,
    "serving": _serving,
    "latency": _latency,
    "dispatch": _dispatch,
    "power": _power,
    "facility": _facility,
}

#: Rows whose model is still being built, and where (by kind, or by row for training runs whose
#: layouts are not configured yet).
PENDING = {
    "nvshmem-red": "the platform is unstated",
    "graph-replay": "a formula (15 us + 0.58 us per node), the source of the graph-node constant",
}


#: Rows the model misses by more than the training gate, and why (docs/models.md explains each);
#: shown beside a row only while its error exceeds the gate.
KNOWN_GAPS = {
    **dict.fromkeys(
        ("mb-gb300-gptoss-120b", "mb-gb200-gptoss-120b"),
        "known gap: Megatron-Bridge's gpt-oss recipe neither forces balanced routing nor adds a balancing "
        "loss; its mock data through an untrained router give the busiest GPU 1.17x the mean tokens "
        "(priced), where both runs match 1.85-1.95x (--expert-load), which no published figure locates",
    ),
    **dict.fromkeys(
        ("llama3-405b-8k", "llama3-405b-16k", "llama3-405b-128k"),
        "known gap: the model prices the paper's three runs (8K tokens on 8K and 16K GPUs, 128K with "
        "cp 16) 20-23% shorter alike, so it has their relative costs, not their level; the paper does "
        "not break its MFU down",
    ),
    "megatron-gpt3-96": "known gap: with the README's benchmark configuration (TP and DP communication "
    "overlapped, 131,072-token vocabulary, 4096-token sequences) the model is as optimistic as on the "
    "Llama 3 paper's H100 runs; the README does not break its MFU down",
    "mb-gb200-qwen3-30b": "known gap: the runs measure GB300 1.22x GB200 on this recipe, the model 1.06x",
    "deepseek-v3-h800": "known gap: the figure is whole-run GPU hours; the stage split and routing "
    "balance are unstated",
}


def _pending(row: pd.Series) -> str | None:
    """Why a row has no model yet, or None when it is modelled."""
    if row.id in PENDING:
        return PENDING[row.id]
    if row.kind not in MODELS:
        return PENDING.get(row.kind, "no model")
    if row.kind == "training":
        try:
            _training_run(row)
        except CommodelError as exc:
            return str(exc)
    return None


def _note(row: pd.Series, value: float, measured: float) -> str:
    """What a modelled row's description says that the model read otherwise (training recipes), and
    its known gap (:data:`KNOWN_GAPS`) while the row misses the training gate."""
    said = _training_run(row).note if row.kind == "training" else ""
    missed = abs(100 * (value - measured) / measured) > GATES["end-to-end training", "max"]
    gap = KNOWN_GAPS.get(row.id, "") if missed else ""
    return "; ".join(part for part in (said, gap) if part)


def _trains_experts(row: pd.Series) -> bool:
    """Whether a training row's model has experts (MoE)."""
    return get_model(_training_run(row).job.model).moe is not None


def validation_table(db: HardwareDB | None = None) -> pd.DataFrame:
    """Every measurement row with the model's value, the signed error in percent, and whether it
    trains a mixture of experts (``experts``)."""
    db = db or default_db()
    rows = []
    for row in load_measurements().itertuples(index=False):
        series = pd.Series(row._asdict())
        reason = _pending(series)
        try:
            value = MODELS[row.kind](series, db) if reason is None else np.nan
        except CommodelError as exc:  # a row naming hardware or a model commodel does not have
            reason, value = str(exc), np.nan
        measured = pd.to_numeric(series.value, errors="coerce")
        rows.append(
            {
                "id": row.id,
                "kind": row.kind,
                "role": row.role,
                "size_bytes": row.size_bytes,
                "metric": row.metric,
                "unit": row.unit,
                "measured": measured,
                "model": value,
                "error_pct": 100 * (value - measured) / measured if reason is None else np.nan,
                "note": _note(series, value, measured) if reason is None else f"not modelled yet: {reason}",
                "experts": reason is None and row.kind == "training" and _trains_experts(series),
            }
        )
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max absolute error per kind, over all rows and over the rows no constant was fit to."""
    scored = table.dropna(subset=["error_pct"]).assign(abs_err=lambda t: t.error_pct.abs())
    out = []
    for kind, group in scored.groupby("kind", sort=False):
        held = group[group.role == "validation"]
        out.append(
            {
                "kind": kind,
                "rows": len(group),
                "median_abs_err_pct": group.abs_err.median(),
                "max_abs_err_pct": group.abs_err.max(),
                "held_out_rows": len(held),
                "held_out_median_pct": held.abs_err.median() if len(held) else np.nan,
                "held_out_max_pct": held.abs_err.max() if len(held) else np.nan,
            }
        )
    return pd.DataFrame(out)


def _groups(table: pd.DataFrame) -> dict[str, pd.Series]:
    """The rows each gate reads."""
    size = table.size_bytes.astype("Float64").fillna(ASYMPTOTIC_SIZE)
    collective = table.kind == "collective"
    held = table.role == "validation"
    training = (table.kind == "training") & table.error_pct.notna()
    return {
        "collectives >= 1 MiB": collective & (size >= MiB),
        "collectives >= 1 MiB, no constant fit to them": collective & (size >= MiB) & held,
        "collectives < 1 MiB": collective & (size < MiB),
        "GEMM and STREAM, no constant fit to them": table.kind.isin(["gemm", "memory"]) & held,
        "end-to-end training": training,
        "end-to-end training, dense models": training & ~table.experts,
        "serving throughput, no constant fit to them": (table.kind == "serving") & held,
        "message latency, no constant fit to them": (table.kind == "latency")
        & held
        & table.error_pct.notna(),
        "MoE dispatch and combine (DeepEP), no constant fit to them": (table.kind == "dispatch") & held,
    }


#: Accuracy bounds (absolute error, %): (gate, statistic) -> bound.
GATES = {
    ("collectives >= 1 MiB", "median"): 5.0,
    ("collectives >= 1 MiB", "max"): 25.0,
    ("collectives >= 1 MiB, no constant fit to them", "median"): 5.0,
    ("collectives < 1 MiB", "median"): 15.0,
    ("GEMM and STREAM, no constant fit to them", "median"): 15.0,
    ("end-to-end training", "median"): 8.0,
    ("end-to-end training", "max"): 20.0,
    ("end-to-end training, dense models", "median"): 8.0,
    ("end-to-end training, dense models", "max"): 20.0,
    ("serving throughput, no constant fit to them", "median"): 15.0,
    ("message latency, no constant fit to them", "median"): 20.0,
    ("MoE dispatch and combine (DeepEP), no constant fit to them", "median"): 15.0,
    ("MoE dispatch and combine (DeepEP), no constant fit to them", "max"): 25.0,
}


def accuracy_gates(table: pd.DataFrame) -> pd.DataFrame:
    """Each gated statistic of absolute error over its rows, with its bound and whether it holds."""
    err = table.error_pct.abs()
    groups = _groups(table)
    records = []
    for (name, stat), bound in GATES.items():
        value = float(err[groups[name].to_numpy(dtype=bool)].agg(stat))
        records.append(
            {
                "gate": name,
                "rows": int(groups[name].sum()),
                "statistic": stat,
                "abs_err_pct": value,
                "bound_pct": bound,
                "holds": bool(value <= bound),
            }
        )
    return pd.DataFrame(records)
