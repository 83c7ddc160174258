"""Continuous batching over an engine's iterations (:mod:`commodel.workloads.serving.engine`): how many
requests start per iteration, the share of iterations that carry prompts, the mean iteration (the
time per output token), the first token's wait, and the iterations a person reads.

**Continuous batching in steady state** (every request ``p`` prompt and ``o`` output tokens): a
request stays in flight ``L = o + k - 1`` iterations, its prompt in ``k`` chunks, one an iteration,
and then decode: ``k = 1`` where the prompt fits the token budget beside the other requests' decode
queries, else the fewest chunks that do (TensorRT-LLM's chunked context, which trtllm-bench enables:
:func:`chunks_beside_decode`). With ``B`` requests in flight, ``B / L`` finish and start per
iteration, ``B k / L`` chunks of ``p / k`` tokens on average, their count ``c`` spread as the slots
end (:func:`start_law`; replicas in lockstep: the count of the replica starting the most), each count
priced as an iteration of ``c`` chunks beside the ``B - c`` slots that decode (``B`` in an iteration
without prompts; ``B (o - 1) / L`` on average); a chunk carries its tokens' share of the prompt's causal attention (the chunks'
attention against their prefixes adds up to the whole). ``output tokens/s = (B / L) o / t``, ``t``
the mean iteration over that law. A request sees other iterations than the mean
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

from typing import Any, NamedTuple

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
    starting the most, ``M``, starts at most ``c`` with probability ``F(c)^R``; the group's starts
    ``S`` then hold ``E[S; M <= c] = R m(c) F(c)^(R - 1)`` (``m(c) = E[N; N <= c]``), whose difference
    at ``c`` over ``P(M = c)`` is ``E[S | M = c]`` (``R λ`` over all iterations, as many as end). A
    seeded event simulation of the slots checks the law (``tests/test_serving.py``)."""
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
    # E[S; M = c], a difference of E[S; M <= c] (docstring of start_law)
    joint = np.diff(R * np.cumsum(c * pmf, axis=1) * cdf ** (R - 1), axis=1, prepend=0.0)
    held = np.divide(joint, slowest, out=np.broadcast_to(c, slowest.shape).astype(float), where=slowest > 0)
    return slowest, held


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
    ``law`` of :func:`start_law`, ``starts`` per replica and iteration on average: the kinds a person
    reads (:func:`iteration_kinds`). One replica: ``f = min(λ, 1)`` iterations of ``max(λ, 1)`` whole
    prompts. Replicas in lockstep: the slowest sets every iteration's time, so some replica starts
    prompts on ``1 - P(0)^R`` of the iterations, and the slowest starts ``E[max]`` in all."""
    c, slowest, _ = law
    lam = np.broadcast_arrays(np.asarray(starts, dtype=float), np.asarray(replicas))[0]
    lock = (np.broadcast_to(replicas, lam.shape) > 1) & (lam > 0)
    some = np.clip(1 - slowest[:, 0], np.finfo(float).tiny, 1.0)
    share = np.where(lock, some, np.minimum(lam, 1.0))
    prompts = np.where(lock, np.maximum(np.sum(c * slowest, axis=1) / some, 1.0), np.maximum(lam, 1.0))
    return share, prompts


def per_count(
    engine: Engine,
    counts: np.ndarray,
    pieces: list[ArrayLike],
    slots: np.ndarray,
    p: np.ndarray,
    context: np.ndarray,
    prompt_cv: ArrayLike,
    chunks: ArrayLike = 1.0,
) -> dict[str, np.ndarray]:
    """Iterations of each of ``counts`` prompt chunks (``1 / chunks`` of a prompt each, a whole prompt
    where it fits the budget), one of them carrying each of ``pieces`` (a share of the prompt:
    :func:`chunk_pieces`), beside the ``slots - c`` slots that decode, priced by one
    :func:`iteration_time` call: its outputs shaped ``(pieces, designs, counts)``."""
    rows, k = np.broadcast(slots, p, context, chunks).size, len(pieces)
    at = np.tile(np.repeat(np.arange(rows), counts.size), k)

    def each(v: ArrayLike) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype=float), (rows,))[at]

    def per_row(v: ArrayLike) -> np.ndarray:
        return np.repeat(np.broadcast_to(np.asarray(v, dtype=float), (rows,)), counts.size)

    unit = 1 / each(chunks)
    units = np.tile(counts.astype(float), rows * k)
    own = np.concatenate([per_row(piece) for piece in pieces])
    prompts = units * unit + np.where(units > 0, own - unit, 0.0)
    queries = np.maximum(each(slots) - units, np.where(units > 0, 0.0, 1.0))  # the slots running no chunk
    timing = iteration_time(engine.select(at), queries, prompts, each(p), each(context), each(prompt_cv))
    return {name: timing[name].reshape(k, rows, counts.size) for name in ("time_s", *SHARES.values())}


def normalized(weight: np.ndarray) -> np.ndarray:
    """``weight`` over each design's counts, summing to 1 (0 where it has none)."""
    return weight / np.maximum(weight.sum(axis=1, keepdims=True), np.finfo(float).tiny)


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


class Flight(NamedTuple):
    """``b`` requests of ``p`` + ``o`` tokens in flight (:func:`in_flight`): the ``chunks`` a prompt
    takes, the ``life`` of a request (its chunks, then ``o - 1`` decode iterations), the ``replicas``
    in lockstep, the :func:`start_law` of chunks an iteration starts, a decode step's mean ``context``
    and a prompt's ``pieces`` (:func:`chunk_pieces`)."""

    b: np.ndarray
    p: np.ndarray
    o: np.ndarray
    chunks: np.ndarray
    life: np.ndarray
    replicas: np.ndarray
    law: tuple[np.ndarray, np.ndarray, np.ndarray]
    context: np.ndarray
    pieces: list[tuple[str, np.ndarray, np.ndarray]]


def in_flight(
    engine: Engine, batch: ArrayLike, prompt: ArrayLike, output: ArrayLike, output_cv: ArrayLike = 0.0
) -> Flight:
    """``batch`` requests of ``prompt`` + ``output`` tokens in flight: what :func:`steady_state` and
    :func:`iteration_kinds` both read of them."""
    b, p, o = (np.asarray(v, dtype=float) for v in (batch, prompt, output))
    chunks = chunks_beside_decode(engine, b, p)
    life = o + chunks - 1
    replicas = synchronized_replicas(engine)
    law = start_law(b, life / chunks, replicas, chunk_room(engine, b, p, chunks))
    context, pieces = mean_context(p, o, output_cv), chunk_pieces(engine, b, p, chunks)
    return Flight(b, p, o, chunks, life, replicas, law, context, pieces)


def steady_state(engine: Engine, batch: ArrayLike, prompt: ArrayLike, output: ArrayLike, prompt_cv: ArrayLike = 0.0,
                 output_cv: ArrayLike = 0.0) -> dict[str, Any]:  # fmt: skip
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
    All three are means over one law of how many chunks an iteration starts (:func:`start_law`), each
    count priced as its own iteration (:func:`per_count`): an iteration's time is not affine in its
    chunks (a GEMM's tiles, attention's), so pricing the mean count alone put Llama 3 70B on four
    H200s 7% fast at 256 in flight, where its tokens came 7% apart. ``starts``: the counts, their
    shares of the iterations and their times, per design; ``prompt_chunks``, the iterations a prompt
    takes (:func:`chunks_beside_decode`)."""
    b, p, o, chunks, life, replicas, law, context, pieces = in_flight(
        engine, batch, prompt, output, output_cv
    )
    starts = b / life
    # The iterations as they come (the slowest replica's count of chunks), as a request's chunks ride
    # them and as it decodes in them: one law for the three, so that a request's time in flight, its
    # first token and its decode, is what the throughput says (Little's law: B = requests/s x time).
    riding, decoding = request_iterations(law, b, replicas)
    weights = [normalized(w) for w in (law[1], riding, decoding)]
    held = np.any([np.any(w > 1e-6, axis=0) for w in weights], axis=0)
    counts = law[0][held]
    timing = per_count(engine, counts, [piece for _, piece, _ in pieces], b, p, context, prompt_cv, chunks)
    odds = [each_odds for *_, each_odds in pieces]

    def over(weight: np.ndarray, name: str) -> np.ndarray:
        """``name``'s mean over the iterations ``weight`` weighs, each piece at its odds."""
        return sum(
            share * np.sum(weight[:, held] * t, axis=1) for share, t in zip(odds, timing[name], strict=True)
        )

    mean, first, between = (over(w, "time_s") for w in weights)
    by_count = sum(np.asarray(share)[..., None] * t for share, t in zip(odds, timing["time_s"], strict=True))
    return {
        "ttft_s": first * chunks,
        "tpot_s": np.where(o > 1, between, mean),
        "iteration_s": mean,
        "output_tokens_per_s": starts * o / mean,
        "requests_per_s": starts / mean,
        **{share_of: over(weights[0], name) / mean for share_of, name in SHARES.items()},
        "starts": (counts, weights[0][:, held], by_count),
        "prompt_chunks": chunks,
    }


def iteration_kinds(engine: Engine, batch: ArrayLike, prompt: ArrayLike, output: ArrayLike,
                    prompt_cv: ArrayLike = 0.0, output_cv: ArrayLike = 0.0) -> list[tuple]:  # fmt: skip
    """Iterations for a person to read (:func:`iteration_table`): those starting the two whole numbers
    of chunks around the mean count (the slowest replica's, :func:`slowest_replica_starts`), mixed to
    it, and those that only decode, each ``(kind, share, decode queries, chunks, the named chunk's
    tokens, its iteration_time)``. With starts spread as :func:`start_law` spreads them, the mean
    iteration is that law's (:func:`steady_state`'s ``starts``), not this mixture's."""
    b, p, _, chunks, life, replicas, law, context, pieces = in_flight(
        engine, batch, prompt, output, output_cv
    )
    share, prompts = _slowest_of(law, b / life * chunks, replicas)
    decode = iteration_time(engine, np.maximum(b, 1.0), np.zeros_like(b), p, context)
    # The two whole numbers of chunks around the mean (a fraction of a chunk would cut the GEMMs'
    # tiles at a token count no iteration has), one of them a full chunk or a last.
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
    return kinds


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


def iteration_table(engine: Engine, batch: ArrayLike, prompt: ArrayLike, output: ArrayLike, prompt_cv: ArrayLike = 0.0,
                    output_cv: ArrayLike = 0.0) -> dict[str, list[dict[str, object]]]:  # fmt: skip
    """The first design's steady-state iterations at ``batch`` in flight: ``kernels``, each kind of
    :func:`iteration_kinds` that occurs, with its ``share``, decode ``queries`` and ``prompts``, one
    layer's kernels for one micro-batch (:func:`~commodel.workloads.layer.kernel_rows.kernel_row`,
    ``calls`` per layer, ``ms`` per layer), the last stage's ``logits``, and what
    :func:`iteration_time` adds up from them: ``stage_layers``, ``pp``, ``comm_ms``, ``host_ms``,
    ``time_ms``; and ``starts``, the law's counts of chunks an iteration starts with their shares and
    times, whose mean is :func:`steady_state`'s mean iteration."""
    gpu, first = engine.cluster.gpu, first_design
    kinds = []
    for kind, share, queries, prompts, chunk, timing in iteration_kinds(
        engine, batch, prompt, output, prompt_cv, output_cv
    ):
        if not first(share) > 0:
            continue
        (logits, logits_s), layer = timing["logits"], timing["layer"]
        priced = [(k, n, first(seconds)) for k, calls, seconds in layer if (n := first(calls)) > 0]
        kinds.append({
            "iteration": kind, "share": first(share), "queries": first(queries), "prompts": first(prompts),
            "prompt": first(prompt), "chunk": first(chunk), "pp": int(first(engine.pp)), "stage_layers": int(np.ceil(engine.model.layers / first(engine.pp))),
            "kernels": [{**kernel_row(gpu, k, t), "calls": calls, "ms": 1e3 * calls * t} for k, calls, t in priced],
            "logits": {**kernel_row(gpu, logits, logits_s), "calls": 1.0, "ms": 1e3 * first(logits_s)},
            **{f"{name}_ms": 1e3 * first(timing[f"{name}_s"]) for name in ("comm", "host", "time")},
        })  # fmt: skip
    counts, shares, times = steady_state(engine, batch, prompt, output, prompt_cv, output_cv)["starts"]
    starts = [{"chunks": int(c), "share": float(w), "time_ms": 1e3 * float(t)}
              for c, w, t in zip(counts, shares[0], times[0], strict=True) if w > 0]  # fmt: skip
    return {"kernels": kinds, "starts": starts}
