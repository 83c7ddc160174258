"""One training job or serving deployment, end to end: the scalar front doors the CLI, validation and
studies use.

:func:`train` and :func:`serve` are the ``training`` and ``serving`` evaluators on a one-row table,
so a scalar call and a sweep give the same answer for the same job (DESIGN principle 7).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from commodel.errors import CommodelError
from commodel.pricing.jobs import Job, ServingJob, TrainingJob, serving_job, training_job
from commodel.workloads.training import BREAKDOWN

#: Outputs a person reads per step (the rest of the evaluator's columns are job totals).
STEP_FIELDS = (
    "step_time_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "hw_tflops_per_gpu",
    "mfu",
    "memory_per_gpu_bytes",
    "offloaded_bytes",
    "gpu_power_W",
    "it_power_kW",
    "energy_per_token_J",
    "stage_imbalance",
)


def job_columns(job: Job, rows: int = 1) -> dict[str, np.ndarray]:
    """A job as an evaluator's table held as columns: ``rows`` copies of each field."""
    return {name: np.array([value] * rows, dtype=object) for name, value in job}


def _one_row(
    evaluate_columns: Callable[..., dict[str, np.ndarray]],
    job: Job,
    describe: Callable[[SimpleNamespace], str] = lambda row: "",
) -> SimpleNamespace:
    """The evaluator's output for one job, as attributes; an invalid job is an error naming why (and
    what the job resolved to, as ``describe`` puts it)."""
    table = evaluate_columns(job_columns(job), checked=True)
    row = SimpleNamespace(**{name: values[0] for name, values in table.items()})
    if not row.valid:
        what = describe(row)
        raise CommodelError(f"invalid {job.noun} job{f' ({what})' if what else ''}: {row.problem}")
    return row


def _training_layout(job: TrainingJob, row: SimpleNamespace) -> str:
    """A training job's layout as resolved ("64 GPUs, tp=8 pp=4 cp=1 dp=2 ep=1, micro batch 1 of global
    batch 1024")."""
    sizes = " ".join(f"{name}={getattr(job, name)}" for name in ("tp", "pp", "cp"))
    return (
        f"{row.gpus:.0f} GPUs, {sizes} dp={row.dp:.0f} ep={job.ep}, "
        f"micro batch {job.micro_batch} of global batch {job.global_batch}"
    )


#: Stage imbalance (slowest stage over the mean) above which :func:`train` looks for a lighter last
#: stage, and the gain that makes it say so.
IMBALANCE_WORTH_A_LOOK, GAIN_WORTH_A_NOTE = 0.05, 0.02


def _variants(
    job: TrainingJob, field: str, choices: list[Any], evaluate_columns: Callable[..., dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """The evaluator's table for ``job`` with ``field`` set to each of ``choices``, one batch."""
    columns = job_columns(job, len(choices))
    columns[field] = np.array(choices, dtype=object)
    return evaluate_columns(columns, checked=True)


def _lighter_last_stage(
    job: TrainingJob, row: SimpleNamespace, evaluate_columns: Callable[..., dict[str, np.ndarray]]
) -> str:
    """Where the last stage (its logits, multi-token prediction modules) sets a pipeline's pace: the
    fewer layers there (Megatron's ``--decoder-last-pipeline-num-layers``, or under virtual stages its
    pipeline layout) that make the step the
    shortest, priced as one batch of every choice, if that saves at least :data:`GAIN_WORTH_A_NOTE`
    and still fits where the job does; else no note."""
    from commodel.workloads.catalog import model

    if job.pp < 2 or job.last_stage_layers is not None or ":" in job.system:
        return ""
    if float(row.stage_imbalance) < IMBALANCE_WORTH_A_LOOK:
        return ""
    choices = list(range(1, -(-model(job.model).layers // job.pp)))
    table = _variants(job, "last_stage_layers", choices, evaluate_columns)
    step = np.where(table["valid"] & (table["fits"] | ~row.fits), table["step_time_s"].astype(float), np.inf)
    best = int(np.argmin(step))
    if not step[best] < (1 - GAIN_WORTH_A_NOTE) * float(row.step_time_s):
        return ""
    now, chunks = float(row.step_time_s), " over its chunks" if job.vpp > 1 else ""
    return (
        f"the last stage sets the pace ({100 * float(row.stage_imbalance):.0f}% above the mean): "
        f"--last-stage-layers {choices[best]}{chunks} balances it ({now:.4g} -> {step[best]:.4g} s per step)"
    )


def _kernel_table(job: TrainingJob, row: SimpleNamespace) -> list[dict[str, object]]:
    """:func:`~commodel.workloads.layer_work.kernel_table` of the job's layout as the evaluator resolved
    it (its data-parallel size, the model's sequence where the job gives none)."""
    from commodel.compute.precision import precision
    from commodel.hardware import cluster
    from commodel.pricing.training import job_layout
    from commodel.workloads.catalog import model
    from commodel.workloads.layer_work import kernel_table

    if ":" in job.system:
        raise CommodelError("the kernel table prices one kind of node; give one system, not node groups")
    net, gpu = model(job.model), cluster(job.system).gpu
    x = job_layout(job_columns(job), np.zeros(1, dtype=int), net, np.array([float(row.dp)]))
    return kernel_table(net, gpu, x, precision(job.dtype, gpu), job.attention)


def train(
    job: TrainingJob | None = None, advise: bool = False, kernels: bool = False, **values: Any
) -> dict[str, Any]:
    """Price one training job (a :class:`TrainingJob`, or its fields as keywords): scalar metrics,
    the layout as resolved, a ``breakdown`` of seconds per step, and ``notes`` on what the model
    assumed (a recomputation it chose, tensor parallelism crossing scale-up domains). ``advise``
    (as ``commodel train`` does): also price the changes worth trying (a lighter last stage, recompute
    modules) and name the ones that pay; each costs a batch evaluation more. ``kernels``: also one
    layer's kernels for one micro-batch, each with its roofline (``kernels``, :func:`_kernel_table`)."""
    from commodel.pricing.training import evaluate_columns

    job = job if job is not None else training_job(**values)
    row = _one_row(evaluate_columns, job, lambda row: _training_layout(job, row))
    step = {name: float(getattr(row, name)) for name in STEP_FIELDS}
    per_node = int(row.gpus) // int(row.nodes)
    notes = []
    if job.recompute == "auto":
        fit = "is the cheapest way to fit" if row.fits else "still does not fit"
        notes.append(f"recompute auto: {row.recompute_used} {fit}")
    if float(row.cross_vendor_s) > 0:
        notes.append(
            f"each activation or gradient crossing vendors takes {1e3 * float(row.cross_vendor_s):.3g} ms "
            f"({job.transport})"
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
    if job.tp_overlap == "userbuffers" and job.tp > 1 and not job.sequence_parallel:
        notes.append(
            "userbuffers overlap needs sequence parallelism: the TP collectives ran between the GEMMs"
        )
    if advise:
        advice = (_lighter_last_stage, _recompute_modules_to_try, _deepep_to_try)
        notes += [note for note in (a(job, row, evaluate_columns) for a in advice) if note]
    failures = (
        {"job_mtbf_h": float(row.job_mtbf_h), "checkpoint_interval_min": float(row.checkpoint_interval_min)}
        if np.isfinite(row.job_mtbf_h)
        else {}
    )
    return {
        "model": job.model,
        "system": job.system,
        "gpus": int(row.gpus),
        "nodes": int(row.nodes),
        "gpus_per_node": per_node,
        "layout": {
            "tp": job.tp,
            "pp": job.pp,
            "dp": int(row.dp),
            "cp": job.cp,
            "ep": job.ep,
            "etp": int(job.etp or job.tp),
            "vpp": job.vpp,
        },
        "schedule": job.schedule,
        "stage_layers": str(row.stage_layers),
        "dtype": job.dtype,
        "overlap": job.overlap,
        "tp_overlap": job.tp_overlap,
        "ep_overlap": job.ep_overlap,
        "dispatcher": job.dispatcher,
        "recompute": str(row.recompute_used),
        "recompute_modules": job.recompute_modules,
        **step,
        "fits": bool(row.fits),
        "node_power_kW": float(row.node_power_kW),
        "energy_per_step_J": float(row.it_power_kW) * 1e3 * job.pue * step["step_time_s"],
        "goodput": float(row.goodput),
        "time_to_train_days": float(row.time_to_train_days),
        **failures,
        "breakdown": {name: float(getattr(row, f"{name}_s")) for name in BREAKDOWN},
        "notes": notes,
        **({"kernels": _kernel_table(job, row)} if kernels else {}),
    }


def _deepep_to_try(
    job: TrainingJob, row: SimpleNamespace, evaluate_columns: Callable[..., dict[str, np.ndarray]]
) -> str:
    """Where NCCL's all-to-all dispatches a MoE job's tokens: DeepEP's dispatch priced instead (one
    network copy per remote domain and one NVLink copy per GPU holding the token's experts,
    :func:`~commodel.workloads.moe_dispatch.forwarded_copies`),
    named if it saves at least :data:`GAIN_WORTH_A_NOTE` and fits where the job does; else no note."""
    if job.dispatcher != "alltoall" or job.ep < 2 or float(row.ep_comm_s) <= 0 or ":" in job.system:
        return ""
    table = _variants(job, "dispatcher", ["deepep"], evaluate_columns)
    faster = float(table["step_time_s"][0])
    if not (table["valid"][0] and (table["fits"][0] or not row.fits)):
        return ""
    now = float(row.step_time_s)
    if not faster < (1 - GAIN_WORTH_A_NOTE) * now:
        return ""
    return (
        f"--dispatcher deepep sends a token across the network once per node its experts are on: expert "
        f"all-to-alls {float(row.ep_comm_s):.4g} -> {float(table['ep_comm_s'][0]):.4g} s ({now:.4g} -> "
        f"{faster:.4g} s per step)"
    )


def _recompute_modules_to_try(
    job: TrainingJob, row: SimpleNamespace, evaluate_columns: Callable[..., dict[str, np.ndarray]]
) -> str:
    """Where a job fits only by recomputing or offloading whole layers (``--recompute auto``), or does
    not fit: the recompute modules it does not use yet that free memory for its model and precision
    (:func:`~commodel.workloads.transformer.activation_bytes_per_token` says which), each alone and all
    together, priced as one batch; the fastest that fits is named if it saves at least
    :data:`GAIN_WORTH_A_NOTE` or makes the job fit; else no note."""
    from commodel.compute.precision import precision
    from commodel.workloads.catalog import model
    from commodel.workloads.layout import COVERED_BY, RECOMPUTE_MODULES, module_names
    from commodel.workloads.transformer import activation_bytes_per_token

    pressed = not row.fits or (
        job.recompute == "auto" and (float(row.recompute_share) > 0 or float(row.offload_share) > 0)
    )
    if not pressed or ":" in job.system:
        return ""
    net, recipe = model(job.model), precision(job.dtype)
    used = set(module_names(job.recompute_modules))
    stored = activation_bytes_per_token(net, 0, recipe=recipe)
    new = [name for name, bit in RECOMPUTE_MODULES.items()
           if name not in used and activation_bytes_per_token(net, 0, recipe=recipe, modules=bit) < stored]  # fmt: skip
    if not new:
        return ""
    together = used | set(new)
    together -= {name for name in together if COVERED_BY.get(name) in together}  # moe covers moe_act
    choices = [",".join(sorted(used | {name})) for name in new]
    choices += [",".join(sorted(together))] if len(new) > 1 else []
    table = _variants(job, "recompute_modules", choices, evaluate_columns)
    step = np.where(table["valid"] & table["fits"], table["step_time_s"].astype(float), np.inf)
    best = int(np.argmin(step))
    now = float(row.step_time_s)
    if not (step[best] < (1 - GAIN_WORTH_A_NOTE) * now or (np.isfinite(step[best]) and not row.fits)):
        return ""
    fits = "" if row.fits else "fits, "
    return (
        f"--recompute-modules {choices[best]} frees activations: {fits}recompute "
        f"{table['recompute_used'][best]} ({now:.4g} -> {step[best]:.4g} s per step)"
    )


#: The serving evaluator's outputs :func:`serve` reports apart (counts, flags) or not at all.
SERVING_APART = ("batch_in_flight", "max_batch", "fits", "replicas", "problem", "valid")


def _iteration_table(job: ServingJob, batch: int) -> list[dict[str, object]]:
    """:func:`~commodel.workloads.serving.iteration_table` of the job's replica at ``batch`` in flight."""
    from commodel.compute.precision import serving_precision
    from commodel.hardware import cluster
    from commodel.workloads.catalog import model
    from commodel.workloads.serving import Engine, iteration_table, kv_dtype_of, steady_state

    if job.prefill_gpus:
        raise CommodelError("the kernel table prices colocated serving; give no --prefill-gpus")
    where = cluster(job.system)
    recipe = serving_precision(job.dtype, where.gpu)
    sizes = (job.tp, job.pp, job.ep, job.max_batch_size, job.max_num_tokens, job.kv_fraction)
    engine = Engine(
        model(job.model), where, recipe, kv_dtype_of(job.kv_dtype, recipe), *map(np.atleast_1d, sizes)
    )
    state = steady_state(engine, batch, job.prompt, job.output, job.prompt_cv, job.output_cv)
    return iteration_table(engine, state, job.prompt)


def serve(job: ServingJob | None = None, kernels: bool = False, **values: Any) -> dict[str, Any]:
    """Price one serving deployment (a :class:`ServingJob`, or its fields as keywords): latency,
    throughput, KV cache, power and cost, the batch in flight and the largest that fits, and
    ``notes`` on what decided the batch. ``kernels``: also each kind of iteration at that batch, one
    layer's kernels with their rooflines and what the iteration adds up (``kernels``,
    :func:`_iteration_table`)."""
    from commodel.compute.precision import SERVING_RECIPES
    from commodel.pricing.serving import OUTPUTS, evaluate_columns
    from commodel.workloads.serving import kv_dtype_of

    job = job if job is not None else serving_job(**values)
    row = _one_row(evaluate_columns, job)
    in_flight, largest = int(row.batch_in_flight), int(row.max_batch)
    notes = []
    if job.slo_ttft is not None or job.slo_tpot is not None:
        notes.append(f"the SLO allows {in_flight} requests in flight per replica (at most {largest} fit)")
    elif job.batch == "max":
        notes.append(f"{in_flight} requests in flight per replica: all the KV cache and engine limits allow")
    if not row.fits:
        notes.append(
            "does not fit: the weights and runtime buffers, or this batch's KV cache, exceed the HBM"
        )
    return {
        "model": job.model,
        "system": job.system,
        "gpus": int(row.gpus),
        "replicas": int(row.replicas),
        "layout": {"tp": job.tp, "pp": job.pp, "ep": job.ep},
        "dtype": job.dtype,
        "kv_dtype": kv_dtype_of(job.kv_dtype, SERVING_RECIPES[job.dtype]),
        "prompt": job.prompt,
        "output": job.output,
        "batch_in_flight": in_flight,
        "max_batch": largest,
        "price_per_gpu_hour": job.price_per_gpu_hour,
        **{name: float(getattr(row, name)) for name in OUTPUTS if name not in SERVING_APART},
        "fits": bool(row.fits),
        "notes": notes,
        **({"kernels": _iteration_table(job, in_flight)} if kernels else {}),
    }
