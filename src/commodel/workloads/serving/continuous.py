"""Continuous batching over an engine's iterations (:mod:`commodel.workloads.serving.engine`): how many
requests start per iteration, the share of iterations that carry prompts, the mean iteration (the
time per output token), the first token's wait, and the iterations a person reads.

**Continuous batching in steady state** (every request ``p`` prompt and ``o`` output tokens): a
request stays in flight ``L = o + k - 1`` iterations, its prompt in ``k = ceil(p / max_num_tokens)``
chunks (TensorRT-LLM's chunked context, which trtllm-bench enables; ``k = 1`` for a prompt within
the limit) and then decode. With ``B`` requests in flight, ``B / L`` finish and start per iteration,
so an iteration carries ``G = B (o - 1) / L`` decode queries and, on a share ``f = min(B / L, 1)``
of iterations, ``c = max(B / L, 1)`` prompts on average (replicas in lockstep: the share and the
prompts of the replica starting the most, :func:`slowest_replica_starts`), priced as iterations of the
two whole numbers of prompts around ``c``, mixed to it. ``output tokens/s = (B / L) o / t``, ``t`` the
mean iteration, with prompts or decode only (also the time per output token); the first token comes
an iteration with prompts (weighed by the prompts each starts) and ``k - 1`` decode ones after a
request is scheduled.

**How many in flight**: as TensorRT-LLM's guaranteed-no-evict scheduler admits them, each request
reserves KV blocks for its whole ``p + o`` tokens; the KV pool is ``kv_fraction`` of the memory
left after weights and runtime buffers; at most ``max_batch`` requests, and the prompt tokens of an
iteration fill at most ``max_num_tokens`` less its decode tokens, ``B <= max_num_tokens o / (p + o -
1)`` (at least one request; :func:`commodel.workloads.serving.memory.capacity`). ``batch = max`` is
trtllm-bench's offline scenario: all requests queued, as many in flight as fit; a latency SLO picks
the largest batch whose first-token and per-token times meet it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from commodel.workloads.layer.kernel_rows import first_design, kernel_row
from commodel.workloads.serving.engine import Engine, iteration_time


def prompt_chunks(engine: Engine, prompt: ArrayLike) -> np.ndarray:
    """Iterations a prompt of ``p`` tokens takes, ``k = ceil(p / max_num_tokens)``: an engine with
    chunked context (TensorRT-LLM's, which trtllm-bench enables; vLLM's and SGLang's chunked prefill)
    runs a longer prompt as chunks that fill the iteration's token budget, the last one the rest."""
    return np.ceil(np.asarray(prompt, dtype=float) / engine.max_num_tokens)


def mean_context(prompt: ArrayLike, output: ArrayLike, output_cv: ArrayLike) -> np.ndarray:
    """A request's length-biased mean length in flight, ``E[p] + E[o^2] / 2 E[o] = p + o (1 + cv_o^2)
    / 2``: long outputs are in flight longer."""
    o = np.asarray(output, dtype=float)
    return np.asarray(prompt, dtype=float) + o * (1 + np.asarray(output_cv, dtype=float) ** 2) / 2


def slowest_replica_starts(
    starts: ArrayLike, replicas: ArrayLike, room: ArrayLike = np.inf
) -> tuple[np.ndarray, np.ndarray]:
    """(The share of iterations with prompts, the prompts the slowest replica starts in one) for
    ``starts`` requests started per replica and iteration on average, ``λ = B / L``, at most ``room``
    in a replica's iteration (its token budget's whole prompts). One replica: ``f = min(λ, 1)``
    iterations of ``max(λ, 1)`` whole prompts, whose mean is exact however its starts fall (an
    iteration's time is affine in its prompts). ``R`` replicas in lockstep: the slowest sets every
    iteration's time, so how the starts spread counts. A replica's ``B`` slots end in an iteration
    with probability ``1 / L`` each, independently of the other replicas': Poisson(``λ``) endings, of
    which an iteration starts at most ``n = max(room, ceil(λ))``, the rest in the next ones; so its
    starts follow Poisson's law capped at ``n``, mixed with ``n`` itself in the proportion that keeps
    the mean at ``λ`` (the waiting endings; with room for one, each iteration starts one with
    probability ``λ``). Some replica starts prompts on ``1 - P(0)^R`` of the iterations, and the
    slowest starts ``E[max] = sum_{c < n} (1 - F(c)^R)`` in all. A seeded event simulation of the
    slots checks both (``tests/test_serving.py``)."""
    lam = np.asarray(starts, dtype=float)
    R = np.broadcast_to(np.asarray(replicas, dtype=float), lam.shape)
    share, prompts = np.minimum(lam, 1.0), np.maximum(lam, 1.0)
    lock = (R > 1) & (lam > 0)
    if not np.any(lock):
        return share, prompts
    lam, R = lam[lock], R[lock]
    roomy = np.ceil(lam + 10 * np.sqrt(lam) + 10)  # beyond it a Poisson count has no mass left
    n = np.maximum(np.minimum(np.broadcast_to(room, lock.shape)[lock], roomy), np.ceil(lam))[:, None]
    c = np.arange(int(n.max()) + 1)
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, c.size)))])
    poisson = np.exp(c * np.log(lam[:, None]) - lam[:, None] - log_factorial)
    below = np.where(c < n, poisson, 0.0)
    capped = below + (c == n) * (1 - below.sum(axis=1, keepdims=True))  # at most n start
    # The endings beyond n wait, so a replica starts n more often than its endings alone say: its
    # iterations mix the capped law and n itself in the proportion that keeps the mean at λ.
    kept = np.sum(c * capped, axis=1)
    waiting = np.clip((lam - kept) / np.maximum(n[:, 0] - kept, np.finfo(float).tiny), 0.0, 1.0)[:, None]
    pmf = (1 - waiting) * capped + waiting * (c == n)
    cdf = np.minimum(np.cumsum(pmf, axis=1), 1.0)
    some = np.clip(1 - pmf[:, 0] ** R, np.finfo(float).tiny, 1.0)
    share[lock] = some
    prompts[lock] = np.maximum(np.sum(np.where(c < n, 1 - cdf ** R[:, None], 0.0), axis=1) / some, 1.0)
    return share, prompts


def synchronized_replicas(engine: Engine) -> np.ndarray:
    """Replicas whose iterations run in lockstep: the ``ep / tp`` that share an expert-parallel group
    (attention data parallelism: each rank a replica of its own attention, the experts over all of
    them). Every MoE layer's dispatch and combine wait for every rank of the group, so an iteration
    lasts as long as the slowest replica's; 1 where a replica holds its experts' group itself."""
    return np.maximum(engine.ep / engine.tp, 1.0)


def steady_state(
    engine: Engine,
    batch: ArrayLike,
    prompt: ArrayLike,
    output: ArrayLike,
    prompt_cv: ArrayLike = 0.0,
    output_cv: ArrayLike = 0.0,
) -> dict[str, Any]:
    """Continuous batching with ``batch`` requests in flight (module docstring): time to first token
    once scheduled, time per output token, and output tokens and requests per second per replica;
    the time shares of communication, host and compute-bound kernels, and the mean HBM traffic of
    the memory-bound ones (``hbm_Bps``).

    A request mix enters by its mean lengths and their coefficients of variation: a decode step sees
    the length-biased mean context ``E[p] + E[o^2] / 2 E[o] = p + o (1 + cv_o^2) / 2`` (long outputs
    are in flight longer), prompts' attention ``E[p^2]`` (:func:`iteration_time`).

    Replicas in lockstep (:func:`synchronized_replicas`, ``R`` of them: attention data parallelism)
    wait for each other at every MoE layer, so an iteration takes the time of the replica that starts
    the most prompts (:func:`slowest_replica_starts`). (On 8 H200s serving DeepSeek-R1 at 128 requests
    per rank, 1/16 of a start per replica and iteration gives 40% such iterations: 88 ms per output
    token, where the run reports 11.35 tokens/s per user, 88.1 ms; each replica alone would be 51 ms.)
    ``iterations``: each kind (with prompts, with one more prompt, decode only) with its share, decode
    queries, prompts and its :func:`iteration_time`."""
    b, p, o = (np.asarray(v, dtype=float) for v in (batch, prompt, output))
    chunks = prompt_chunks(engine, p)
    life = o + chunks - 1  # iterations a request stays in flight: its prompt's chunks, then decode
    starts = b / life
    queries = b * (o - 1) / life
    room = np.floor((engine.max_num_tokens - queries) / p)  # whole prompts beside the decode tokens
    share, prompts = slowest_replica_starts(starts, synchronized_replicas(engine), room)
    context = mean_context(p, o, output_cv)
    # Decode-only iterations occur where requests decode (o > 1); with one output token (no queries)
    # their share is 0 and one query keeps their kernels defined.
    decode = iteration_time(engine, np.maximum(queries, 1.0), np.zeros_like(b), p, context)
    # The prompts an iteration with prompts starts are a mean over iterations that start whole ones:
    # the iterations of the two whole numbers around it, mixed to that mean (a fraction of a prompt
    # would cut the GEMMs' tiles at a token count no iteration has).
    whole = np.floor(prompts)
    more = prompts - whole
    lower = iteration_time(engine, queries, whole, p, context, prompt_cv)
    kinds = [("with prompts", share * (1 - more), whole, lower)]
    if np.any(more > 0):
        upper = iteration_time(engine, queries, whole + 1, p, context, prompt_cv)
        kinds.append(("with one more prompt", share * more, whole + 1, upper))
    kinds.append(("decode only", 1 - share, 0 * b, decode))

    def mixed(name: str) -> np.ndarray:
        return sum(weight * timing[name] for _, weight, _, timing in kinds)

    # a request's prompt lands in an iteration in proportion to the prompts it starts
    starting = sum(weight * count for _, weight, count, _ in kinds)
    first = sum(weight * count * timing["time_s"] for _, weight, count, timing in kinds) / starting
    mean = mixed("time_s")
    return {
        "ttft_s": first + (chunks - 1) * decode["time_s"],
        "tpot_s": mean,
        "output_tokens_per_s": starts * o / mean,
        "requests_per_s": starts / mean,
        **{share_of: mixed(name) / mean for share_of, name in SHARES.items()},
        "iterations": tuple((kind, weight, queries, count, timing) for kind, weight, count, timing in kinds),
    }


#: The mean iteration's shares of its time, and its HBM bytes per second, from what each iteration adds up.
SHARES = {
    "comm_share": "comm_s",
    "host_share": "host_s",
    "compute_bound_share": "compute_bound_s",
    "hbm_Bps": "hbm_bytes",
}


def iteration_table(engine: Engine, state: dict[str, Any], prompt: ArrayLike) -> list[dict[str, object]]:
    """The first design's steady-state iterations (:func:`steady_state`'s ``state`` of prompts of
    ``prompt`` tokens), each kind that occurs (with prompts, and with one more prompt, a ``share`` f of
    them in all; decode only, 1 - f): its decode ``queries`` and ``prompts``, one layer's kernels for one micro-batch
    (:func:`~commodel.workloads.layer.kernel_rows.kernel_row`, ``calls`` per layer, ``ms`` per layer), the
    last stage's ``logits``, and what :func:`iteration_time` adds up from them: ``stage_layers``,
    ``pp``, ``comm_ms``, ``host_ms``, ``time_ms``."""
    gpu, first = engine.cluster.gpu, first_design
    out = []
    for kind, share, queries, prompts, timing in state["iterations"]:
        if not first(share) > 0:
            continue
        (logits, logits_s), layer = timing["logits"], timing["layer"]
        priced = [(k, n, first(seconds)) for k, calls, seconds in layer if (n := first(calls)) > 0]
        out.append({
            "iteration": kind, "share": first(share), "queries": first(queries), "prompts": first(prompts),
            "prompt": first(prompt), "pp": int(first(engine.pp)), "stage_layers": int(np.ceil(engine.model.layers / first(engine.pp))),
            "kernels": [{**kernel_row(gpu, k, t), "calls": calls, "ms": 1e3 * calls * t} for k, calls, t in priced],
            "logits": {**kernel_row(gpu, logits, logits_s), "calls": 1.0, "ms": 1e3 * first(logits_s)},
            **{f"{name}_ms": 1e3 * first(timing[f"{name}_s"]) for name in ("comm", "host", "time")},
        })  # fmt: skip
    return out
