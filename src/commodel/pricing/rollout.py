"""The ``rollout`` evaluator: an RL post-training job beside a serving cluster, one policy per row,
over a day of online load (:mod:`commodel.ops.rl_rollout`).

Every priced piece comes from the other models: an RL replica's time per token at each batch and its
slots (:mod:`commodel.workloads.serving.engine`, KV for a prompt and the longest response), a serving
replica's largest batch under the time-per-token SLO and its time per token there, the policy update
(:func:`commodel.pricing.run.train` on the RL cluster, FSDP, x ``TRAIN_PASSES``), and the weight
transfers over the cross-cluster link. The day is sampled every ``24 / hours`` hours; each sample is
one RL step at that hour's load, with its own seeded response lengths. An agent's responses are
episodes of turns (``turn_tokens``, ``max_turns``, ``observation``, ``env_step_s``:
:class:`~commodel.ops.rl_rollout.Turns`), whose observations the KV cache and the update hold too.
Outputs are day means.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Annotated

import numpy as np
from pydantic import Field, model_validator

from commodel.compute.precision import serving_precision
from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.ops.rl_rollout import (
    ALGORITHMS,
    ASYNC_SPLITS,
    POLICIES,
    SINGLE_TURN,
    SPARSE_BYTES,
    SPARSE_SHARE,
    TRAIN_PASSES,
    Setup,
    Turns,
    dapo_rounds,
    lending_s,
    load_share,
    peak_tpot,
    response_lengths,
    rollout_phase,
    step_seconds,
    weight_sync_s,
)
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import MAX_GPUS, MODEL, SYSTEM, Choices, Job
from commodel.pricing.run import train
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.model.transformer import parameters
from commodel.workloads.serving.batch import slo_batch
from commodel.workloads.serving.continuous import steady_state
from commodel.workloads.serving.engine import Engine
from commodel.workloads.serving.memory import capacity


class RolloutJob(Job):
    """An RL post-training job beside a serving cluster, its rollouts run by one policy."""

    noun = "rollout"
    together = ("load_low", "load_high", "max_turns", "turn_tokens", "rl_gpus", "serve_gpus", "tp")
    model: Annotated[str, MODEL] = Field("llama3-8b", description="The policy model.")
    system: Annotated[str, SYSTEM] = Field("dgx-h100", description="System (node) name of both clusters.")
    policy: Annotated[str, Choices("RL rollout policy", POLICIES)] = Field(
        description="fixed (ROLL), elastic (RLBoost+-like), rose or async (AReaL-like, at its best split)."
    )
    rl_gpus: int = Field(32, ge=1, le=MAX_GPUS, description="GPUs of the RL cluster.")
    serve_gpus: int = Field(64, ge=1, le=MAX_GPUS, description="GPUs of the serving cluster.")
    tp: int = Field(1, ge=1, description="Tensor-parallel size of a replica.")
    samples: int = Field(
        4096,
        ge=1,
        le=200_000,
        description="Rollouts per RL step (prompts x group; ROSE's 8B runs: 256 x 16).",
    )
    algorithm: Annotated[str, Choices("RL algorithm", ALGORITHMS)] = Field(
        "grpo",
        description="grpo (one batch per step) or dapo (dynamic sampling: rounds until the batch is full).",
    )
    group: int = Field(16, ge=1, le=1024, description="Responses per prompt (GRPO's group).")
    keep_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="DAPO: share of groups whose rewards differ (kept); the rest are generated again.",
    )
    prompt: int = Field(512, ge=1, description="Prompt tokens per rollout.")
    median_response: float = Field(1024, ge=1, description="Median response tokens.")
    tail_sigma: float = Field(1.0, gt=0, description="Lognormal spread of response lengths.")
    longest: int = Field(16384, ge=1, description="Longest response, tokens.")
    turn_tokens: int = Field(
        0,
        ge=0,
        description="Most tokens one turn of an agent's episode generates (FrozenLake as ROLL runs it: 128); "
        "0: one turn, the whole response.",
    )
    max_turns: int = Field(
        1,
        ge=1,
        le=1000,
        description="Most turns an episode takes (FrozenLake: 10 actions; ALFWorld: 50 steps).",
    )
    observation: int = Field(
        0, ge=0, description="Tokens the environment answers each turn with (prefilled before the next turn)."
    )
    env_step_s: float = Field(
        0.0, ge=0, description="Seconds the environment takes per step, between two turns of an episode."
    )
    online_prompt: int = Field(1024, ge=1, description="Prompt tokens of an online request.")
    online_output: int = Field(256, ge=1, description="Output tokens of an online request.")
    slo_tpot: float = Field(0.05, gt=0, description="Serving's time-per-output-token SLO, seconds.")
    load_low: float = Field(
        0.3, gt=0, lt=1, description="Lowest online load of the day, a share of SLO capacity."
    )
    load_high: float = Field(
        0.9, gt=0, lt=1, description="Highest online load of the day, a share of SLO capacity."
    )
    link_GBps: float = Field(50.0, gt=0, description="Cross-cluster link for weights, GB/s.")
    concurrency: int = Field(
        16,
        ge=0,
        description="Rollouts in flight per RL GPU at most (ROSE's runs: 16; 0: what the KV cache holds).",
    )
    activation_s: float = Field(
        5.0,
        ge=0,
        description="Seconds ROSE takes to activate the rollout model on a serving GPU (the paper: within 5 s).",
    )
    cold_start_s: float = Field(
        60.0,
        ge=0,
        description="Seconds an elastic replica's engine takes to start (assumed: about a minute).",
    )
    minute_peak: float = Field(
        1.7, ge=1, description="Per-minute peak of online load over the hour's mean (the paper's trace: 1.7)."
    )
    hours: int = Field(8, ge=1, le=48, description="Samples of the day (one RL step each).")
    seed: int = Field(0, ge=0, description="Seed of the response lengths.")

    @model_validator(mode="after")
    def _loads(self) -> RolloutJob:
        if self.load_low > self.load_high:
            raise ValueError("rollout load shares need load_low <= load_high (shares of the SLO capacity)")
        for pool in ("rl_gpus", "serve_gpus"):
            if getattr(self, pool) < self.tp:
                raise ValueError(f"{pool} ({getattr(self, pool)}) hold no replica of tp ({self.tp}) GPUs")
        if self.max_turns > 1 and not self.turn_tokens:
            raise ValueError(
                "an episode of several turns needs turn_tokens, the most tokens one turn generates"
            )
        return self


OUTPUTS = (
    "samples_per_hour",
    "step_s",
    "rollout_s",
    "train_s",
    "weight_sync_s",
    "serving_slots",
    "online_tpot_s",
    "allocation_overhead_pct",
    "rounds",
    "problem",
    "valid",
)


@cache
def rl_setup(
    model: str, system: str, rl_gpus: int, serve_gpus: int, tp: int, samples: int, prompt: int,
    median: int, sigma: float, longest: int, online_prompt: int, online_output: int, slo_tpot: float, link_GBps: float,
    concurrency: int = 0, activation_s: float = 5.0, cold_start_s: float = 60.0, train_gpus: int = 0,
    turns: Turns = SINGLE_TURN, observation: int = 0,
) -> Setup:  # fmt: skip
    """The priced pieces of an RL job beside a serving cluster (module docstring); the update trains
    on ``train_gpus`` (default: the ``rl_gpus`` that generate). An episode of several ``turns`` holds
    its generated tokens and, after each turn but the last, the environment's ``observation``: its KV
    cache and its training sequence; the longest episode, and an online request, must fit the model's
    context."""
    net, c = get_model(model), cluster(system)

    def engine(replicas: int = 1) -> Engine:
        ones = np.ones(replicas)
        return Engine(net, c, serving_precision("bf16", c.gpu), "bf16", tp * ones, ones, ones,
                      2048 * ones, 8192 * ones, 0.9 * ones)  # fmt: skip

    episode = prompt + longest + (int(turns.count(float(longest))) - 1) * observation
    for what, tokens in (("a rollout's prompt, longest response and observations", episode),
                         ("an online request's prompt and output", online_prompt + online_output)):  # fmt: skip
        if tokens > (net.context or np.inf):
            raise CommodelError(
                f"{what} ({tokens:,} tokens) exceed {model}'s context of {net.context:,} tokens"
            )
    mean = min(float(np.exp(sigma**2 / 2) * median), longest)  # the lognormal's mean
    generated = float(turns.generated(mean))
    mean_len = generated + (float(turns.count(generated)) - 1) * observation
    rollout = capacity(engine(), prompt, int(mean_len))
    rl_slots = int(rollout["max_batch"][0])
    if rl_slots < 1:
        raise CommodelError(
            f"{model} at tp {tp} leaves no room for one rollout's KV cache beside its BF16 weights on "
            f"{c.gpu.description}: give a larger tp"
        )
    if concurrency:
        rl_slots = min(rl_slots, concurrency * tp)

    def per_batch(prompt_len: int, output_len: float, slots: int) -> list[Callable[[np.ndarray], np.ndarray]]:
        """(The mean iteration, a request's time per output token) at a batch of up to ``slots``."""
        grid = np.arange(1, max(slots, 1) + 1, dtype=float)
        state = steady_state(engine(grid.size), grid, prompt_len, output_len)
        return [lambda b, v=state[name]: np.interp(b, grid, v) for name in ("iteration_s", "tpot_s")]

    online = capacity(engine(), online_prompt, online_output)
    batch = slo_batch(engine(), online["max_batch"], online_prompt, online_output, np.inf, slo_tpot)[0]
    job = train(model=model, system=system, gpus=train_gpus or rl_gpus, tp=tp, global_batch=samples,
                seq=int(prompt + mean_len), zero=3, recompute="auto")  # fmt: skip
    if not job["fits"]:
        raise CommodelError(
            f"{model}'s update does not fit {job['gpus']} training GPUs at tp {tp}, recomputing every layer: "
            f"{job['memory_per_gpu_bytes'] / 2**30:.0f} GiB per GPU"
        )
    weights = parameters(net)["total"]
    serve_iteration, serve_tpot = per_batch(online_prompt, online_output, int(online["max_batch"][0]))
    return Setup(
        rl_iteration=per_batch(prompt, mean_len, rl_slots)[0],
        rl_slots=rl_slots,
        rl_replicas=rl_gpus // tp,
        activation_s=activation_s,
        cold_start_s=cold_start_s,
        serve_replicas=serve_gpus // tp,
        serve_iteration=serve_iteration,
        serve_tpot=serve_tpot,
        slo_batch=float(batch),
        spare_kv_slots=float(rollout["kv_batch"][0]),
        train_s=TRAIN_PASSES * job["step_time_s"],
        dense_s=2 * weights / (link_GBps * 1e9),
        sparse_s=SPARSE_SHARE * SPARSE_BYTES * weights / (link_GBps * 1e9),
    )


def setup_of(row: object, rl_gpus: int, train_gpus: int = 0) -> Setup:
    """The priced pieces of ``row``'s job with ``rl_gpus`` RL GPUs generating, ``train_gpus`` (default:
    the same) training."""
    return rl_setup(
        row.model, row.system, rl_gpus, int(row.serve_gpus), int(row.tp), int(row.samples),
        int(row.prompt), int(row.median_response), float(row.tail_sigma), int(row.longest), int(row.online_prompt),
        int(row.online_output), float(row.slo_tpot), float(row.link_GBps), int(row.concurrency),
        float(row.activation_s), float(row.cold_start_s), train_gpus, turns_of(row), int(row.observation),
    )  # fmt: skip


def turns_of(row: object) -> Turns:
    """A row's episodes: one turn, the whole response, unless ``turn_tokens`` caps a turn."""
    cap = int(row.turn_tokens) or float("inf")
    return Turns(float(cap), int(row.max_turns), float(row.env_step_s))


def async_setups(row: object) -> list[Setup]:
    """An asynchronous run's setups, one per split of :data:`~commodel.ops.rl_rollout.ASYNC_SPLITS`
    its GPUs allow (whole replicas generating, a training batch the rest divide): the generating GPUs'
    rollout with the training GPUs' update."""
    rl, tp, setups = int(row.rl_gpus), int(row.tp), []
    for share in ASYNC_SPLITS:
        generating = int(share * rl) // tp * tp
        if 0 < generating < rl:
            try:
                setups.append(setup_of(row, generating, rl - generating))
            except CommodelError:  # the training GPUs do not divide the batch, or cannot hold the update
                continue
    if not setups:
        raise CommodelError(
            f"no split of {rl} RL GPUs into generating replicas and a trainer that divides the batch and holds "
            "the update"
        )
    return setups


def day(row: object) -> dict[str, float]:
    """Day means of one policy's RL steps (module docstring; an asynchronous run at its best split);
    the online time per token is the worst hour's at its per-minute peak
    (:func:`~commodel.ops.rl_rollout.peak_tpot`)."""
    if row.policy == "async":
        return max((day_of(row, s) for s in async_setups(row)), key=lambda d: d["samples_per_hour"])
    return day_of(row, setup_of(row, int(row.rl_gpus)))


def day_of(row: object, setup: Setup) -> dict[str, float]:
    """Day means of ``row``'s policy on ``setup``."""
    hours = np.arange(int(row.hours)) * 24 / int(row.hours)
    loads = load_share(hours, float(row.load_low), float(row.load_high))
    steps, rollouts, slots, online, rounds = [], [], [], [], []
    prompts = max(int(row.samples) // int(row.group), 1)
    for h, load in enumerate(loads):
        rng = np.random.default_rng([int(row.seed), h])
        rounds.append(dapo_rounds(prompts, float(row.keep_share), rng) if row.algorithm == "dapo" else 1)
        generated = []
        for r in range(rounds[-1]):  # each round new responses (round 0: the GRPO step's)
            seed = int(row.seed) * 1000 + h + 100_000 * r
            lengths = response_lengths(
                int(row.samples), row.median_response, row.tail_sigma, row.longest, seed
            )
            generated.append(rollout_phase(row.policy, setup, lengths, float(load), turns_of(row)))
        rollout = generated[0]
        steps.append(step_seconds(row.policy, sum(g.t_last for g in generated), setup.train_s))
        rollouts.append(sum(g.t_last for g in generated))
        spare = max((counts.get("serving spare", 0) for _, counts in rollout.timeline), default=0)
        slots.append(spare)
        online.append(
            peak_tpot(row.policy, setup, float(load), float(row.minute_peak), spare / setup.serve_replicas)
        )
    lending = lending_s(row.policy, setup)
    return {
        "samples_per_hour": float(np.mean(int(row.samples) * 3600 / np.array(steps))),
        "step_s": float(np.mean(steps)),
        "rollout_s": float(np.mean(rollouts)),
        "train_s": setup.train_s,
        "weight_sync_s": weight_sync_s(row.policy, setup),
        "serving_slots": float(np.mean(slots)),
        "online_tpot_s": max(online),
        "allocation_overhead_pct": 100 * lending / float(np.mean(steps)),
        "rounds": float(np.mean(rounds)),
    }


def rollout() -> Evaluator:
    return Evaluator.row_by_row(
        "rollout",
        "an RL post-training job beside a serving cluster, per rollout policy: samples per hour over a day",
        RolloutJob,
        OUTPUTS,
        day,
        text=("problem",),
    )
