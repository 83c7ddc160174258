"""What ``commodel train`` suggests beside its answer: the changes worth trying on a job (a lighter
last pipeline stage, recompute modules, DeepEP's dispatcher, CUDA graphs or a larger micro-batch for a
host-bound step, compiled kernels, FSDP holding its layers, Transformer Engine's userbuffers overlap
on or off), each priced as one batch of variants of
the job through the same table pricing (:func:`~commodel.pricing.training.price_training`), and
named only where it pays."""

from __future__ import annotations

from itertools import combinations
from types import SimpleNamespace
from typing import Any

import numpy as np

from commodel.choice_bits import module_names
from commodel.compute.precision import precision
from commodel.pricing.table import Columns, job_columns
from commodel.pricing.training import price_training
from commodel.pricing.training_job import TrainingJob
from commodel.workloads.model.catalog import model
from commodel.workloads.model.recompute import COVERED_BY, MEGATRON_MODULES, RECOMPUTE_MODULES
from commodel.workloads.model.transformer import activation_bytes_per_token
from commodel.workloads.training.host_issue import capturable_scopes

#: Stage imbalance (slowest stage over the mean) above which a lighter last stage is looked for, and
#: the gain that makes a change worth a note.
IMBALANCE_WORTH_A_LOOK, GAIN_WORTH_A_NOTE = 0.05, 0.02

#: Share of a step the GPUs wait for the host above which the step is called host-bound.
HOST_BOUND_SHARE = 0.05


def variants(job: TrainingJob, field: str, choices: list[Any]) -> Columns:
    """The priced table of ``job`` with ``field`` set to each of ``choices``, one batch."""
    columns = job_columns(job, len(choices))
    columns[field] = np.array(choices, dtype=object)
    return price_training(columns)


def _saves(faster: float, now: float) -> bool:
    return faster < (1 - GAIN_WORTH_A_NOTE) * now


def _priced_fixes(job: TrainingJob, row: SimpleNamespace, tried: list[tuple[str, Any, str]]) -> str:
    """Each ``(field, value, flag)`` of ``tried`` priced on ``job``: the flags that save at least
    :data:`GAIN_WORTH_A_NOTE` and fit where the job does, with the step they give."""
    fixes, now = [], float(row.step_time_s)
    for field, value, flag in tried:
        table = variants(job, field, [value])
        faster = float(table["step_time_s"][0])
        if table["valid"][0] and _saves(faster, now):  # valid: the rules hold and it fits
            fixes.append(f"{flag}: {now:.4g} -> {faster:.4g} s per step")
    return "; ".join(fixes)


def lighter_last_stage(job: TrainingJob, row: SimpleNamespace) -> str:
    """Where the last stage (its logits, multi-token prediction modules) sets a pipeline's pace: the
    fewer layers there (Megatron's ``--decoder-last-pipeline-num-layers``, or under virtual stages its
    pipeline layout) that make the step the shortest, if that saves at least
    :data:`GAIN_WORTH_A_NOTE` and fits; else no note."""
    if job.pp < 2 or job.last_stage_layers is not None or ":" in job.system:
        return ""
    if float(row.stage_imbalance) < IMBALANCE_WORTH_A_LOOK:
        return ""
    choices = list(range(1, -(-model(job.model).layers // job.pp)))
    if not choices:  # one layer per stage: none lighter
        return ""
    table = variants(job, "last_stage_layers", choices)
    step = np.where(table["valid"], table["step_time_s"].astype(float), np.inf)
    best, now = int(np.argmin(step)), float(row.step_time_s)
    if not _saves(step[best], now):
        return ""
    chunks = " over its chunks" if job.vpp > 1 else ""
    return (
        f"the last stage sets the pace ({100 * float(row.stage_imbalance):.0f}% above the mean): "
        f"--last-stage-layers {choices[best]}{chunks} balances it ({now:.4g} -> {step[best]:.4g} s per step)"
    )


#: The flex dispatchers a note may name, and what each does.
FLEX_DISPATCHERS = {
    "deepep": "sends a token across the network once per group of 8 NVLink peers its experts are on",
    "hybridep": "keeps a token on NVLink across the whole domain and crosses the network once per remote domain",
}


def deepep_to_try(job: TrainingJob, row: SimpleNamespace) -> str:
    """Where NCCL's all-to-all dispatches a MoE job's tokens: Megatron's flex dispatcher priced instead,
    with DeepEP and with HybridEP (one network copy per remote NVLink group and one NVLink copy per GPU
    holding the token's experts, :func:`~commodel.workloads.moe.dispatch.forwarded_copies`); the faster
    is named if it saves at least :data:`GAIN_WORTH_A_NOTE` and fits; else no note."""
    if job.dispatcher != "alltoall" or job.ep < 2 or float(row.ep_comm_s) <= 0 or ":" in job.system:
        return ""
    names = list(FLEX_DISPATCHERS)
    table = variants(job, "dispatcher", names)
    steps = np.where(
        np.asarray(table["valid"], dtype=bool), np.asarray(table["step_time_s"], dtype=float), np.inf
    )
    best, now = int(np.argmin(steps)), float(row.step_time_s)
    if not _saves(float(steps[best]), now):
        return ""
    return (
        f"--dispatcher {names[best]} {FLEX_DISPATCHERS[names[best]]}: expert all-to-alls "
        f"{float(row.ep_comm_s):.4g} -> {float(table['ep_comm_s'][best]):.4g} s ({now:.4g} -> "
        f"{float(steps[best]):.4g} s per step)"
    )


def recompute_modules_to_try(job: TrainingJob, row: SimpleNamespace) -> str:
    """Where a job fits only by recomputing or offloading whole layers (``--recompute auto``), or does
    not fit: the recompute modules it does not use yet that free memory for its model and precision
    (:func:`~commodel.workloads.model.transformer.activation_bytes_per_token` says which), each alone and all
    together, priced as one batch; the fastest that fits is named if it saves at least
    :data:`GAIN_WORTH_A_NOTE` or makes the job fit; else no note."""
    pressed = not row.fits or (
        job.recompute == "auto" and (float(row.recompute_share) > 0 or float(row.offload_share) > 0)
    )
    if not pressed or ":" in job.system:
        return ""
    net, recipe = model(job.model), precision(job.dtype)
    used = set(module_names(job.recompute_modules))
    stored = activation_bytes_per_token(net, 0, recipe=recipe)
    new = [name for name in MEGATRON_MODULES if name not in used
           and activation_bytes_per_token(net, 0, recipe=recipe, modules=RECOMPUTE_MODULES[name]) < stored]  # fmt: skip
    if not new:
        return ""
    together = used | set(new)
    together -= {name for name in together if COVERED_BY.get(name) in together}  # moe covers moe_act
    choices = [",".join(sorted(used | {name})) for name in new]
    choices += [",".join(sorted(together))] if len(new) > 1 else []
    table = variants(job, "recompute_modules", choices)
    step = np.where(table["valid"], table["step_time_s"].astype(float), np.inf)
    best, now = int(np.argmin(step)), float(row.step_time_s)
    if not (_saves(step[best], now) or (np.isfinite(step[best]) and not row.fits)):
        return ""
    gain = f"{now:.4g} -> {step[best]:.4g} s per step" if row.fits else f"{step[best]:.4g} s per step"
    fits = "" if row.fits else "fits, "
    return (
        f"--recompute-modules {choices[best]} frees activations: {fits}recompute "
        f"{table['recompute_used'][best]} ({gain})"
    )


def host_fixes(job: TrainingJob, row: SimpleNamespace) -> str:
    """Where a step is host-bound (:data:`HOST_BOUND_SHARE`): the CUDA graphs Megatron can capture
    for the model (every scope but dropless experts' for an MoE model, the whole iteration for a
    dense one) and twice the micro-batch, each priced; named if it saves at least
    :data:`GAIN_WORTH_A_NOTE` and fits."""
    if float(row.host_s) < HOST_BOUND_SHARE * float(row.step_time_s) or ":" in job.system:
        return ""
    graphs = capturable_scopes(model(job.model), padded=job.capacity_factor is not None)
    tried = [("cuda_graphs", graphs, f"--cuda-graphs {graphs}"),
             ("micro_batch", 2 * job.micro_batch, f"--micro-batch {2 * job.micro_batch}")]  # fmt: skip
    return _priced_fixes(job, row, tried)


def software_to_try(job: TrainingJob, row: SimpleNamespace) -> str:
    """Where a job runs PyTorch's eager elementwise kernels, or a ZeRO-3 job frees its layers after
    each forward: fused kernels (torch.compile), and holding the layers gathered (FSDP's
    ``reshard_after_forward=False``); where tensor parallelism runs with sequence parallelism,
    userbuffers' overlap, or for a job that runs it Megatron's default without it (its GEMM chunks
    can cost more than the communication it hides); each priced, named if it saves at least
    :data:`GAIN_WORTH_A_NOTE` and fits."""
    if ":" in job.system:
        return ""
    tried = []
    if job.elementwise == "eager":
        tried.append(("elementwise", "fused", "--elementwise fused (torch.compile)"))
    if job.zero == 3 and job.reshard_after_forward:
        tried.append(("reshard_after_forward", False, "--no-reshard-after-forward"))
    swap = {"none": "userbuffers", "async": "userbuffers", "userbuffers": "async"}.get(job.tp_overlap)
    if job.tp > 1 and job.sequence_parallel and swap:
        tried.append(("tp_overlap", swap, f"--tp-overlap {swap}"))
    return _priced_fixes(job, row, tried)


def _memory_changes(job: TrainingJob, dp: int) -> list[tuple[str, Any, str]]:
    """The changes that take memory off a GPU without more GPUs, each ``(field, value, flag)``:
    recomputing (or offloading) the fewest layers that fit, sequence parallelism, sharding the optimizer
    (or everything) over data parallelism, one sequence per micro-batch, the optimizer in CPU memory."""
    changes = []
    if job.recompute not in ("auto", "full"):  # auto recomputes all the layers where fewer do not fit
        changes.append(("recompute", "auto", "--recompute auto"))
    if job.tp > 1 and not job.sequence_parallel:
        changes.append(("sequence_parallel", True, "--sequence-parallel"))
    if dp > 1:
        changes += [("zero", z, f"--zero {z}") for z in (1, 3) if job.zero < z]
    if job.micro_batch > 1:
        changes.append(("micro_batch", 1, "--micro-batch 1"))
    if "optimizer" not in module_names(job.offload):
        changes.append(
            ("offload", ",".join([*module_names(job.offload), "optimizer"]), "--offload optimizer")
        )
    return changes


def fit_fixes(job: TrainingJob, row: SimpleNamespace) -> str:
    """Where a job does not fit: every combination of the changes of :func:`_memory_changes`, priced
    as one batch; the fastest that fits is named, or, where none does, what is left (more GPUs per
    model copy, or GPUs with more memory)."""
    if row.fits or ":" in job.system:
        return ""
    changes = _memory_changes(job, int(row.dp))
    tries = [list(c) for n in range(1, len(changes) + 1) for c in combinations(changes, n)]
    if not tries:
        return "it needs more GPUs per model copy (--tp, --pp, --ep) or GPUs with more memory"
    columns = job_columns(job, len(tries))
    for field in {field for field, _, _ in changes}:
        columns[field] = np.array(columns[field], dtype=object)
    for i, tried in enumerate(tries):
        for field, value, _ in tried:
            columns[field][i] = value  # of two ZeRO stages together, the later (3)
    table = price_training(columns)
    step = np.where(table["valid"], table["step_time_s"].astype(float), np.inf)
    best = int(np.argmin(step))
    if not np.isfinite(step[best]):
        flags = ", ".join(flag for _, _, flag in changes)
        return (
            f"none of {flags}, alone or together, makes it fit: it needs more GPUs per model copy "
            "(--tp, --pp, --ep) or GPUs with more memory"
        )
    flags = " ".join(flag for _, _, flag in tries[best])
    how = f", recompute {table['recompute_used'][best]}" if "--recompute auto" in flags else ""
    return f"{flags} makes it fit: {step[best]:.4g} s per step{how}"


#: The changes ``train(advise=True)`` prices for a job that fits, in the order their notes appear, and
#: those it prices for one that does not.
ADVICE = (lighter_last_stage, recompute_modules_to_try, deepep_to_try, host_fixes, software_to_try)
FIT_ADVICE = (fit_fixes, recompute_modules_to_try)
