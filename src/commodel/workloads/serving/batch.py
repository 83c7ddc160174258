"""How a serving deployment's batch is decided beyond one replica's steady state
(:mod:`commodel.workloads.serving.engine`): prefill and decode on separate pools (:func:`disaggregated`),
one of those pools alone (:func:`one_phase`), and the largest batch a latency SLO allows
(:func:`slo_batch`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from commodel.workloads.serving.continuous import prompt_chunks, steady_state
from commodel.workloads.serving.engine import Engine, iteration_time
from commodel.workloads.serving.memory import capacity, kv_bytes_per_sequence

#: Regula falsi steps that match a disaggregated decode pool's batch to the requests it is sent.
DECODE_BATCH_STEPS = 8

#: What a replica runs: both phases (continuous batching), or one of them alone.
PHASES = ("both", "prefill", "decode")


def prompt_pass(engine: Engine, prompts: np.ndarray, prompt: np.ndarray) -> dict[str, np.ndarray]:
    """The prompt-only iterations that carry ``prompts`` whole prompts of ``prompt`` tokens to their
    first tokens (:func:`~commodel.workloads.serving.engine.iteration_time`), their seconds and bytes
    summed. A prompt beyond the token budget ``M`` runs as ``k`` chunks
    (:func:`~commodel.workloads.serving.continuous.prompt_chunks`): ``k - 1`` iterations of ``M`` tokens and
    one of the rest, each reading the weights and paying the iteration's fixed costs, each with its
    tokens' share of the prompt's causal attention (the chunks' attention against their prefixes
    adds up to the whole)."""
    chunks = prompt_chunks(engine, prompt)
    full = np.minimum(engine.max_num_tokens, prompt)

    def iteration(tokens: np.ndarray) -> dict:
        return iteration_time(engine, np.zeros_like(prompts), prompts * tokens / prompt, prompt, prompt)

    last = iteration(prompt - (chunks - 1) * full)
    if not np.any(chunks > 1):
        return last
    before = iteration(full)
    return {name: (chunks - 1) * before[name] + last[name] for name in ITERATION_SUMS}


#: What :func:`prompt_pass` adds up over a prompt's iterations.
ITERATION_SUMS = ("time_s", "compute_s", "comm_s", "host_s", "compute_bound_s", "hbm_bytes")


def prefill_prompts(engine: Engine, prompt: np.ndarray) -> np.ndarray:
    """Whole prompts a prefill iteration holds: as many as the token budget takes, at least one (a
    longer one in chunks, :func:`prompt_pass`)."""
    return np.maximum(np.floor(engine.max_num_tokens / prompt), 1.0)


def decode_iteration(engine: Engine, batch: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> dict:
    """A decode-only iteration of ``batch`` queries over the mean context ``p + o / 2``."""
    return iteration_time(engine, batch, np.zeros_like(batch), prompt, prompt + output / 2)


def one_phase(
    engine: Engine, phase: str, batch: ArrayLike, prompt: ArrayLike, output: ArrayLike
) -> dict[str, np.ndarray]:
    """One phase alone on every replica, as a prefill/decode-disaggregated pool runs it with the
    other pool never short of work (what a profile of one phase reports): ``prefill``, iterations of
    ``batch`` whole prompts (one beyond the token budget in chunks, :func:`prompt_pass`), each
    request's first token at its last iteration's end; ``decode``, iterations
    of ``batch`` queries (:func:`decode_iteration`), one token each, a request leaving after its
    ``o - 1`` tokens (its first is its prefill's: a decode pool takes ``o >= 2``)."""
    p, o, b = (np.asarray(v, dtype=float) for v in (prompt, output, batch))
    if phase == "prefill":
        it = prompt_pass(engine, b, p)
        t = it["time_s"]
        rates = {"requests_per_s": b / t, "output_tokens_per_s": b / t, "ttft_s": t,
                 "tpot_s": np.full_like(t, np.nan)}  # fmt: skip
    else:
        it = decode_iteration(engine, b, p, o)
        t = it["time_s"]
        rates = {"requests_per_s": b / ((o - 1) * t), "output_tokens_per_s": b / t, "ttft_s": np.full_like(t, np.nan),
                 "tpot_s": t}  # fmt: skip
    return rates | {
        "prompt_chunks": prompt_chunks(engine, p) if phase == "prefill" else np.zeros_like(t),
        "iteration_s": t, "comm_share": it["comm_s"] / t, "host_share": it["host_s"] / t,
        "compute_bound_share": it["compute_bound_s"] / t, "hbm_Bps": it["hbm_bytes"] / t,
    }  # fmt: skip


def fed_batch(
    held: Callable[[np.ndarray], np.ndarray], largest: np.ndarray, held_at_largest: np.ndarray
) -> np.ndarray:
    """The batch ``b`` a decode pool runs when fed a steady rate of requests: Little's law,
    ``b = held(b)`` (the rate times a request's time in the pool, which grows with ``b``), between one
    request and the ``largest`` (which holds what it is fed: ``held(largest) <= largest``). Solved by
    regula falsi with the Illinois step, :data:`DECODE_BATCH_STEPS` evaluations, where the plain
    fixed-point iteration crawls when a request's time grows almost as fast as the batch."""
    lo, hi = np.ones_like(largest), np.asarray(largest, dtype=float)
    g_lo, g_hi = lo - held(lo), hi - held_at_largest  # g(b) = b - held(b), from < 0 at lo to >= 0 at hi
    enough = g_lo >= 0  # one request holds what the pool is fed
    if np.all(enough):
        return lo
    b, last = hi, np.zeros_like(hi)
    for _ in range(DECODE_BATCH_STEPS):
        span = g_hi - g_lo
        b = np.where(span > 0, (lo * g_hi - hi * g_lo) / np.where(span > 0, span, 1.0), hi)
        g = b - held(b)
        low = g < 0
        lo, g_lo = np.where(low, b, lo), np.where(low, g, g_lo)
        hi, g_hi = np.where(low, hi, b), np.where(low, g_hi, g)
        g_hi = np.where(low & (last < 0), g_hi / 2, g_hi)  # Illinois: the end kept twice weighs half
        g_lo = np.where(~low & (last > 0), g_lo / 2, g_lo)
        last = np.where(low, -1.0, 1.0)
    return np.where(enough, 1.0, np.clip(b, 1.0, largest))


def disaggregated(
    engine: Engine, prefill: ArrayLike, decode: ArrayLike, prompt: ArrayLike, output: ArrayLike
) -> dict[str, np.ndarray]:
    """Prefill and decode on separate replicas (``prefill`` and ``decode`` of them), the KV cache of
    each prompt sent from one to the other over the network.

    Prefill replicas run prompt-only iterations of as many whole prompts as the token budget holds
    (one beyond it in chunks, :func:`prompt_pass`);
    each request's KV cache (all its GPUs' shards, sent in parallel over their NIC shares) then moves
    to a decode replica, which runs decode-only iterations. Requests flow at the slower pool's rate;
    a decode pool that could take more runs a smaller batch, rate x per-token time x output tokens
    (:func:`fed_batch`). Time to first token = the prefill pool's iterations + KV transfer; time per
    output token = the decode iteration.
    """
    p, o = np.asarray(prompt, dtype=float), np.asarray(output, dtype=float)
    prefill, decode = np.asarray(prefill, dtype=float), np.asarray(decode, dtype=float)
    prompts = prefill_prompts(engine, p)
    first = prompt_pass(engine, prompts, p)
    t_prefill = first["time_s"]
    prefill_rate = prefill * prompts / t_prefill
    kv = kv_bytes_per_sequence(engine.model, p, engine.tp, engine.pp, engine.kv_dtype)
    fab = engine.fabric
    nic_share = fab.nics_per_domain * fab.nic_Bps / fab.domain
    transfer = kv / nic_share + fab.net_latency_s
    largest = np.maximum(capacity(engine, p, o)["max_batch"], 1.0)
    t_full = decode_iteration(engine, largest, p, o)["time_s"]
    decode_rate = decode * largest / (np.maximum(o - 1, 1) * t_full)
    rate = np.minimum(prefill_rate, decode_rate)
    per_replica = rate / decode * np.maximum(o - 1, 1)  # requests in flight per second of a token
    batch = fed_batch(
        lambda b: per_replica * decode_iteration(engine, b, p, o)["time_s"], largest, t_full * per_replica
    )
    final = decode_iteration(engine, batch, p, o)
    tpot = final["time_s"]
    busy_prefill = rate / prefill_rate  # the prefill pool idles between prompts when decode bounds

    def per_second(name: str) -> np.ndarray:  # per GPU, over both pools
        pools = busy_prefill * first[name] / t_prefill * prefill + final[name] / tpot * decode
        return pools / (prefill + decode)

    return {
        "ttft_s": t_prefill + transfer,
        "tpot_s": tpot,
        "iteration_s": tpot,  # the decode pool's
        "prompt_chunks": prompt_chunks(engine, p),  # the prefill pool's
        "comm_share": final["comm_s"] / tpot,
        "host_share": final["host_s"] / tpot,
        "compute_bound_share": per_second("compute_bound_s"),
        "hbm_Bps": per_second("hbm_bytes"),
        "requests_per_s": rate,
        "output_tokens_per_s": rate * o,
        "decode_batch": batch,
        "kv_transfer_s": transfer,
        "bound": np.where(prefill_rate < decode_rate, "prefill", "decode"),
    }


#: Batches tried when a latency SLO chooses the batch: steps of 2^(1/4) from 1 to the limit.
SLO_STEPS_PER_DOUBLING = 4


def slo_batch(
    engine: Engine,
    limit: ArrayLike,
    prompt: ArrayLike,
    output: ArrayLike,
    ttft: ArrayLike,
    tpot: ArrayLike,
    prompt_cv: ArrayLike = 0.0,
    output_cv: ArrayLike = 0.0,
) -> np.ndarray:
    """The largest batch (at most ``limit``, on a grid of :data:`SLO_STEPS_PER_DOUBLING` steps per
    doubling) whose first-token and per-token times meet the SLO; 0 where one request misses it."""
    limit = np.asarray(limit, dtype=float)
    rows = limit.size
    doublings = np.log2(max(float(limit.max()), 1.0))
    grid = np.unique(
        np.floor(2 ** (np.arange(doublings * SLO_STEPS_PER_DOUBLING + 1) / SLO_STEPS_PER_DOUBLING))
    )
    batch = np.minimum(grid[None, :], limit[:, None]).ravel()  # rows x grid, row-major

    def per_point(values: ArrayLike) -> np.ndarray:
        return np.repeat(np.broadcast_to(np.asarray(values, dtype=float), (rows,)), grid.size)

    r = steady_state(
        engine.repeated(grid.size), np.maximum(batch, 1.0), per_point(prompt), per_point(output),
        per_point(prompt_cv), per_point(output_cv),
    )  # fmt: skip
    ok = (r["ttft_s"] <= per_point(ttft)) & (r["tpot_s"] <= per_point(tpot)) & (batch >= 1)
    return np.where(ok, batch, 0.0).reshape(rows, grid.size).max(axis=1)
