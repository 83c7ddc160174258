"""One adapter per kind of measurement: a row read once into what prices it (a :class:`Case`), by
the same library functions the CLI uses. A row an adapter cannot read (a model, a size or a setting
commodel does not know) is a :class:`~commodel.errors.CommodelError` saying why, and the row is
reported as not modelled.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from commodel.comm.calls import run as run_collective
from commodel.comm.initiation import path_of, put_latency
from commodel.compute.roofline import achievable_bandwidth, peak_flops
from commodel.errors import CommodelError
from commodel.hardware import HardwareDB, cluster, default_db, nodes_for
from commodel.ops.pooling import BASELINE_PUE, PROPORTIONAL_OVERHEAD
from commodel.pricing.collective import CollectiveJob, cluster_and_fabric
from commodel.pricing.dispatch import DispatchJob, price_dispatch
from commodel.pricing.gemm import GemmJob, price_gemm
from commodel.pricing.job import Job, make_job
from commodel.pricing.overlap import OverlapJob, price_overlap
from commodel.pricing.run import serve, train
from commodel.pricing.serving_job import serving_job
from commodel.validate.descriptions import DISPATCH, SERVING, read_sizes
from commodel.validate.megatron_bridge import flop_count_note
from commodel.validate.runs import runs
from commodel.validate.training import training_metric, training_run
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.training.host_issue import module_host_s, module_ops

#: A GEMM's shape as M x N x K (``4096x4864x32896``).
_SHAPE = re.compile(r"(\d+)x(\d+)x(\d+)")

#: Size used for collective rows that quote an asymptotic figure without a size.
ASYMPTOTIC_SIZE = 8 * 2**30


@dataclass(frozen=True)
class Case:
    """A row read: ``price(db)`` gives the model's value in the row's unit; ``note`` is what the row
    states that the model reads otherwise; ``experts``: the row trains a mixture of experts; ``job``:
    the job it prices (training, serving, collective, dispatch, GEMM), for the kinds that run one;
    ``formula(db)``: for the rows priced without a job, the value's derivation from the hardware
    records (or model constants) it reads, and where a person sees them."""

    price: Callable[[HardwareDB], float]
    note: str = ""
    experts: bool = False
    job: Job | None = None
    formula: Callable[[HardwareDB], str] | None = None


def _derived(terms: Callable[[HardwareDB], tuple[float, str]]) -> Case:
    """A row priced without a job: ``terms(db)`` gives its value and that value's derivation."""
    return Case(lambda db: terms(db)[0], formula=lambda db: terms(db)[1])


def _recorded(name: str, field: str, value: float, unit: str) -> tuple[float, str]:
    """A value a hardware record holds as it is, and where a person sees it."""
    return value, f"the {field} of {name}, {value:g} {unit} (commodel hw show {name})"


def _collective(row: pd.Series) -> Case:
    """nccl-tests' figure for the row's collective: on the row's GPUs, nodes (at least enough nodes to
    hold the GPUs) and run settings (``model_args``), with NCCL's own choice where the row says
    ``auto``."""
    settings = row.settings
    gpus = (
        int(row.gpus)
        if pd.notna(row.gpus)
        else 2 * int(default_db().system(row.model_target).gpus_per_node.value)
    )
    job = make_job(
        CollectiveJob, op=row.op, system=row.model_target, gpus=gpus,
        nodes=max(int(row.nodes) if pd.notna(row.nodes) else 1, nodes_for(row.model_target, gpus)),
        size_bytes=float(row.size_bytes) if pd.notna(row.size_bytes) else ASYMPTOTIC_SIZE,
        algo=settings.get("algo", row.algo), launch=settings.get("launch", "stream"),
        nvls=settings.get("nvls") != "off", gpus_per_process=int(settings.get("gpus_per_process", 1)),
        partition=int(settings["partition"]) if "partition" in settings else None,
        fabric=settings.get("fabric", ""), nics=int(settings["nics"]) if "nics" in settings else None,
    )  # fmt: skip

    def price(db: HardwareDB) -> float:
        where, fab = cluster_and_fabric(job.model_dump(), db)
        result = run_collective(
            job.op, where, [job.size_bytes], job.gpus, algo=job.algo, library=job.library, fab=fab
        )
        if row.metric == "time":
            return float(result.time_s.iloc[0]) * 1e6  # us
        busbw = float(result.busbw_GBps.iloc[0])
        return (
            busbw / db.system(job.system).scale_out.nics_per_node.value
            if row.metric == "per_nic_busbw"
            else busbw
        )

    return Case(price, job=job)


def _p2p(row: pd.Series) -> Case:
    """Copy-engine bandwidth: GPU-to-GPU over all of a GPU's links, host-to-device over its host link."""

    def terms(db: HardwareDB) -> tuple[float, str]:
        system = db.system(row.model_target)
        host = row.op == "h2d"
        name = db.gpu(system.gpu).host_link if host else system.scale_up.link
        links = 1.0 if host else system.scale_up.links_per_gpu.value
        link = db.link(name)
        value = links * link.bandwidth.value * link.efficiency.value / 1e9
        which = f"the GPU's host link, {name}" if host else f"{links:g} {name} links per GPU"
        return value, (
            f"{links:g} x {link.bandwidth.value / 1e9:g} GB/s x efficiency {link.efficiency.value:g} = {value:.4g} "
            f"GB/s ({which}: commodel hw show {row.model_target}, commodel hw show {name})"
        )

    return _derived(terms)


def _gemm(row: pd.Series) -> Case:
    """Square GEMMs (``gemm DTYPE N^3``) through the roofline, back to back as benchmarks time them;
    the best shape (MAMF) and a "large GEMM" are the GPU's best-GEMM ceiling (peak x matmul
    efficiency)."""
    shape = _SHAPE.search(str(row.op))  # M x N x K, as a benchmark states a non-square GEMM
    text = _SHAPE.sub(" ", str(row.op)).replace("(maf)", " ").replace("(MAF)", " ")
    sizes, words = read_sizes(text, ("cube",))
    dtype = next((w for w in words if w not in ("gemm", "large", "best", "shape")), "")
    if shape and "gemm" in words and dtype:
        m, n, k = (int(v) for v in shape.groups())
        job = make_job(GemmJob, gpu=row.model_target, m=m, n=n, k=k, dtype=dtype, launch=False)
        return Case(lambda db: float(price_gemm(job, db)["tflops"]), job=job)
    if (
        "gemm" not in words
        or not dtype
        or ("cube" not in sizes and "best" not in words and "large" not in words)
    ):
        raise CommodelError(f"cannot read GEMM description '{row.op}'")
    if "cube" not in sizes:

        def ceiling(db: HardwareDB) -> tuple[float, str]:
            gpu = db.gpu(row.model_target)
            peak, efficiency = peak_flops(gpu, dtype) / 1e12, gpu.efficiency(dtype)
            return peak * efficiency, (
                f"{dtype} peak {peak:g} TFLOP/s x matmul efficiency {efficiency:g} = {peak * efficiency:.4g} TFLOP/s "
                f"(commodel hw show {row.model_target})"
            )

        return _derived(ceiling)
    s = int(sizes["cube"])
    job = make_job(GemmJob, gpu=row.model_target, m=s, n=s, k=s, dtype=dtype, launch=False)
    return Case(lambda db: float(price_gemm(job, db)["tflops"]), job=job)


def _memory(row: pd.Series) -> Case:
    """A GPU's achievable HBM bandwidth (TB/s): its datasheet figure times its STREAM copy share."""

    def terms(db: HardwareDB) -> tuple[float, str]:
        gpu = db.gpu(row.model_target)
        value = achievable_bandwidth(gpu) / 1e12
        return value, (
            f"{gpu.memory_bandwidth.value / 1e12:g} TB/s x memory efficiency {gpu.memory_efficiency.value:g} "
            f"= {value:.4g} TB/s (commodel hw show {row.model_target})"
        )

    return _derived(terms)


def _training(row: pd.Series) -> Case:
    """End-to-end runs through the training-step model, with the layout each source states."""
    run = training_run(row.id, str(row.op), float(row.gpus), str(row.model_target), str(row.metric))
    experts = get_model(run.job.model).moe is not None
    count = (
        flop_count_note(run.job, str(row.source), float(row.value))
        if row.metric == "tokens_per_s_per_gpu"
        else ""
    )
    note = "; ".join(part for part in (run.note, count) if part)
    return Case(lambda db: float(training_metric(run, train(run.job))), note, experts, run.job)


def _power(row: pd.Series) -> Case:
    """Node power under a training load (kW), or a GPU's idle power (W), from the power model."""
    load = runs().power.get(row.id)
    if load is not None:
        return Case(lambda db: float(train(load.job)["node_power_kW"]), job=load.job)

    return _derived(
        lambda db: _recorded(row.model_target, "idle power", db.gpu(row.model_target).idle_power.value, "W")
    )


def _configured(table: dict, row: pd.Series) -> object:
    """What a row of a kind configured row by row is modelled with (``data/runs.toml``)."""
    if row.id not in table:
        raise CommodelError(f"no {row.kind} setting for row '{row.id}' yet (data/runs.toml)")
    return table[row.id]


def _facility(row: pd.Series) -> Case:
    """The facility PUE constants of the pooling model (:mod:`commodel.ops.pooling`) these rows set."""
    pue = {
        "load-proportional": (
            1 + PROPORTIONAL_OVERHEAD,
            f"1 + PROPORTIONAL_OVERHEAD ({PROPORTIONAL_OVERHEAD:g})",
        ),
        "baseline": (BASELINE_PUE, f"BASELINE_PUE ({BASELINE_PUE:g})"),
    }[_configured(runs().facility, row)]
    return Case(lambda db: pue[0], formula=lambda db: f"{pue[1]}, a constant of commodel.ops.pooling")


def _latency(row: pd.Series) -> Case:
    """A kernel launch, a small put (one way or round trip) by the scheme the row measured, or one
    module's host time (us)."""
    setting = _configured(runs().latency, row)

    def terms(db: HardwareDB) -> tuple[float, str]:
        if setting.launch_of:
            us = db.gpu(setting.launch_of).launch_overhead.value * 1e6
            return _recorded(setting.launch_of, "launch overhead", us, "us")
        if setting.module:
            where = cluster(setting.system, 1, db)
            us = module_host_s(where, setting.module) * 1e6
            return us, (
                f"{setting.module} forward: {module_ops(where, setting.module):.3g} operators x ({setting.system}'s "
                f"op_dispatch {where.system.initiation.op_dispatch.value * 1e6:.4g} us + {where.system.gpu}'s "
                f"launch overhead {where.gpu.launch_overhead.value * 1e6:.4g} us) = {us:.4g} us "
                f"(commodel hw show {setting.system})"
            )
        path = path_of(cluster(setting.system, 2, db))
        times = 2 if setting.round_trip else 1
        one_way = float(put_latency(setting.scheme, path, 8, setting.after_kernel)) * 1e6
        start = (
            "after a kernel ends"
            if setting.after_kernel
            else "from a host program (no kernel end to wait for)"
        )
        return times * one_way, (
            f"{'2 x ' if setting.round_trip else ''}a {setting.scheme} put of 8 B between two {setting.system} nodes, "
            f"{start}: {one_way:.4g} us "
            f"(its terms: commodel hw show {setting.system}; commodel comm schemes --system {setting.system} --size 8 "
            "prints the puts after a kernel ends)"
        )

    return _derived(terms)


def _serving(row: pd.Series) -> Case:
    """A serving run as its description states it (:data:`~commodel.validate.descriptions.SERVING`):
    trtllm-bench's offline run (every request queued, as many in flight as fit), or the requests in
    flight it gives (``batchN``; ``batchN/gpu`` per GPU, a replica under attention data parallelism),
    with expert and attention data parallelism and the KV dtype it states, and the engine limits its
    command line sets (``model_args``, :data:`ENGINE_SETTINGS`; ``tokensN`` the tokens per
    iteration); one phase alone (``decode-only`` over a context of ``islN`` tokens, ``prefill-only``);
    the metric the row reports (:data:`SERVING_METRICS`). A run of a dataset's lengths (``sharegpt``)
    is priced at the mean lengths its row states (its source's token totals over its requests), and
    refused without them."""
    text = str(row.op)
    if "/gpu" in text and "attention_dp" not in text.split():
        raise CommodelError(f"'{text}': a per-GPU size needs attention_dp (a replica per GPU)")
    s = SERVING.read(text.replace("/gpu", ""))
    if s.get("sharegpt") and not {"isl", "osl"} <= set(s):
        raise CommodelError(
            "a sharegpt run without its mean lengths (islN oslN: the source's token totals over its requests)"
        )
    phase = "decode" if s.get("decode-only") else "prefill" if s.get("prefill-only") else "both"
    missing = [size for size in ("isl", *(("osl",) if phase == "both" else ())) if size not in s]
    if "tp" not in s and not s.get("attention_dp"):
        missing.insert(0, "tp")
    if missing:
        raise CommodelError(f"'{row.op}' gives no {', '.join(missing)} (form: '{SERVING.form}')")
    ep = int(s.get("ep", 1))
    tp = int(s.get("tp", ep))  # attention DP: the experts' group is the tp group
    # A decode profile at a KV length L and no output length: requests of L - 1 prompt tokens and
    # 2 output tokens, whose decode steps see L cached tokens on average (a decode pool makes the
    # tokens after the first, so a request needs two); otherwise the run's own lengths.
    profile = phase == "decode" and "osl" not in s
    prompt, output = (s["isl"] - 1, 2) if profile else (s["isl"], s.get("osl", 1))
    job = {"model": s["model"], "gpus": max(tp, ep), "tp": tp, "ep": ep, "phase": phase,
           "attention_dp": bool(s.get("attention_dp")), "prompt": prompt, "output": output,
           "dtype": s["dtype"], "kv_dtype": s.get("kv", "auto"), "batch": str(s.get("batch", "max")),
           **({"max_num_tokens": s["tokens"]} if "tokens" in s else {})}  # fmt: skip
    engine = {
        name: kind(row.settings[name]) for name, kind in ENGINE_SETTINGS.items() if name in row.settings
    }
    declared = serving_job(system=row.model_target, **(job | engine))
    if row.metric not in SERVING_METRICS:
        raise CommodelError(
            f"serving metric '{row.metric}': the serving job gives {', '.join(SERVING_METRICS)}"
        )
    metric, per = SERVING_METRICS[row.metric]
    nodes = declared.gpus / cluster(declared.system).gpus_per_node if per == "node" else 1.0
    return Case(lambda db: serve(declared)[metric] / nodes, job=declared)


#: The engine settings a serving row's run states (``model_args``: its source's command line), as the
#: serving job takes them.
ENGINE_SETTINGS = {
    "host_schedule": str,
    "kv_dtype": str,
    "max_batch_size": int,
    "max_num_tokens": int,
    "kv_fraction": float,
    "dispatcher": str,
    "ep_overlap": str,
}

#: The serving rows' metrics: the output of :func:`commodel.pricing.run.serve` each reads, and what
#: it is divided by (its nodes, for a rate per node).
SERVING_METRICS = {
    "output_tokens_per_s": ("output_tokens_per_s", ""),
    "output_tokens_per_s_per_gpu": ("output_tokens_per_s_per_gpu", ""),
    "output_tokens_per_s_per_node": ("output_tokens_per_s", "node"),
    "input_tokens_per_s_per_node": ("input_tokens_per_s", "node"),
    "tpot_s": ("tpot_s", ""),
}


def _dispatch(row: pd.Series) -> Case:
    """One DeepEP dispatch or combine (``deepep MODE OP MODEL tokensN`` on ``gpus`` expert-parallel
    GPUs) as :func:`commodel.pricing.dispatch.price_dispatch` prices it over NVSHMEM IBGDA, the
    transport of DeepEP's tables (GPU-initiated puts whose warps share send queues): its time (us),
    or the bandwidth DeepEP's tests print (GB/s)."""
    s = DISPATCH.read(str(row.op))
    job = make_job(DispatchJob, model=s["model"], system=row.model_target, ep=int(row.gpus),
                   tokens=float(s["tokens"]), mode=s["mode"])  # fmt: skip
    column = {"time": "time_us", "nvl_bandwidth": "nvl_GBps", "rdma_bandwidth": "rdma_GBps"}[row.metric]

    def price(db: HardwareDB) -> float:
        frame = price_dispatch(job, db=db)
        return float(frame.loc[frame.call == s["op"], column].iloc[0])

    return Case(price, job=job)


def _overlap(row: pd.Series) -> Case:
    """A GEMM (``gemm=MxNxK``) or elementwise pass (``elementwise=MxN``) beside the row's collective,
    run as its ``strategy`` says (``commodel overlap``): the pair's time (ms), or the kernel's time
    while the collective runs over its time alone (``slowdown``)."""
    s = row.settings
    kind = "gemm" if "gemm" in s else "elementwise"
    dims = [int(v) for v in str(s[kind]).split("x")] + [1]
    job = make_job(
        OverlapJob, system=row.model_target, gpus=int(row.gpus), m=dims[0], n=dims[1], k=dims[2], kernel=kind,
        dtype=s.get("dtype", "bf16"), op=row.op, size_bytes=float(row.size_bytes), strategy=s["strategy"],
        collective_first=s.get("first") == "collective",
    )  # fmt: skip

    def price(db: HardwareDB) -> float:
        record = price_overlap(job, db)
        return record["compute_slowdown"] if row.metric == "slowdown" else 1e3 * record["time_s"]

    return Case(price, job=job)


#: The adapter of each kind of measurement.
ADAPTERS: dict[str, Callable[[pd.Series], Case]] = {
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
    "overlap": _overlap,
}
