"""The ``serving`` evaluator: a serving deployment per row through the serving, power and cost models.

Its inputs are :class:`commodel.pricing.serving_job.ServingJob`'s fields with their defaults,
checked with the CLI's rules. Per replica (``tp x pp`` GPUs) the steady state of continuous batching
(:mod:`commodel.workloads.serving.engine`) at the batch the row asks for: ``max`` (all the KV cache holds
under the engine's limits), a number, or the largest meeting a latency SLO; totals are over the
``gpus / (tp pp)`` replicas. Facility power = IT power x PUE, the GPUs at the power of their
compute-bound kernels and their memory-bound kernels' HBM traffic
(:func:`commodel.ops.energy.gpu_power_W`); energy per output token = facility power / output tokens
per second; cost per million output tokens = price per GPU-hour x GPUs / (3600 x tokens per second)
x 1e6. Rows that break a rule (replicas, heads, experts, a precision the GPU lacks, an SLO one
request misses) come back with ``valid = False`` and the rule in ``problem``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.precision import Precision, serving_precision
from commodel.errors import CommodelError
from commodel.hardware import cluster as make_cluster
from commodel.hardware.cluster import Cluster
from commodel.ops.energy import gpu_power_W, it_power_W
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import cluster_shape
from commodel.pricing.serving_job import ServingJob
from commodel.pricing.table import (
    Columns,
    blank_outputs,
    groups,
    numbers,
    problem_messages,
    take,
    unfit_problems,
    untimed,
)
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.model.schema import Transformer
from commodel.workloads.serving.batch import disaggregated, one_phase, slo_batch
from commodel.workloads.serving.continuous import mean_context, steady_state
from commodel.workloads.serving.engine import Engine, kv_dtype_of, replica_problems
from commodel.workloads.serving.memory import SERVING_CATEGORIES, capacity, kv_tokens_held, memory_at

#: What a disaggregated deployment's pools set in place of one replica's steady state.
DISAGGREGATED = (
    "ttft_s",
    "tpot_s",
    "iteration_s",
    "prompt_chunks",
    "comm_share",
    "host_share",
    "compute_bound_share",
    "hbm_Bps",
)

OUTPUTS = (
    "ttft_s",
    "tpot_s",
    "iteration_s",
    "prompt_chunks",
    "output_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "input_tokens_per_s",
    "requests_per_s",
    "batch_in_flight",
    "max_batch",
    "memory_per_gpu_bytes",
    *(f"memory_{category}_bytes" for category in SERVING_CATEGORIES),
    "fits",
    "replicas",
    "comm_share",
    "host_share",
    "gpu_power_W",
    "power_kW",
    "energy_per_token_J",
    "cost_per_million_tokens_usd",
    "problem",
    "valid",
)


#: A serving job's fields that size its replica's engine, as arrays (one entry per design).
ENGINE_SIZES = ("tp", "attention_dp", "pp", "ep", "max_batch_size", "max_num_tokens", "kv_fraction")

#: A serving job's software settings of its replica's engine, one per group of designs.
ENGINE_SOFTWARE = ("kv_dtype", "host_schedule", "dispatcher", "ep_overlap")


def replica_engine(
    net: Transformer,
    c: Cluster,
    recipe: Precision,
    software: Mapping[str, str],
    sizes: Mapping[str, ArrayLike],
) -> Engine:
    """The engine of a serving replica from its job's :data:`ENGINE_SOFTWARE` and
    :data:`ENGINE_SIZES` (a table's columns or one job's fields): its tensor parallelism the job's, or
    1 with attention data parallelism (each GPU a replica of its own attention, the experts over ep)."""
    s = {name: np.atleast_1d(np.asarray(sizes[name], dtype=float)) for name in ENGINE_SIZES}
    tp = np.where(s["attention_dp"] > 0, 1.0, s["tp"])
    return Engine(net, c, recipe, kv_dtype_of(software["kv_dtype"], recipe), tp, s["pp"], s["ep"],
                  s["max_batch_size"], s["max_num_tokens"], s["kv_fraction"], software["host_schedule"],
                  software["dispatcher"], software["ep_overlap"])  # fmt: skip


def price_serving(columns: Columns) -> Columns:
    """The ``serving`` evaluator's pricing of a table of checked deployments held as columns: the
    output columns (:data:`OUTPUTS`) and the resolved ``gpus``."""
    rows_total = len(columns["model"])
    out = blank_outputs(rows_total, OUTPUTS, flags=("fits",), text=("problem",))
    gpus_all = np.array(columns["gpus"], dtype=float)
    batches = np.asarray(columns["batch"]).astype(str)  # a number of requests, or max
    for key, rows in groups(columns, [*ServingJob.group_keys(), "power_limit"]):
        net = get_model(key["model"])

        def col(name: str, rows: np.ndarray = rows) -> np.ndarray:
            return numbers(take(columns, name, rows))

        tp, pp, ep = col("tp"), col("pp"), col("ep")
        gpus = np.where(np.isnan(col("gpus")), tp * pp, col("gpus"))
        gpus_all[rows] = gpus
        problems = replica_problems(net, tp, pp, ep, gpus, col("attention_dp"))
        prefill = col("prefill_gpus")
        split = prefill > 0
        slo = ~np.isnan(col("slo_ttft")) | ~np.isnan(col("slo_tpot"))
        one = key["phase"] != "both"
        problems += [
            (split & ((np.mod(prefill, tp * pp) != 0) | (prefill >= gpus)),
             "prefill GPUs must be whole replicas of tp x pp and leave some for decode"),
            (split & (slo | (batches[rows] != "max")),
             "disaggregated pools size their own batches: give neither a batch nor an SLO"),
            (one & (split | slo), f"a {key['phase']}-only run is one pool at the batch it is given: give "
                                  "neither --prefill-gpus nor an SLO"),
            ((split | (key["phase"] == "decode")) & (col("output") < 2),
             "a decode pool makes a request's tokens after its first, which its prefill makes: with one "
             "output token it has none to make (give --output 2 or more)"),
            (_longest(col) > (net.context or np.inf),
             f"a request's prompt and output tokens exceed {key['model']}'s context of {net.context or 0:,} tokens, "
             "the most one request may hold (a shorter --prompt or --output, or less --prompt-cv or --output-cv: "
             "the spread's long requests weigh as their length)"),
            (np.full(len(rows), net.moe is None and key["dispatcher"] != "alltoall"),
             f"the {key['dispatcher']} dispatcher moves a mixture-of-experts model's tokens: {key['model']} has "
             "no experts"),
            ((key["ep_overlap"] == "two-batch") & ((key["dispatcher"] != "deepep") | (ep < 2)),
             "two-batch overlap hides DeepEP's dispatch and combine: give --dispatcher deepep and --ep 2 or more"),
        ]  # fmt: skip
        try:  # a setting the GPUs cannot take: a power limit above their TDP, a precision they lack
            c = make_cluster(key["system"], **cluster_shape(key))
            recipe = serving_precision(key["dtype"], c.gpu)
        except CommodelError as exc:
            problems.append((np.ones(len(rows), dtype=bool), str(exc)))
            recipe = None
        messages = problem_messages(problems, len(rows))
        ok = messages == ""
        if recipe is not None and ok.any():
            sizes = {name: col(name)[ok] for name in ENGINE_SIZES}
            engine = replica_engine(net, c, recipe, key, sizes)
            request = {
                n: col(n)[ok]
                for n in (
                    "prompt",
                    "output",
                    "prompt_cv",
                    "output_cv",
                    "slo_ttft",
                    "slo_tpot",
                    "prefill_gpus",
                )
            }
            request["paged"] = np.full(int(ok.sum()), key["kv_reserve"] == "paged")
            messages[ok] = _price(engine, request,
                                  _batches(batches[rows][ok]), gpus[ok], rows[ok], out,
                                  c, col("pue")[ok], col("price_per_gpu_hour")[ok], key["phase"])  # fmt: skip
        out["problem"][rows] = messages
        out["valid"][rows] = messages == ""
    return {**out, "gpus": gpus_all, "batch": batches.astype(object)}


def _longest(col: Callable[[str], np.ndarray]) -> np.ndarray:
    """What a deployment's longest request holds at least: its mean prompt and output, and the
    length-biased means its spreads put in flight (a prompt's ``p (1 + cv^2)``,
    :func:`~commodel.workloads.serving.continuous.mean_context`), none of which can exceed the context
    if every request fits it."""
    p, o = col("prompt"), col("output")
    return np.maximum.reduce([p + o, p * (1 + col("prompt_cv") ** 2), mean_context(p, o, col("output_cv"))])


def _spread(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``values`` of the rows in ``mask``, in place among all rows (NaN elsewhere)."""
    out = np.full(mask.shape, np.nan)
    out[mask] = values
    return out


def _batches(values: np.ndarray) -> np.ndarray:
    """The ``batch`` column as numbers: NaN for ``max``."""
    return np.array([np.nan if v == "max" else float(v) for v in values])


def _price(
    engine: Engine,
    request: dict[str, np.ndarray],
    batch: np.ndarray,
    gpus: np.ndarray,
    rows: np.ndarray,
    out: dict[str, np.ndarray],
    c: object,
    pue: np.ndarray,
    price: np.ndarray,
    phase: str = "both",
) -> np.ndarray:
    """Fill ``out`` at ``rows`` for designs the layout rules accept; return each row's problem ("" if
    none: an SLO that one request misses, a batch the engine does not admit or that does not fit)."""
    p, o = request["prompt"], request["output"]
    spread = request["prompt_cv"], request["output_cv"]
    cap = capacity(engine, p, o, kv_tokens_held(p, o, request["output_cv"], request["paged"]), phase)
    limit = np.maximum(cap["max_batch"], 1.0)
    ttft, tpot = (np.where(np.isnan(v), np.inf, v) for v in (request["slo_ttft"], request["slo_tpot"]))
    slo = np.isfinite(ttft) | np.isfinite(tpot)
    chosen = np.where(np.isnan(batch), limit, batch)
    problems = np.full(len(rows), "", dtype=object)
    if slo.any():
        mix = [v[slo] for v in spread]
        best = slo_batch(engine.select(slo), limit[slo], p[slo], o[slo], ttft[slo], tpot[slo], *mix)
        chosen[slo] = np.maximum(best, 1.0)
        one = steady_state(engine.select(slo), np.ones(int(slo.sum())), p[slo], o[slo], *mix)
        missed = [
            f"the SLO is below one request's latency: time to first token {a:.3g} s, per output token {b:.3g} s"
            for a, b in zip(one["ttft_s"], one["tpot_s"], strict=True)
        ]
        problems[np.flatnonzero(slo)[best == 0]] = np.asarray(missed, dtype=object)[best == 0]
    replicas = gpus / (engine.tp * engine.pp)
    r = (
        steady_state(engine, chosen, p, o, *spread)
        if phase == "both"
        else one_phase(engine, phase, chosen, p, o)
    )
    total = replicas * r["output_tokens_per_s"]
    split = request["prefill_gpus"] > 0
    if split.any():  # prefill/decode disaggregation: the pools' own steady state, totals over both
        prefill = request["prefill_gpus"][split] / (engine.tp * engine.pp)[split]
        d = disaggregated(engine.select(split), prefill, replicas[split] - prefill, p[split], o[split])
        for name in DISAGGREGATED:
            r[name] = np.where(split, _spread(d[name], split), r[name])
        chosen = np.where(split, _spread(d["decode_batch"], split), chosen)
        total = np.where(split, _spread(d["output_tokens_per_s"], split), total)
        r["requests_per_s"] = np.where(
            split, _spread(d["requests_per_s"], split) / replicas, r["requests_per_s"]
        )
    activity = r["compute_bound_share"], r["hbm_Bps"]
    it_power = it_power_W(c, activity[0], gpus / c.gpus_per_node, activity[1])
    fields = {
        "ttft_s": r["ttft_s"],
        "tpot_s": r["tpot_s"],
        "iteration_s": r["iteration_s"],
        "prompt_chunks": r["prompt_chunks"],
        "output_tokens_per_s": total,
        "output_tokens_per_s_per_gpu": total / gpus,
        "input_tokens_per_s": replicas * r["requests_per_s"] * p * (phase != "decode"),
        "requests_per_s": replicas * r["requests_per_s"],
        "batch_in_flight": chosen,
        "max_batch": cap["max_batch"],
        **{name: cap[name] for name in cap if name.startswith("memory_")},
        "fits": cap["weights_fit"] & (chosen <= cap["kv_batch"]),
        "replicas": replicas,
        "comm_share": r["comm_share"],
        "host_share": r["host_share"],
        "gpu_power_W": gpu_power_W(c, *activity),
        "power_kW": it_power * pue / 1e3,
        "energy_per_token_J": it_power * pue / total,
        "cost_per_million_tokens_usd": price * gpus / 3600 / total * 1e6,
    }
    fields, problems = _runnable(fields, problems, engine, cap, chosen, split, phase)
    for name, values in fields.items():
        out[name][rows] = values
    return problems


def _runnable(
    fields: dict[str, np.ndarray],
    problems: np.ndarray,
    engine: Engine,
    cap: dict[str, np.ndarray],
    chosen: np.ndarray,
    split: np.ndarray,
    phase: str,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The priced ``fields`` and ``problems`` of deployments that may not run: a batch above what the
    engine admits, or above what its tokens per iteration keep decoding (the rest of the requests
    would wait for their prompts' chunks), is refused; one whose KV cache exceeds the pool shows the
    memory it needs (:func:`~commodel.workloads.serving.memory.memory_at`) and does not fit; none has
    a latency, rate or cost."""
    over = ((chosen > cap["engine_batch"]) | (chosen > cap["token_batch"])) & ~split
    problems = np.where(problems == "", _over_limit(chosen, engine, cap, over, phase), problems)
    fields |= memory_at(cap, np.where(split, 0.0, chosen))  # disaggregated pools size their own
    unfit = (problems == "") & ~fields["fits"]
    if unfit.any():
        need = unfit_problems(fields["memory_per_gpu_bytes"], engine.cluster.gpu.memory_capacity.value)
        problems = np.where(unfit, need, problems)
    return untimed(fields, over | unfit, FIT_OUTPUTS), problems


#: Outputs a deployment has whether or not it runs: its memory, the batch it asks for and the largest
#: that fits, its replicas. Where it does not fit, or asks for more than the engine admits, the others
#: (latency, throughput, power, energy, cost) are NaN and its ``problem`` says why.
FIT_OUTPUTS = (
    "batch_in_flight", "max_batch", "fits", "replicas", "memory_per_gpu_bytes",
    *(f"memory_{category}_bytes" for category in SERVING_CATEGORIES),
)  # fmt: skip


def _over_limit(
    chosen: np.ndarray, engine: Engine, cap: dict[str, np.ndarray], over: np.ndarray, phase: str
) -> np.ndarray:
    """Why a batch above what the engine admits (:func:`~commodel.workloads.serving.memory.capacity`'s
    ``engine_batch``: its batch limit, or its token limit, one decode token a request) or keeps
    decoding (``token_batch``; a prefill-only pool: the prompts one iteration takes) is refused, at
    the rows ``over`` ("" elsewhere)."""
    out = np.full(len(chosen), "", dtype=object)
    for i in np.flatnonzero(over):
        size, tokens = engine.max_batch[i], engine.max_num_tokens[i]
        if chosen[i] > cap["engine_batch"][i]:
            why = (
                f"--max-batch-size {size:.0f}"
                if cap["engine_batch"][i] >= size
                else f"--max-num-tokens {tokens:.0f}"
            )
            out[i] = f"{chosen[i]:.0f} requests in flight per replica, above {why}"
        elif phase == "prefill":
            out[i] = (f"{chosen[i]:.0f} prompts per iteration, above what --max-num-tokens {tokens:.0f} "
                      f"takes: {cap['token_batch'][i]:.0f} (--batch max, or a larger --max-num-tokens)")  # fmt: skip
        else:
            out[i] = (f"{chosen[i]:.0f} requests in flight per replica cannot all decode: --max-num-tokens "
                      f"{tokens:.0f} per iteration, their prompts' chunks included, keeps "
                      f"{cap['token_batch'][i]:.0f} decoding (--batch max, or a larger --max-num-tokens)")  # fmt: skip
    return out


def serving() -> Evaluator:
    return Evaluator(
        "serving",
        "a serving deployment per row: time to first token and per output token, output tokens/s, "
        "KV cache, power, energy and cost per token",
        ServingJob,
        OUTPUTS,
        price_serving,
        ("gpus", "batch"),
        flags=("fits", "valid"),
    )
