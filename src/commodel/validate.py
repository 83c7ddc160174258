"""Model vs published measurement for every row of ``data/measurements.csv``.

Each row is priced by the same library functions the CLI uses. Rows whose kind has no model yet are
listed with the reason, not silently dropped. ``role`` says whether a named constant was fit to the row
(``calibration``) or it is held out (``validation``); accuracy gates use every row of their kind.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from commodel.comm.collectives import run
from commodel.comm.fabric import fabric_of
from commodel.compute import gemm, kernel_time
from commodel.compute.roofline import achievable_bandwidth, peak_flops
from commodel.hardware import HardwareDB, cluster, default_db
from commodel.jobs import TrainingJob, training_job
from commodel.resources import resource_dir
from commodel.workloads.catalog import model as get_model
from commodel.workloads.layout import RECOMPUTE
from commodel.workloads.run import train
from commodel.workloads.transformer import model_flops_per_token, recompute_flops_per_token

MiB = 2**20
#: Size used for collective rows that quote an asymptotic figure without a size.
ASYMPTOTIC_SIZE = 8 * 2**30


def load_measurements() -> pd.DataFrame:
    """The project's copy of the published measurements (comment lines skipped). Sizes quoted as
    "large" (an asymptotic figure) become missing; missing run settings become empty."""
    path = resource_dir("data") / "measurements.csv"
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    table = pd.read_csv(io.StringIO("\n".join(lines)), dtype={"size_bytes": str, "model_args": str})
    table["size_bytes"] = pd.to_numeric(table.size_bytes, errors="coerce").astype("Int64")
    return table.assign(model_args=table.model_args.fillna(""))


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
        raise ValueError(f"cannot read GEMM description '{row.op}'")
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
    in full (Narayanan et al. 2021, Megatron-LM's README, the Llama 3 paper)."""

    job: TrainingJob
    metric: str
    causal: bool = True


def _mb(model: str, target: str, gpus: int, dtype: str, layout: str, **fixed: object) -> Run:
    """A Megatron-Bridge 25.11 recipe (data/measurements.csv, source MB): its layout as the row gives it
    (``tp pp cp vp ep mbs gbs seq``, ``fsdp``), distributed optimizer (or FSDP), communication
    overlapped, sequence parallelism with tensor parallelism and Transformer Engine's userbuffers
    overlap of its communication (the recipes' ``tp_comm_overlap``, with NeMo's per-GPU userbuffers
    configurations), and the recomputation the recipe needs to fit (``auto``: the rows do not state
    it)."""
    sizes = dict(item.split("=") for item in layout.split())
    tp = int(sizes.pop("tp", 1))
    job = training_job(
        model=model, system=target, gpus=gpus, dtype=dtype, tp=tp, pp=int(sizes.pop("pp", 1)),
        cp=int(sizes.pop("cp", 1)), vpp=int(sizes.pop("vp", 1)), ep=int(sizes.pop("ep", 1)),
        micro_batch=int(sizes.pop("mbs")), global_batch=int(sizes.pop("gbs")), seq=int(sizes.pop("seq", 8192)),
        zero=3 if sizes.pop("fsdp", None) else 1, sequence_parallel=tp > 1, recompute="auto",
        overlap="sm-partition", tp_overlap="userbuffers" if tp > 1 else "none", **fixed,
    )  # fmt: skip
    return Run(job, "tokens_per_s_per_gpu")


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
    "llama3-405b-8k": Run(
        training_job(
            model="llama3-405b",
            system="dgx-h100",
            gpus=8192,
            tp=8,
            pp=16,
            dp=64,
            global_batch=2048,
            seq=8192,
            sequence_parallel=True,
            zero=1,
            overlap="sm-partition",
        ),
        "tflops_per_gpu",
        causal=False,
    ),
    # 96 GPUs is the strong-scaling start: the smallest model-parallel group (tp 8 x pp 12, dp 1);
    # the README's scaling to 4608 GPUs multiplies dp by 48 at the same batch of 1152.
    "megatron-gpt3-96": Run(
        training_job(
            model="gpt3-175b",
            system="dgx-h100",
            gpus=96,
            tp=8,
            pp=12,
            dp=1,
            global_batch=1152,
            seq=2048,
            sequence_parallel=True,
            zero=1,
            recompute="selective",
            overlap="sm-partition",
        ),
        "mfu",
        causal=False,
    ),
    "mb-gb300-llama3-8b": _mb("llama3-8b", "gb300-nvl72", 8, "fp8", "gbs=128 mbs=2"),
    "mb-gb300-llama3-8b-mx": _mb("llama3-8b", "gb300-nvl72", 8, "mxfp8", "gbs=128 mbs=2"),
    "mb-gb300-llama3-70b": _mb("llama3-70b", "gb300-nvl72", 64, "fp8", "gbs=256 mbs=2 fsdp=1"),
    "mb-gb300-llama31-405b": _mb(
        "llama3-405b", "gb300-nvl72", 256, "fp8", "gbs=1536 mbs=1 tp=2 pp=8 cp=2 vp=4"
    ),
    "mb-gb300-dsv3-bf16": _mb(
        "deepseek-v3", "gb300-nvl72", 256, "bf16", "seq=4096 gbs=4096 mbs=1 pp=2 vp=4 ep=32"
    ),
    "mb-gb300-dsv3-fp8": _mb(
        "deepseek-v3", "gb300-nvl72", 256, "mxfp8", "seq=4096 gbs=4096 mbs=1 pp=2 vp=4 ep=32"
    ),
    "mb-gb300-gptoss-120b": _mb("gpt-oss-120b", "gb300-nvl72", 64, "bf16", "gbs=1280 mbs=2 ep=64"),
    "mb-gb300-qwen3-30b": _mb("qwen3-30b-a3b", "gb300-nvl72", 8, "mxfp8", "seq=4096 gbs=512 mbs=4 ep=8"),
    "mb-gb300-qwen3-235b": _mb(
        "qwen3-235b-a22b", "gb300-nvl72", 256, "bf16", "seq=4096 gbs=8192 mbs=2 pp=4 vp=12 ep=16"
    ),
    "mb-gb200-llama3-8b": _mb("llama3-8b", "gb200-nvl72", 8, "fp8", "gbs=128 mbs=2"),
    "mb-gb200-llama3-8b-mx": _mb("llama3-8b", "gb200-nvl72", 8, "mxfp8", "gbs=128 mbs=2"),
    "mb-gb200-llama3-70b": _mb("llama3-70b", "gb200-nvl72", 64, "fp8", "gbs=256 mbs=2 fsdp=1"),
    "mb-gb200-llama31-405b": _mb("llama3-405b", "gb200-nvl72", 256, "fp8", "gbs=1536 mbs=1 tp=4 pp=16 vp=4"),
    "mb-gb200-dsv3-bf16": _mb(
        "deepseek-v3", "gb200-nvl72", 256, "bf16", "seq=4096 gbs=4096 mbs=1 pp=4 vp=4 ep=64"
    ),
    "mb-gb200-dsv3-fp8": _mb(
        "deepseek-v3", "gb200-nvl72", 256, "mxfp8", "seq=4096 gbs=4096 mbs=1 pp=8 vp=4 ep=32"
    ),
    "mb-gb200-gptoss-120b": _mb("gpt-oss-120b", "gb200-nvl72", 64, "bf16", "gbs=1280 mbs=1 ep=64"),
    "mb-gb200-qwen3-30b": _mb("qwen3-30b-a3b", "gb200-nvl72", 8, "mxfp8", "seq=4096 gbs=512 mbs=4 ep=8"),
    "mb-gb200-qwen3-235b": _mb(
        "qwen3-235b-a22b", "gb200-nvl72", 256, "bf16", "seq=4096 gbs=8192 mbs=1 pp=8 vp=3 ep=32"
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
        flops = flops + recompute_flops_per_token(net, seq, RECOMPUTE.index(result["recompute"]), run.causal)
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


def _power(row: pd.Series, db: HardwareDB) -> float:
    """Node power under a training load (kW), or a GPU's idle power (W), from the power model."""
    if row.id in POWER_RUNS:
        return float(train(POWER_RUNS[row.id])["node_power_kW"])
    return db.gpu(row.model_target).idle_power.value


def _facility(row: pd.Series, db: HardwareDB) -> float:
    """The facility PUE constants of the pooling model, which these two rows set."""
    from commodel.ops.pooling import BASELINE_PUE, PROPORTIONAL_OVERHEAD

    return {"pue-google": 1 + PROPORTIONAL_OVERHEAD, "pue-industry": BASELINE_PUE}[row.id]


def _training(row: pd.Series, db: HardwareDB) -> float:
    """End-to-end runs through the training-step model, with the layout each source states."""
    run = TRAINING_RUNS[row.id]
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
    scheme, system, round_trip, after_kernel = LATENCY_ROWS[row.id]
    one_way = float(put_latency(scheme, path_of(cluster(system, 2, db)), 8, after_kernel))
    return (2 if round_trip else 1) * one_way * 1e6


def _serving(row: pd.Series, db: HardwareDB) -> float:
    """An offline-throughput run (trtllm-bench: every request queued, as many in flight as fit) as its
    description states it (``serve MODEL tpN islP oslO DTYPE``): total output tokens/s over its GPUs."""
    from commodel.workloads.run import serve

    _, model, *settings = str(row.op).split()
    sizes = {
        key: int(value) for key, value in (re.fullmatch(r"([a-z]+)(\d+)", s).groups() for s in settings[:-1])
    }
    result = serve(
        model=model, system=row.model_target, gpus=sizes["tp"], tp=sizes["tp"], prompt=sizes["isl"],
        output=sizes["osl"], dtype=settings[-1],
    )  # fmt: skip
    return result["output_tokens_per_s"]


MODELS: dict[str, Callable[[pd.Series, HardwareDB], float]] = {
    "collective": _collective,
    "p2p": _p2p,
    "gemm": _gemm,
    "memory": _memory,
    "training": _training,
    "serving": _serving,
    "latency": _latency,
    "power": _power,
    "facility": _facility,
}

#: Rows whose model is still being built, and where (by kind, or by row for training runs whose
#: layouts are not configured yet).
PENDING = {
    "nvshmem-red": "the platform is unstated",
    "graph-replay": "a formula (15 us + 0.58 us per node), the source of the graph-node constant",
    "training": "Megatron-Bridge recipes on GB200/GB300 (training-step fidelity)",
}


def _pending(row: pd.Series) -> str | None:
    """Why a row has no model yet, or None when it is modelled."""
    if row.id in PENDING:
        return PENDING[row.id]
    if row.kind not in MODELS:
        return PENDING.get(row.kind, "no model")
    if row.kind == "training" and row.id not in TRAINING_RUNS:
        return PENDING["training"]
    return None


def validation_table(db: HardwareDB | None = None) -> pd.DataFrame:
    """Every measurement row with the model's value and the signed error in percent."""
    db = db or default_db()
    rows = []
    for row in load_measurements().itertuples(index=False):
        series = pd.Series(row._asdict())
        reason = _pending(series)
        value = MODELS[row.kind](series, db) if reason is None else np.nan
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
                "note": "" if reason is None else f"not modelled yet: {reason}",
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
    return {
        "collectives >= 1 MiB": collective & (size >= MiB),
        "collectives >= 1 MiB, no constant fit to them": collective & (size >= MiB) & held,
        "collectives < 1 MiB": collective & (size < MiB),
        "GEMM and STREAM, no constant fit to them": table.kind.isin(["gemm", "memory"]) & held,
        "end-to-end training": (table.kind == "training") & table.error_pct.notna(),
        "end-to-end training, dense models": (table.kind == "training")
        & table.error_pct.notna()
        & ~table.id.str.contains("dsv3|gptoss|qwen3"),
        "serving throughput, no constant fit to them": (table.kind == "serving") & held,
        "message latency, no constant fit to them": (table.kind == "latency")
        & held
        & table.error_pct.notna(),
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
