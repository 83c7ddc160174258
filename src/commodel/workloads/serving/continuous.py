"""Continuous batching over an engine's iterations (:mod:`commodel.workloads.serving.engine`): how many
requests start per iteration, the share of iterations that carry prompts, the mean iteration (the
time per output token), the first token's wait, and the iterations a person reads.

**Continuous batching in steady state** (every request ``p`` prompt and ``o`` output tokens): a
request stays in flight ``L = o + k - 1`` iterations, its prompt in ``k`` chunks, one an iteration,
and then decode: ``k = 1`` where the prompt fits the token budget beside the other requests' decode
queries, else the fewest chunks that do (TensorRT-LLM's chunked context, which trtllm-bench enables:
:func:`chunks_beside_decode`). With ``B`` requests in flight, ``B / L`` finish and start per
iteration, and on a share ``f = min(B k / L, 1)`` of iterations ``c = max(B k / L, 1)`` chunks of
``p / k`` tokens on average run (replicas in lockstep: the share and the chunks of the replica
starting the most, :func:`slowest_replica_starts`), priced as iterations of the two whole numbers of
chunks around ``c``, mixed to it, beside the ``B - c`` slots that decode (``B`` in an iteration
without prompts; ``B (o - 1) / L`` on average); a chunk carries its tokens' share of the prompt's causal attention (the chunks'
attention against their prefixes adds up to the whole). ``output tokens/s = (B / L) o / t``, ``t``
the mean iteration, with prompts or decode only. A request sees other iterations than the mean
(:func:`request_iterations`): its first token comes at the end of the ``k`` iterations its chunks
ride, which start more chunks than the mean (each chunk but the last fills the budget the queries
leave, the last the rest); its time per output token is the mean of the iterations it decodes in,
which start the other slots' chunks only (vLLM's and trtllm-bench's TPOT, ``(latency - TTFT) / (o -
1)``: at one request in flight a decode-only iteration, however long its prompt).

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


def chunks_beside_decode(engine: Engine, batch: ArrayLike, prompt: ArrayLike) -> np.ndarray:
    """Iterations a prompt of ``p`` tokens takes beside the other ``B - 1`` requests in flight (``B =
    batch``), which decode while it runs: TensorRT-LLM's scheduler admits the generation requests
    first, a token each, and fills the rest of the budget ``M`` with context chunks (vLLM's chunked
    prefill alike), so ``k = ceil(p / (M - B + 1))``; :func:`prompt_chunks` at one request in flight.
    :func:`commodel.workloads.serving.memory.capacity` keeps ``B`` below ``M o / (p + o - 1)``, so
    some budget is left."""
    p = np.asarray(prompt, dtype=float)
    return np.maximum(np.ceil(p / np.maximum(context_budget(engine, batch), 1.0)), 1.0)


def context_budget(engine: Engine, batch: ArrayLike) -> np.ndarray:
    """Tokens of an iteration's budget ``M`` left for a prompt's chunk beside the other ``B - 1``
    requests' decode tokens, ``M - B + 1`` (``M`` at one request in flight)."""
    return engine.max_num_tokens - np.maximum(np.asarray(batch, dtype=float) - 1, 0.0)


def mean_context(prompt: ArrayLike, output: ArrayLike, output_cv: ArrayLike) -> np.ndarray:
    """A request's length-biased mean length in flight, ``E[p] + E[o^2] / 2 E[o] = p + o (1 + cv_o^2)
    / 2``: long outputs are in flight longer."""
    o = np.asarray(output, dtype=float)
    return np.asarray(prompt, dtype=float) + o * (1 + np.asarray(output_cv, dtype=float) ** 2) / 2


def start_law(
    slots: ArrayLike, life: ArrayLike, replicas: ArrayLike, room: ArrayLike = np.inf
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How many prompts an iteration starts, for ``B = slots`` requests in flight on each of ``R =
    replicas`` replicas in lockstep (1: alone), each request ``L = life`` iterations, at most ``room``
    started by a replica's iteration (its token budget's whole prompts): ``(c, P(the replica starting
    the most starts c), the starts such an iteration holds over the group)``, one row per design.

    A replica's slots end in an iteration with probability ``1 / L`` each, independently of the
    other replicas': Binomial(``B``, ``1 / L``) endings (``λ = B / L`` on average; Poisson's for long
    requests, all ``B`` at once for one-iteration ones), of which an iteration starts at most ``n =
    max(room, ceil(λ))``, the rest in the next ones; so its starts follow the endings' law capped at
    ``n``, mixed with ``n`` itself in the proportion that keeps the mean at ``λ`` (the waiting
    endings; with room for one, each iteration starts one with probability ``λ``). The replica
    starting the most starts at most ``c`` with probability ``F(c)^R``; the others then start ``E[N
    | N <= c]`` each. A seeded event simulation of the slots checks the law (``tests/test_serving.py``)."""
    B, L = np.broadcast_arrays(
        np.maximum(np.round(np.asarray(slots, dtype=float)), 0.0), np.asarray(life, dtype=float)
    )
    R = np.broadcast_to(np.asarray(replicas, dtype=float), B.shape)
    likely = np.minimum(np.ceil(B / L + 10 * np.sqrt(B / L) + 10), B)  # beyond it no mass is left
    n = np.maximum(np.minimum(np.broadcast_to(room, B.shape), likely), np.ceil(B / L))
    c = np.arange(int(n.max()) + 1)
    slowest, held = np.zeros((B.size, c.size)), np.tile(c.astype(float), (B.size, 1))
    # Rows priced in groups of like widths (powers of two): one long-lived replica of thousands of
    # slots would otherwise widen every row's law to its own.
    width = np.ceil(np.log2(n + 1))
    for each in np.unique(width):
        at = width == each
        cols = int(n[at].max()) + 1
        slowest[at, :cols], held[at, :cols] = _law(B[at], L[at], R[at], n[at], np.arange(cols))
    return c, slowest, held


def _law(
    B: np.ndarray, L: np.ndarray, R: np.ndarray, n: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`start_law`'s ``(P(the slowest starts c), the group's starts then)`` for rows whose
    counts ``c`` reach their ``n``."""
    lam, R, n = B / L, R[:, None], n[:, None]
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, int(B.max()) + 1)))])
    B, L, gone = B[:, None], L[:, None], np.maximum(B[:, None] - c, 0)
    with np.errstate(divide="ignore", invalid="ignore"):  # no slots, or all ending at once
        log_pmf = log_factorial[B.astype(int)] - log_factorial[c] - log_factorial[gone.astype(int)]
        log_pmf += np.where(c > 0, c * np.log(1 / L), 0.0) + np.where(gone > 0, gone * np.log1p(-1 / L), 0.0)
    below = np.where((c < n) & (c <= B), np.exp(log_pmf), 0.0)
    capped = below + (c == n) * (1 - below.sum(axis=1, keepdims=True))  # at most n start
    kept = np.sum(c * capped, axis=1, keepdims=True)
    waiting = np.clip((lam[:, None] - kept) / np.maximum(n - kept, np.finfo(float).tiny), 0.0, 1.0)
    pmf = (1 - waiting) * capped + waiting * (c == n)
    cdf = np.minimum(np.cumsum(pmf, axis=1), 1.0)
    slowest = np.diff(cdf**R, axis=1, prepend=0.0)
    others = np.cumsum(c * pmf, axis=1) / np.maximum(cdf, np.finfo(float).tiny)
    return slowest, c + (R - 1) * others


def slowest_replica_starts(
    slots: ArrayLike, life: ArrayLike, replicas: ArrayLike, room: ArrayLike = np.inf
) -> tuple[np.ndarray, np.ndarray]:
    """(The share of iterations with prompts, the prompts the slowest replica starts in one) for
    ``slots`` requests of ``life`` iterations on each of ``replicas`` (:func:`start_law`)."""
    lam = np.asarray(slots, dtype=float) / np.asarray(life, dtype=float)
    return _slowest_of(start_law(slots, life, replicas, room), lam, replicas)


def _slowest_of(
    law: tuple[np.ndarray, np.ndarray, np.ndarray], starts: ArrayLike, replicas: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(The share of iterations with prompts, the prompts the slowest replica starts in one) from the
    ``law`` of :func:`start_law`, ``starts`` per replica and iteration on average. One replica: ``f =
    min(λ, 1)`` iterations of ``max(λ, 1)`` whole prompts, whose mean is exact however its starts
    fall (an iteration's time is affine in its prompts). Replicas in lockstep: the slowest sets every
    iteration's time, so how the starts spread counts: some replica starts prompts on ``1 - P(0)^R``
    of the iterations, and the slowest starts ``E[max]`` in all."""
    c, slowest, _ = law
    lam = np.broadcast_arrays(np.asarray(starts, dtype=float), np.asarray(replicas))[0]
    lock = (np.broadcast_to(replicas, lam.shape) > 1) & (lam > 0)
    some = np.clip(1 - slowest[:, 0], np.finfo(float).tiny, 1.0)
    share = np.where(lock, some, np.minimum(lam, 1.0))
    prompts = np.where(lock, np.maximum(np.sum(c * slowest, axis=1) / some, 1.0), np.maximum(lam, 1.0))
    return share, prompts


def over_starts(
    engine: Engine,
    law: tuple[np.ndarray, np.ndarray, np.ndarray],
    weightings: list[tuple[np.ndarray, ArrayLike]],
    slots: np.ndarray,
    p: np.ndarray,
    context: np.ndarray,
    prompt_cv: ArrayLike,
    chunks: ArrayLike = 1.0,
) -> list[np.ndarray]:
    """Each weighting's mean iteration, in seconds, one per design: ``(weight, own)``, a weight over the
    ``law``'s counts ``c`` of prompt chunks (:func:`start_law`; ``1 / chunks`` of a prompt each, a whole
    prompt where it fits the budget; normalized here) and the share of the prompt one of them carries
    (a request's own chunk, :func:`chunk_pieces`), each count with mass priced as an iteration of that
    many chunks beside the ``slots - c`` that decode (one :func:`iteration_time` call for all
    weightings)."""
    c = law[0]
    tiny = np.finfo(float).tiny
    normed = [w / np.maximum(w.sum(axis=1, keepdims=True), tiny) for w, _ in weightings]
    counts = c[np.any([np.any(w > 1e-6, axis=0) for w in normed], axis=0)]
    rows, k = normed[0].shape[0], len(normed)
    at = np.tile(np.repeat(np.arange(rows), counts.size), k)

    def each(v: ArrayLike) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype=float), (rows,))[at]

    def per_row(v: ArrayLike) -> np.ndarray:
        return np.repeat(np.broadcast_to(np.asarray(v, dtype=float), (rows,)), counts.size)

    unit = 1 / each(chunks)
    units = np.tile(counts.astype(float), rows * k)
    own = np.concatenate([per_row(piece) for _, piece in weightings])
    prompts = units * unit + np.where(units > 0, own - unit, 0.0)
    queries = np.maximum(each(slots) - units, np.where(units > 0, 0.0, 1.0))  # the slots running no chunk
    times = iteration_time(engine.select(at), queries, prompts, each(p), each(context), each(prompt_cv))
    times = times["time_s"].reshape(k, rows, counts.size)
    return [np.sum(w[:, counts] * t, axis=1) for w, t in zip(normed, times, strict=True)]


def request_iterations(
    law: tuple[np.ndarray, np.ndarray, np.ndarray], slots: np.ndarray, replicas: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(The weight of each count of starts in the iteration a request's prompt rides, in those it
    decodes in), from the ``law`` of :func:`start_law` for ``B = slots`` on each of ``R =
    replicas``: a request lands in an iteration in proportion to the starts it holds, so its own
    starts more prompts than the mean (``λ + 1`` on one replica with Poisson starts); it decodes in
    proportion to the slots that do not start, ``R B -`` those starts, so at one request in flight
    it never decodes beside a prompt, its own included."""
    c, slowest, held = law
    group = np.broadcast_to(np.asarray(replicas, dtype=float) * slots, slowest.shape[:1])[:, None]
    return slowest * held * (c > 0), slowest * np.maximum(group - held, 0.0)


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
    once scheduled, time per output token, the mean iteration, and output tokens and requests per second per replica;
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
    ``iteration_s`` is the mean iteration, ``tpot_s`` the mean of those a request decodes in
    (:func:`request_iterations`; with one output token, which no request decodes, the mean iteration).
    ``iterations``: each kind (with prompts, with one more prompt, decode only) with its share, decode
    queries, prompt chunks, the tokens of the one it is named by (a full chunk, or the last: the
    whole prompt where it fits the budget) and its :func:`iteration_time`; ``prompt_chunks``, the
    iterations a prompt takes (:func:`chunks_beside_decode`)."""
    b, p, o = (np.asarray(v, dtype=float) for v in (batch, prompt, output))
    chunks = chunks_beside_decode(engine, b, p)
    life = o + chunks - 1  # iterations a request stays in flight: its prompt's chunks, then decode
    starts = b / life
    # What an iteration carries of the prompts is chunks, k per request (one, a whole prompt, within
    # the budget): each but the last fills the budget the decode queries leave, the last the rest.
    replicas = synchronized_replicas(engine)
    law = start_law(b, life / chunks, replicas, chunk_room(engine, b, p, chunks))
    share, prompts = _slowest_of(law, starts * chunks, replicas)
    context = mean_context(p, o, output_cv)
    pieces = chunk_pieces(engine, b, p, chunks)
    # Every slot not running a chunk decodes: B queries beside no chunk (their share 0 with one output
    # token, where no slot decodes), B - c beside c.
    decode = iteration_time(engine, np.maximum(b, 1.0), np.zeros_like(b), p, context)
    # The chunks an iteration with prompts starts are a mean over iterations that start whole ones:
    # the iterations of the two whole numbers around it, mixed to that mean (a fraction of a chunk
    # would cut the GEMMs' tiles at a token count no iteration has), one of them a full chunk or a last.
    whole = np.floor(prompts)
    more = prompts - whole
    counts = [("with prompts", share * (1 - more), whole)]
    if np.any(more > 0):
        counts.append(("with one more prompt", share * more, whole + 1))
    counts = [(kind, weight, count, np.maximum(b - count, 0.0)) for kind, weight, count in counts]
    kinds = [
        (kind + piece, weight * odds, queries, count, own * p,
         iteration_time(engine, queries, (count - 1) / chunks + own, p, context, prompt_cv))
        for kind, weight, count, queries in counts
        for piece, own, odds in pieces
    ]  # fmt: skip
    kinds.append(("decode only", 1 - share, b, 0 * b, 0 * b, decode))

    def mixed(name: str) -> np.ndarray:
        return sum(weight * timing[name] for _, weight, *_, timing in kinds)

    riding, decoding = request_iterations(law, b, replicas)
    weightings = [(w, piece) for w in (riding, decoding) for _, piece, _ in pieces]
    times = over_starts(engine, law, weightings, b, p, context, prompt_cv, chunks)
    first, between = times[: len(pieces)], times[len(pieces) :]
    mean = mixed("time_s")
    return {
        "ttft_s": sum(t * odds * chunks for t, (_, _, odds) in zip(first, pieces, strict=True)),
        "tpot_s": np.where(
            o > 1, sum(t * odds for t, (_, _, odds) in zip(between, pieces, strict=True)), mean
        ),
        "iteration_s": mean,
        "output_tokens_per_s": starts * o / mean,
        "requests_per_s": starts / mean,
        **{share_of: mixed(name) / mean for share_of, name in SHARES.items()},
        "iterations": tuple(kinds),
        "prompt_chunks": chunks,
    }


def chunk_room(engine: Engine, batch: np.ndarray, prompt: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """Whole chunks of ``p / k`` tokens an iteration's budget ``M`` holds beside the ``B - c`` slots
    that decode, the largest ``c`` with ``c p / k + B - c <= M`` (no bound for one-token chunks)."""
    beyond = prompt / chunks - 1  # a chunk's tokens beyond the query its slot would decode
    left = np.maximum(engine.max_num_tokens - batch, 0.0)
    return np.where(beyond > 0, np.floor(left / np.where(beyond > 0, beyond, 1.0)), np.inf)


def chunk_pieces(
    engine: Engine, batch: np.ndarray, prompt: np.ndarray, chunks: np.ndarray
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The chunks of a prompt of ``p`` tokens as TensorRT-LLM cuts it (:func:`chunks_beside_decode`):
    ``(name, share of the prompt, odds)``, each but the last filling the budget ``M`` the other ``B - 1``
    requests' decode tokens leave, ``k - 1`` in ``k``, and the last the rest, one in ``k`` (equal
    shares where full ones would leave none); one piece, the whole prompt, where no design cuts its
    prompt."""
    if not np.any(chunks > 1):
        return [("", np.ones_like(chunks), np.ones_like(chunks))]
    full = np.minimum(context_budget(engine, batch), prompt)
    full = np.where((chunks - 1) * full < prompt, full, prompt / chunks) / prompt
    return [
        (", a full chunk", full, (chunks - 1) / chunks),
        (", the last chunk", 1 - (chunks - 1) * full, 1 / chunks),
    ]


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
    for kind, share, queries, prompts, chunk, timing in state["iterations"]:
        if not first(share) > 0:
            continue
        (logits, logits_s), layer = timing["logits"], timing["layer"]
        priced = [(k, n, first(seconds)) for k, calls, seconds in layer if (n := first(calls)) > 0]
        out.append({
            "iteration": kind, "share": first(share), "queries": first(queries), "prompts": first(prompts),
            "prompt": first(prompt), "chunk": first(chunk), "pp": int(first(engine.pp)), "stage_layers": int(np.ceil(engine.model.layers / first(engine.pp))),
            "kernels": [{**kernel_row(gpu, k, t), "calls": calls, "ms": 1e3 * calls * t} for k, calls, t in priced],
            "logits": {**kernel_row(gpu, logits, logits_s), "calls": 1.0, "ms": 1e3 * first(logits_s)},
            **{f"{name}_ms": 1e3 * first(timing[f"{name}_s"]) for name in ("comm", "host", "time")},
        })  # fmt: skip
    return out
