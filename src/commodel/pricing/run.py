"""One training job or serving deployment, end to end: the scalar front doors the CLI, validation and
studies use.

:func:`train` and :func:`serve` are the ``training`` and ``serving`` table pricings on a one-row
table, so a scalar call and a sweep give the same answer for the same job (DESIGN principle 7).
"""

from __future__ import annotations

from collections.abc import Callable
from math import isnan, isqrt
from types import SimpleNamespace
from typing import Any

import numpy as np

from commodel.compute.kernels import WEIGHT_ONLY
from commodel.compute.precision import precision, serving_precision
from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.pricing.advice import ADVICE, FIT_ADVICE, HOST_BOUND_SHARE, fit_fixes
from commodel.pricing.job import Job, cluster_shape
from commodel.pricing.serving import ENGINE_SIZES, ENGINE_SOFTWARE, price_serving, replica_engine
from commodel.pricing.serving import OUTPUTS as SERVING_OUTPUTS
from commodel.pricing.serving_job import ServingJob, serving_job
from commodel.pricing.table import Columns, is_unfit, job_columns
from commodel.pricing.totals import JOB_OUTPUTS
from commodel.pricing.training import STEP_OUTPUTS, job_layout, price_training
from commodel.pricing.training_job import TrainingJob, training_job
from commodel.workloads.layer.kernel_rows import kernel_table
from commodel.workloads.model.catalog import model
from commodel.workloads.serving.continuous import iteration_table
from commodel.workloads.serving.engine import kv_dtype_of
from commodel.workloads.training.hetero import is_node_groups
from commodel.workloads.training.step import BREAKDOWN

#: Step outputs :func:`train` reports elsewhere in its result (the layout, the recomputation in words).
TRAIN_APART = ("recompute_used", "stage_layers")


def _one_row(
    price: Callable[[Columns], Columns], job: Job, describe: Callable[[SimpleNamespace], str] = lambda row: ""
) -> SimpleNamespace:
    """The pricing of one job, its outputs as attributes; an invalid job is an error naming why (and
    what the job resolved to, as ``describe`` puts it), but for one that only does not fit: that is
    its answer (its memory, and no figure that needs it to run)."""
    table = price(job_columns(job))
    row = SimpleNamespace(**{name: values[0] for name, values in table.items()})
    if not row.valid and not is_unfit(row.problem):
        what = describe(row)
        raise CommodelError(f"invalid {job.noun} job{f' ({what})' if what else ''}: {row.problem}")
    return row


def _training_layout(job: TrainingJob, row: SimpleNamespace) -> str:
    """A training job's layout as resolved ("64 GPUs, tp=8 pp=4 cp=1 dp=2 ep=1, micro batch 1 of global
    batch 1024"); nothing where the job's cluster could not be built, so nothing was resolved."""
    if isnan(row.gpus) or isnan(row.dp):
        return ""
    sizes = " ".join(f"{name}={getattr(job, name)}" for name in ("tp", "pp", "cp"))
    return (
        f"{row.gpus:.0f} GPUs, {sizes} dp={row.dp:.0f} ep={job.ep}, "
        f"micro batch {job.micro_batch} of global batch {job.global_batch}"
    )


def _kernel_table(job: TrainingJob, row: SimpleNamespace) -> list[dict[str, object]]:
    """:func:`~commodel.workloads.layer.work.kernel_table` of the job's layout as the pricing resolved
    it (its data-parallel size, the model's sequence where the job gives none)."""
    if is_node_groups(job.system):
        raise CommodelError("the kernel table prices one kind of node; give one system, not node groups")
    net, gpu = model(job.model), cluster(job.system, **cluster_shape(dict(job))).gpu
    x = job_layout(job_columns(job), np.zeros(1, dtype=int), net, np.array([float(row.dp)]))
    return kernel_table(net, gpu, x, precision(job.dtype, gpu), job.attention)


def _training_notes(job: TrainingJob, row: SimpleNamespace) -> list[str]:
    """What the model assumed or the job should know: a recomputation auto chose, vendors crossed,
    tensor parallelism beyond a scale-up domain, a host-bound step, sequence parallelism a layout needs."""
    notes = []
    if job.recompute == "auto":
        fit = "is the cheapest way to fit" if row.fits else "still does not fit"
        notes.append(f"recompute auto: {row.recompute_used} {fit}")
    if float(row.cross_vendor_s) > 0:
        notes.append(
            f"each activation or gradient crossing vendors takes {1e3 * float(row.cross_vendor_s):.3g} ms "
            f"({job.transport})"
        )
    elif job.transport != "device-direct" and not is_node_groups(job.system):
        notes.append(
            f"--transport {job.transport} prices node groups (SYSTEM:NODES,...); on one kind of node every "
            "collective runs on its vendor's own library"
        )
    if float(row.tp_domains) > 1:
        notes.append(
            f"tensor parallelism spans {float(row.tp_domains):g} scale-up domains: its collectives cross "
            "the scale-out network"
        )
    if not row.fits and job.tp > 1 and not job.sequence_parallel:
        notes.append(
            "does not fit with sequence parallelism off: every tensor-parallel rank holds the whole "
            "sequence's norm and dropout activations (Megatron recipes with tp > 1 turn on "
            "--sequence-parallel)"
        )
    if job.capacity_factor is not None:
        notes.append(
            f"capacity factor {job.capacity_factor:g}: every expert padded to it, "
            f"{100 * float(row.dropped_share):.2g}% of the routed tokens dropped (routing spread as --expert-load says); "
            "the model TFLOP/s and MFU count every token's top-k experts, as Megatron does, the hardware "
            f"TFLOP/s the {job.capacity_factor:g} x of them the experts compute"
        )
    if float(row.goodput) == 0:
        notes.append(
            f"never finishes: writing and reloading a checkpoint takes too long for the job's mean "
            f"{float(row.job_mtbf_h):.3g} h between failures to keep any work (faster --storage-GBps, "
            "--checkpoint async, or fewer failures)"
        )
    host = float(row.host_s) / float(row.step_time_s)
    if host >= HOST_BOUND_SHARE:
        notes.append(
            f"host-bound: the GPUs wait {100 * host:.0f}% of the step for the host to issue kernels "
            "(CUDA graphs or a larger micro-batch shorten it)"
        )
    if job.recompute_layers and float(row.recompute_share) >= 1:
        notes.append(
            f"--recompute-layers {job.recompute_layers} covers every layer of a pipeline chunk: all are "
            "recomputed, as --recompute full alone does"
        )
    if job.tp_overlap == "userbuffers" and job.tp > 1 and not job.sequence_parallel:
        notes.append(
            "userbuffers overlap needs sequence parallelism: the TP collectives ran between the GEMMs"
        )
    return notes + _idle_settings(job)


#: Settings, off by default, that act only under an FP8 recipe: the FP8 dispatch of expert inputs and
#: the FP8 store of the activation function's input.
FP8_SETTINGS = {"fp8_dispatch": "--fp8-dispatch", "fp8_activation_input": "--fp8-activation-input"}


def _idle_settings(job: TrainingJob) -> list[str]:
    """The settings the job gives that its other settings leave nothing to act on: an FP8 option under a
    16-bit recipe, tensor-parallel overlap at tp 1. Priced as they run (not at all), and said."""
    notes = []
    if job.dtype in ("bf16", "fp16"):
        given = [flag for name, flag in FP8_SETTINGS.items() if getattr(job, name)]
        if given:
            acts, does = ("acts", "it does") if len(given) == 1 else ("act", "they do")
            notes.append(
                f"{' and '.join(given)} {acts} under an FP8 recipe: under --dtype {job.dtype} {does} nothing"
            )
    if job.tp_overlap != "none" and job.tp == 1:
        notes.append(
            f"--tp-overlap {job.tp_overlap} overlaps tensor-parallel collectives: at tp 1 there are none"
        )
    return notes


def _numbers(row: SimpleNamespace, names: tuple[str, ...]) -> dict[str, float | bool]:
    """The outputs ``names`` of a priced row as plain values; a total the job does not have (no
    failure model: no MTBF) is left out."""
    values = {name: getattr(row, name) for name in names}
    return {
        name: bool(v) if isinstance(v, np.bool_ | bool) else float(v)
        for name, v in values.items()
        if isinstance(v, np.bool_ | bool) or np.isfinite(float(v))
    }


#: What ``micro_batch`` may say instead of a number: the largest that fits (:func:`largest_fitting_micro_batch`).
MAX_MICRO_BATCH = "max"


def divisors(n: int) -> np.ndarray:
    """The divisors of ``n``, ascending, from those up to its square root (one vectorized pass)."""
    low = np.arange(1, isqrt(n) + 1)
    low = low[n % low == 0]
    return np.unique(np.concatenate([low, n // low]))


def largest_fitting_micro_batch(job: TrainingJob) -> tuple[int, str]:
    """The largest micro-batch of ``job`` that is a valid layout and fits the GPUs' memory, priced
    in one batch over the divisors of its global batch, with a note saying so. Where none fits, an
    error naming why at micro-batch 1 and what would make it fit (:func:`~commodel.pricing.advice.fit_fixes`)."""
    candidates = divisors(job.global_batch)
    columns = job_columns(job, len(candidates)) | {"micro_batch": candidates.astype(object)}
    table = price_training(columns)
    fitting = candidates[np.asarray(table["valid"], dtype=bool)]  # valid: the rules hold and it fits
    if len(fitting):
        return int(fitting.max()), f"micro-batch {int(fitting.max())}: the largest that fits"
    smallest = job.model_copy(update={"micro_batch": 1})
    one = _one_row(price_training, smallest)
    raise CommodelError(
        f"no micro-batch fits: at micro-batch 1 the job {one.problem}; {fit_fixes(smallest, one)}"
    )


def train(
    job: TrainingJob | None = None, advise: bool = False, kernels: bool = False, **values: Any
) -> dict[str, Any]:
    """Price one training job (a :class:`TrainingJob`, or its fields as keywords): the step's and the
    job's outputs, the layout as resolved, a ``breakdown`` of seconds per step, and ``notes`` on what
    the model assumed (a recomputation it chose, tensor parallelism crossing scale-up domains).
    ``advise`` (as ``commodel train`` does): also price the changes worth trying
    (:mod:`commodel.pricing.advice`) and name the ones that pay; each costs a batch more.
    ``kernels``: also one layer's kernels for one micro-batch, each with its roofline.
    ``micro_batch="max"``: the largest that fits (:func:`largest_fitting_micro_batch`)."""
    chose = []
    if job is None and values.get("micro_batch") == MAX_MICRO_BATCH:
        micro_batch, note = largest_fitting_micro_batch(training_job(**{**values, "micro_batch": 1}))
        values, chose = {**values, "micro_batch": micro_batch}, [note]
    job = job if job is not None else training_job(**values)
    row = _one_row(price_training, job, lambda row: _training_layout(job, row))
    notes = chose + _training_notes(job, row)
    if advise:
        notes += [note for note in (a(job, row) for a in (ADVICE if row.fits else FIT_ADVICE)) if note]
    outputs = tuple(name for name in (*STEP_OUTPUTS, *JOB_OUTPUTS) if name not in TRAIN_APART)
    step = _numbers(row, outputs)
    layout = {"tp": job.tp, "pp": job.pp, "dp": int(row.dp), "cp": job.cp, "ep": job.ep,
              "etp": int(job.etp or job.tp), "vpp": job.vpp}  # fmt: skip
    return {
        "model": job.model,
        "system": job.system,
        "gpus": int(row.gpus),
        "nodes": int(row.nodes),
        "gpus_per_node": int(row.gpus) // int(row.nodes),
        "layout": layout,
        "micro_batch": job.micro_batch,
        "schedule": job.schedule,
        "stage_layers": str(row.stage_layers),
        "dtype": job.dtype,
        "overlap": job.overlap,
        "tp_overlap": job.tp_overlap,
        "ep_overlap": job.ep_overlap,
        "dispatcher": job.dispatcher,
        "attention": job.attention,
        "elementwise": job.elementwise,
        "zero": job.zero,
        "reshard_after_forward": job.reshard_after_forward,
        "recompute": str(row.recompute_used),
        "recompute_modules": job.recompute_modules,
        "offload": job.offload,
        **step,
        **(
            {
                "energy_per_step_J": step["it_power_kW"] * 1e3 * job.pue * step["step_time_s"],
                "breakdown": {name: float(getattr(row, f"{name}_s")) for name in BREAKDOWN},
            }
            if row.fits  # a job that does not fit has no step
            else {}
        ),
        "notes": notes,
        **({"kernels": _kernel_table(job, row)} if kernels else {}),
    }


#: The serving outputs :func:`serve` reports apart (counts, flags) or not at all.
SERVING_APART = ("batch_in_flight", "max_batch", "fits", "replicas", "problem", "valid")


def _iteration_table(job: ServingJob, batch: int) -> dict[str, list[dict[str, object]]]:
    """:func:`~commodel.workloads.serving.continuous.iteration_table` of the job's replica at ``batch`` in flight."""
    if job.prefill_gpus or job.phase != "both":
        raise CommodelError(
            "the kernel table prices colocated serving of both phases; give no --prefill-gpus or --phase"
        )
    where = cluster(job.system, **cluster_shape(dict(job)))
    recipe = serving_precision(job.dtype, where.gpu)
    sizes = {name: getattr(job, name) for name in ENGINE_SIZES}
    software = {name: getattr(job, name) for name in ENGINE_SOFTWARE}
    engine = replica_engine(model(job.model), where, recipe, software, sizes)
    return iteration_table(engine, batch, job.prompt, job.output, job.prompt_cv, job.output_cv)


def _pool_was_cut(job: ServingJob) -> bool:
    """Whether ``job``'s --kv-fraction, below the default, is what keeps one request out: at the
    default share one would fit."""
    default = ServingJob.model_fields["kv_fraction"].default
    if job.kv_fraction >= default:
        return False
    return int(_one_row(price_serving, job.model_copy(update={"kv_fraction": default})).max_batch) > 0


def _count(mean: float) -> int | float:
    """Requests in flight as a person reads them: a whole number where the batch is one (``--batch``,
    the limits), else the mean to a tenth (a disaggregated decode pool holds its feed rate times a
    request's time in it, Little's law: 20.99 is 21.0, not 20)."""
    return int(mean) if float(mean).is_integer() else round(float(mean), 1)


def serve(job: ServingJob | None = None, kernels: bool = False, **values: Any) -> dict[str, Any]:
    """Price one serving deployment (a :class:`ServingJob`, or its fields as keywords): latency,
    throughput, KV cache, power and cost, the batch in flight and the largest that fits, and
    ``notes`` on what decided the batch. ``kernels``: also each kind of iteration at that batch, one
    layer's kernels with their rooflines and what the iteration adds up."""
    job = job if job is not None else serving_job(**values)
    row = _one_row(price_serving, job)
    in_flight, largest = _count(row.batch_in_flight), int(row.max_batch)
    gpu = cluster(job.system).gpu
    recipe = serving_precision(job.dtype, gpu)
    notes = []
    if recipe.gemm in WEIGHT_ONLY:
        notes.append(
            f"{gpu.description} has no {job.dtype} tensor cores: the weights stay 4-bit in "
            f"memory and the GEMMs compute in {WEIGHT_ONLY[recipe.gemm][1]} (weight-only)"
        )
    if job.prefill_gpus:
        pace = (
            f"the rate its {job.prefill_gpus} prefill GPUs send requests at"
            if in_flight < largest
            else "its largest batch, with prompts to spare from the prefill pool"
        )
        notes.append(
            f"the decode pool holds {in_flight} requests per replica on average: {pace} (at most {largest} fit)"
        )
    elif job.slo_ttft is not None or job.slo_tpot is not None:
        notes.append(f"the SLO allows {in_flight} requests in flight per replica (at most {largest} fit)")
    elif job.batch == "max":
        notes.append(
            f"{in_flight} requests in flight per replica: all the KV cache and engine limits allow "
            "(--batch max, trtllm-bench's offline run; --batch N or an SLO for another)"
        )
    else:
        notes.append(f"{in_flight} requests in flight per replica, as --batch states")
    outputs = {name: float(getattr(row, name)) for name in SERVING_OUTPUTS if name not in SERVING_APART}
    outputs = {name: v if np.isfinite(v) else None for name, v in outputs.items()}  # empty: not priced
    if largest == 0:  # not one request fits: the pricing leaves latency, throughput and cost empty
        pool = f"a larger --kv-fraction than {job.kv_fraction:g}, " if _pool_was_cut(job) else ""
        notes = [f"{row.problem}: not one request's KV cache fits beside the weights and runtime buffers "
                 f"({pool}more GPUs per replica, a smaller dtype or a shorter context)"]  # fmt: skip
    elif not row.fits:
        fixes = f"--batch {largest} or --batch max, more GPUs per replica"
        fixes += "" if kv_dtype_of(job.kv_dtype, recipe) == "fp8" else ", or an FP8 KV cache"
        notes = [
            f"{row.problem}: {in_flight} requests' KV cache does not fit; at most {largest} do ({fixes})"
        ]
    return {
        "model": job.model,
        "system": job.system,
        "gpus": int(row.gpus),
        "replicas": int(row.replicas),
        "layout": {"tp": job.tp, "pp": job.pp, "ep": job.ep},
        "attention_dp": job.attention_dp,
        **({"dispatcher": job.dispatcher, "ep_overlap": job.ep_overlap} if job.ep > 1 else {}),
        "phase": job.phase,
        "prefill_gpus": job.prefill_gpus,
        "dtype": job.dtype,
        "kv_dtype": kv_dtype_of(job.kv_dtype, recipe),
        "prompt": job.prompt,
        "output": job.output,
        "batch_in_flight": in_flight,
        "max_batch": largest,
        "price_per_gpu_hour": job.price_per_gpu_hour,
        **outputs,
        "fits": bool(row.fits),
        "notes": notes,
        **(_iteration_table(job, in_flight) if kernels else {}),
    }
