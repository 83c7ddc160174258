"""The ``training`` evaluator: a table of training jobs through the training-step, energy and cost
models, one call of the models per group of rows that share their model, system and software.

Its inputs are :class:`~commodel.pricing.training_job.TrainingJob`'s fields. A row's GPUs and nodes
follow from each other (:func:`commodel.hardware.cluster.job_size`, or the node groups' own:
:func:`commodel.workloads.training.hetero.groups_size`), its data-parallel size from its GPUs, its layout from
its fields by name (:func:`job_layout`). Each rule a row breaks is the rule of the declaration or of
the model that owns the fact (the layout's, the placement's, CPU offloading's, DeepEP's, node
groups'), and the row comes back with ``valid = False`` and the rules in ``problem``; the resolved
``gpus``, ``nodes`` and ``dp`` replace the inputs. Job totals: :mod:`commodel.pricing.totals`.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from commodel.errors import CommodelError
from commodel.hardware import cluster as make_cluster
from commodel.hardware.cluster import Cluster, job_size
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import CLUSTER_SHAPE, choices_of, cluster_shape
from commodel.pricing.job_checks import check_columns
from commodel.pricing.table import (
    Columns,
    Outputs,
    coded,
    flags,
    groups,
    numbers,
    problem_messages,
    take,
    unfit_problems,
    untimed,
)
from commodel.pricing.totals import JOB_OUTPUTS, job_totals
from commodel.pricing.training_job import TrainingJob
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.model.schema import Transformer
from commodel.workloads.moe.dispatch import deepep_problem, ep_sms_problem
from commodel.workloads.moe.token_drop import capacity_problem
from commodel.workloads.parallel.layout import RECOMPUTE_CHOICES, Layout, stage_layers_text
from commodel.workloads.parallel.layout_rules import layout_problems
from commodel.workloads.parallel.pipeline_layout import stage_split
from commodel.workloads.training.activation_fit import offload_problem, recompute_layers_problem
from commodel.workloads.training.hetero import (
    group_rules,
    groups_size,
    hetero_train_step,
    is_node_groups,
    parse_node_groups,
)
from commodel.workloads.training.host_issue import graph_problem, unrun_scope_problem
from commodel.workloads.training.memory import CATEGORIES as MEMORY_CATEGORIES
from commodel.workloads.training.step import BREAKDOWN, train_step

#: Step outputs a design has whether or not it fits: its memory, how it fits (or tries to), its stages.
FIT_STEP_OUTPUTS = (
    "memory_per_gpu_bytes",
    *(f"memory_{category}_bytes" for category in MEMORY_CATEGORIES),
    "fits",
    "recompute_share",
    "offload_share",
    "offloaded_bytes",
    "offloaded_state_bytes",
    "recompute_used",
    "dropped_share",
    "tp_domains",
    "stage_layers",
)
STEP_OUTPUTS = (
    "step_time_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "hw_tflops_per_gpu",
    "mfu",
    *FIT_STEP_OUTPUTS,
    "offload_needed_Bps",
    "stage_imbalance",
    "cross_vendor_s",
)
OUTPUTS = (*STEP_OUTPUTS, *(f"{b}_s" for b in BREAKDOWN), *JOB_OUTPUTS, "problem", "valid")
#: Outputs a design has whether or not it fits; one that does not fit has none of the others (no step,
#: throughput, power, energy or cost): they are NaN, and its ``problem`` says by how much it misses
#: (:func:`~commodel.pricing.table.unfit_problems`).
FIT_OUTPUTS = (*FIT_STEP_OUTPUTS, "fabric_tiers", "network_capex_usd")
#: Outputs that are words: a row's problem, its recomputation in words, its stages' layers.
TEXT_OUTPUTS = ("problem", "recompute_used", "stage_layers")
#: Inputs the pricing resolves (gpus from nodes or nodes from gpus, dp from the GPUs).
RESOLVED = ("gpus", "nodes", "dp")
#: Layout sizes a job always states (the others may be unset: NaN, 0 in a layout).
REQUIRED_SIZES = frozenset(name for name, f in TrainingJob.model_fields.items() if f.default is not None)
#: Layout fields a row's pipeline layout states (:func:`stage_split`'s names for them).
SPLIT_FIELDS = {"vpp": "vpp", "first_stage_layers": "first", "last_stage_layers": "last", "mtp_layers": "mtp"}


def recompute_names(codes: np.ndarray, recomputed: np.ndarray, offloaded: np.ndarray) -> np.ndarray:
    """What each row does with its activations, in words: none, selective, full, full on a share of
    the layers, or offloading a share of the layers' activations to CPU memory (auto's choice, or
    the job's)."""
    named = np.asarray(RECOMPUTE_CHOICES, dtype=object)[np.asarray(codes, dtype=int)]
    blocks = (np.asarray(recomputed) > 0) & (named == "full")  # --recompute-layers
    chose = (named == "auto") | (np.asarray(offloaded) > 0) | blocks
    if not chose.any():
        return named
    share, moved = np.asarray(recomputed)[chose], np.asarray(offloaded)[chose]
    partial = coded(lambda s: "full" if s >= 1 else f"full on {100 * s:.0f}% of the layers" if s > 0 else "none",
                    share, object)  # fmt: skip
    offload = coded(
        lambda s: f"none; activations of {100 * s:.0f}% of the layers offloaded to CPU memory", moved, object
    )
    named = named.copy()
    named[chose] = np.where(moved > 0, offload, partial)
    return named


def job_layout(columns: Columns, rows: np.ndarray, net: Transformer, dp: np.ndarray) -> Layout:
    """The layout of the table's ``rows`` (jobs of model ``net``), read from the job's fields by name:
    numbers as floats (a size the job leaves unset as 0), flags as booleans, a choice as its code
    (:meth:`~commodel.pricing.job.Choices.code`); ``dp`` resolved, the model's sequence where the job
    gives none, and a row's pipeline layout's split (:func:`stage_split`) where it states one."""
    values = {}
    for f in fields(Layout):
        column = take(columns, f.name, rows)
        choices = choices_of(TrainingJob, f.name)
        if choices is not None:
            values[f.name] = coded(choices.code, column)
        elif TrainingJob.model_fields[f.name].annotation is bool:
            values[f.name] = flags(column)
        else:  # a size the job leaves unset is 0
            values[f.name] = numbers(column) if f.name in REQUIRED_SIZES else np.nan_to_num(numbers(column))
    seq = numbers(take(columns, "seq", rows))
    values |= {"dp": dp, "seq": np.where(np.isnan(seq), net.seq, seq)}
    split = _layout_splits(take(columns, "pipeline_layout", rows), values["pp"], net.layers)
    for name, stated in split.items():
        values[name] = np.where(np.isnan(stated), values[name], stated)
    return Layout(**values)


def _layout_splits(texts: np.ndarray, pp: np.ndarray, layers: int) -> dict[str, np.ndarray]:
    """The layout fields (:data:`SPLIT_FIELDS`) of the rows that state a pipeline layout (a job has
    taken its own already, a sweep may vary it), NaN in the other rows; empty where no row states one."""
    stating = texts != ""
    if not np.any(stating):
        return {}
    out = {name: np.full(len(texts), np.nan) for name in SPLIT_FIELDS}
    for text, stages in {(t, s) for t, s in zip(texts[stating], pp[stating], strict=True)}:
        split, at = stage_split(text, int(stages), layers), (texts == text) & (pp == stages)
        for name, values in out.items():
            values[at] = getattr(split, SPLIT_FIELDS[name])
    return out


def _fleet(key: dict) -> list[tuple[Cluster, int | None]]:
    """The clusters a group's ``system`` names, with their node counts (``None``: from the row), on
    its scale-out ``fabric``, pods, oversubscription and trays per rack (each absent or NaN: the
    record's)."""
    network = {"scale_out": key["fabric"] or None, **cluster_shape(key)}
    system = key["system"]
    if not is_node_groups(system):
        return [(make_cluster(system, **network), None)]
    return [(make_cluster(name, nodes, **network), nodes) for name, nodes in parse_node_groups(system)]


def price_training(columns: Columns) -> Columns:
    """The ``training`` evaluator's pricing of a table of checked jobs held as columns: the output
    columns (:data:`OUTPUTS`), and the resolved ``gpus``, ``nodes`` and ``dp``."""
    rows = len(columns["model"])
    out = Outputs(rows, (*OUTPUTS, *RESOLVED), flags=("fits",), text=TEXT_OUTPUTS)
    # The inputs that shape a cluster build it: rows that differ in them are priced apart.
    for key, group in groups(columns, [*TrainingJob.group_keys(), *CLUSTER_SHAPE]):
        _price_group(columns, key, group, out)
    return out.columns()


def _price_group(columns: Columns, key: dict, rows: np.ndarray, out: Outputs) -> None:
    """Price the ``rows`` that share the group ``key`` into ``out`` (their resolved sizes too)."""

    def col(name: str) -> np.ndarray:
        return numbers(take(columns, name, rows))

    net = get_model(key["model"])
    try:
        fleet = _fleet(key)
    except CommodelError as exc:  # a setting its GPUs cannot take (a power limit above their TDP)
        unbuilt = {"gpus": col("gpus"), "nodes": col("nodes"), "dp": col("dp")}
        out.put(rows, {"problem": np.full(len(rows), str(exc), dtype=object), "valid": False, **unbuilt})
        return
    clusters = [c for c, _ in fleet]

    size = job_size(clusters[0], col("gpus"), col("nodes")) if fleet[0][1] is None else None
    gpus, nodes, problems = size or groups_size(fleet, col("gpus"), col("nodes"))
    tp, pp, cp, dp = (col(k) for k in ("tp", "pp", "cp", "dp"))
    dp = np.where(np.isnan(dp), np.floor(gpus / (tp * pp * cp)), dp)
    layout = job_layout(columns, rows, net, dp)
    nics = col("nics")
    problems += [
        *layout_problems(net, layout, gpus),
        offload_problem(clusters, layout),
        graph_problem(net, layout),
        unrun_scope_problem(net, layout),
        capacity_problem(net, layout),
        recompute_layers_problem(layout),
        ep_sms_problem(clusters, layout),
        (
            np.full(len(rows), net.moe is None and key["ep_overlap"] != "none"),
            "--ep-overlap overlaps expert all-to-alls: it needs a mixture-of-experts model",
        ),
        (
            nics > min(c.system.scale_out.nics_per_node.value for c in clusters),
            "--nics cannot exceed the NICs a node has",
        ),
    ]
    if len(fleet) == 1:  # DeepEP puts from the GPU across domains
        problems.append(deepep_problem(clusters[0], layout, gpus))
    problems += group_rules(len(fleet) > 1, layout, take(columns, "stage_layers", rows))
    messages = problem_messages(problems, len(rows))
    ok = messages == ""
    if ok.any():
        sub, keep = layout.select(ok), rows[ok]
        result, messages[ok], powered = _step(net, fleet, sub, key, columns, keep, gpus[ok])
        if result:
            named = recompute_names(sub.recompute, result["recompute_share"], result["offload_share"])
            totals = job_totals(
                columns, keep, net, key, result, powered, gpus[ok], sub.global_batch * sub.seq
            )
            priced = {**result, "recompute_used": named, **totals}
            unfit = ~np.broadcast_to(np.asarray(priced["fits"], dtype=bool), keep.shape) & (
                messages[ok] == ""
            )
            if unfit.any():  # no step for a design that does not fit: say by how much it misses
                need = np.broadcast_to(priced["memory_per_gpu_bytes"], keep.shape)[unfit]
                held = min(c.gpu.memory_capacity.value for c in clusters)  # the smallest, on node groups
                messages[np.flatnonzero(ok)[unfit]] = unfit_problems(need, held)
                priced = untimed(priced, unfit, FIT_OUTPUTS)
            out.put(keep, priced)
    out.put(rows, {"problem": messages, "valid": messages == "", "gpus": gpus, "nodes": nodes, "dp": dp})


def _step(
    net: Transformer, fleet: list, x: Layout, key: dict, columns: Columns, rows: np.ndarray, gpus: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray | str, list[tuple[Cluster, np.ndarray]]]:
    """The step of layouts ``x`` (the table's ``rows``) on one kind of node or on node groups: the
    results, each row's problem ("" if none: a mechanism the system cannot run), and the nodes of
    each cluster it powers."""
    if len(fleet) > 1:
        result, failed = _hetero(net, [c for c, _ in fleet], x, key, columns, rows)
        return result, failed, [(c, np.full(len(rows), float(n))) for c, n in fleet]
    c = fleet[0][0]
    strategy = take(columns, "overlap", rows)
    try:
        result = train_step(net, c, x, key["dtype"], _one_or_each(strategy), key["attention"], key["tp_overlap"],
                            key["ep_overlap"])  # fmt: skip
    except CommodelError as exc:  # a mechanism this system cannot run (cais without NVLS): say why
        return {}, str(exc), []
    result |= {"stage_layers": stage_layers_text(net, x), "cross_vendor_s": 0 * x.tp}
    return result, "", [(c, gpus / c.gpus_per_node)]


def _one_or_each(values: np.ndarray) -> object:
    """A per-row input as one value where every row holds the same (the models price it once)."""
    return (
        values[0] if len(values) and (values.strides == (0,) or bool(np.all(values == values[0]))) else values
    )


def _hetero(
    net: Transformer, groups_: list[Cluster], x: Layout, key: dict, columns: Columns, rows: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Rows on unlike node groups, one at a time (:func:`commodel.workloads.training.hetero.hetero_train_step`):
    the results, NaN where a row breaks a rule of the groups, and that rule per row ("" if none)."""
    results, failed = [], np.full(len(rows), "", dtype=object)
    for i, row in enumerate(rows):
        nics = columns["nics"][row]
        try:
            r = hetero_train_step(
                net, groups_, x.select(np.arange(len(rows)) == i), key["dtype"], columns["overlap"][row],
                key["attention"], columns["transport"][row], None if nics is None or nics != nics else int(nics),
                columns["stage_layers"][row],
            )  # fmt: skip
        except CommodelError as exc:
            failed[i] = str(exc)
            r = {}
        results.append(r)
    names = next((list(r) for r in results if r), [])
    blank = {
        name: np.array([""], dtype=object) if name == "stage_layers" else np.array([np.nan]) for name in names
    }
    return {name: np.concatenate([(r or blank)[name] for r in results]) for name in names}, failed


def job_layouts(jobs: Columns | object) -> Layout:
    """The layouts of a table of training jobs of one model (a DataFrame, or columns: arrays that
    broadcast, scalars included), every field it leaves out at the declaration's default, checked by
    its rules, ``gpus`` and ``dp`` resolved as the evaluator resolves them (layout rules not checked:
    :func:`~commodel.workloads.parallel.layout_rules.layout_problems`); one job of scalars gives one layout of
    scalars. For scripts and tests that call the models directly with jobs as a user states them."""
    given = {name: np.atleast_1d(np.asarray(v)) for name, v in dict(jobs).items()}
    scalar = all(np.ndim(v) == 0 for v in dict(jobs).values())
    rows = np.broadcast_shapes(*(v.shape for v in given.values()))[0]
    columns = {
        name: np.broadcast_to(given[name], rows) if name in given else np.broadcast_to(np.asarray(d, dtype=object), rows)
        for name, d in TrainingJob.inputs().items()
    }  # fmt: skip
    columns, refused = check_columns(TrainingJob, columns)
    if refused.any():
        raise CommodelError(str(refused[refused != ""][0]))
    names = set(np.asarray(columns["model"]).tolist())
    if len(names) != 1:
        raise CommodelError(f"layouts of one model at a time, not {len(names)}")
    net, c = (
        get_model(names.pop()),
        _fleet({"system": str(columns["system"][0]), "fabric": ""})[0][0],
    )
    gpus, _, _ = job_size(c, numbers(columns["gpus"]), numbers(columns["nodes"]))
    tp, pp, cp, dp = (numbers(columns[k]) for k in ("tp", "pp", "cp", "dp"))
    x = job_layout(columns, np.arange(rows), net, np.where(np.isnan(dp), np.floor(gpus / (tp * pp * cp)), dp))
    return Layout(**{f.name: getattr(x, f.name)[0] for f in fields(Layout)}) if scalar else x


def training() -> Evaluator:
    return Evaluator(
        "training",
        "a training job per row: step time, throughput, memory, power, time to train, energy, cost",
        TrainingJob,
        OUTPUTS,
        price_training,
        RESOLVED,
        TEXT_OUTPUTS,
        ("fits", "valid"),
    )
