"""RL post-training whose rollouts may run on a serving cluster's spare capacity (ROSE, Gao et al.,
arXiv:2605.06534), against a resource-fixed and an instance-elastic baseline.

**One RL step**: ``n`` responses are generated (rollout), then the policy trains on them (GRPO: one
update and two forward passes, :data:`TRAIN_PASSES` training steps' worth of FLOPs), then the new
weights reach every GPU that generates. Response lengths are long-tailed: lognormal with a median and
a shape ``sigma``, cut at a maximum (:func:`response_lengths`, seeded).

**Rollout** (:func:`simulate_rollout`, stepped, with each request's end at its exact time, and
deterministic): pools of generation slots,
each slot advancing one token per iteration of its pool, the iteration time a function of the pool's
requests in flight per replica (the serving model's time per output token at that batch); slots are
what the KV cache holds at the mean response (paged, allocated as tokens come). A request keeps its
slot until it ends. An agent's episode (:class:`Turns`: FrozenLake's actions, ALFWorld's environment
steps) generates its tokens in turns, the environment stepping between them while the trajectory holds
its slot out of the batch: the episode's time is its turns' decoding, their prefills and the
environment's steps, in sequence, however few tokens each turn generates.

**Serving cluster**: online traffic at a share ``u(t)`` of its capacity under a time-per-token SLO
(:func:`load_share`, a daily sinusoid between a low and a high share); each replica serves at most
``B_slo`` requests (the largest batch meeting the SLO, from the serving model), online ones taking
``u B_slo`` of them.

**Policies**:

- ``fixed``: rollout on the RL cluster's replicas only (ROLL's colocated GRPO).
- ``async`` (AReaL-like, fully asynchronous): part of the RL GPUs generate while the rest train on the
  previous step's samples (one step stale); a step takes the slower of the two
  (:data:`ASYNC_SPLITS`: the split is the run's best).
- ``elastic`` (RLBoost+-like): the serving replicas online traffic does not need (``floor((1 - u)
  R_serve)``, online requests packed onto the rest at the SLO batch) are lent whole, each step after
  an engine cold start and a dense weight transfer (BF16 weights over the cross-cluster link).
- ``rose``: every serving replica co-serves rollouts in its spare slots and KV cache: beside its
  ``u B_slo`` online requests, at most ``(1 - u) B_slo`` rollouts, so its batch stays at the SLO
  batch at the hour's mean load; a burst above it halves the rollouts' share at once (ROSE's KV
  budget cut), and whether online requests then meet the SLO is checked, not assumed
  (:func:`peak_tpot`, for every policy). Lending starts after a sparse weight transfer (the changed
  share of the weights, index and value) and its rebuild; the activation before it (remapping the
  rollout model's pages and loading its weights) runs while the RL cluster trains the step before, and
  delays the rollout only by what it outlasts the update (:func:`lending_s`). Once nothing is
  queued, the RL cluster takes back, into its free slots, the requests that have run longest on
  serving slots (its elastic scheduler), so the long tail ends on lightly loaded replicas rather than
  at the SLO batch's pace (their KV caches, a few hundred MB, move in milliseconds and are not
  charged).

Every policy but ``async`` trains after its rollout: ``step = t_last + T_train``.

Requests go to the ready pool with the fewest requests per replica (online ones included), as a
least-loaded router does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from commodel.errors import unknown

POLICIES = ("fixed", "elastic", "rose", "async")

#: Shares of the RL GPUs an asynchronous run (AReaL) generates on, the rest training; the run is priced
#: at the best of them (the split AReaL leaves to its user).
ASYNC_SPLITS = (0.5, 0.625, 0.75, 0.875)

#: GRPO per step: a policy update (forward and backward: 3 units) and two forward passes (old and
#: reference log-probabilities: 1 unit each), in training steps: 5/3.
TRAIN_PASSES = 5 / 3

#: Share of BF16 weights an RL update changes per step (assumed; RL updates are sparse), each sent as
#: a 4-byte index and a 2-byte value.
SPARSE_SHARE = 0.05
SPARSE_BYTES = 6.0

#: Seconds a serving GPU takes to rebuild the rollout model's weights from a step's sparse deltas
#: (the paper's mechanism cost: COO-encoded deltas, rebuilt in about 1 s).
SPARSE_REBUILD_S = 1.0


def response_lengths(n: int, median: float, sigma: float, longest: float, seed: int) -> np.ndarray:
    """``n`` response lengths (tokens): lognormal with ``median`` and shape ``sigma``, at most ``longest``."""
    rng = np.random.default_rng(seed)
    return np.minimum(np.ceil(median * np.exp(sigma * rng.standard_normal(n))), longest)


def load_share(hour: np.ndarray, low: float, high: float) -> np.ndarray:
    """Online load as a share of the serving cluster's SLO capacity: lowest at 04:00, highest at 16:00."""
    return low + (high - low) * (1 - np.cos(2 * np.pi * (np.asarray(hour, dtype=float) - 4) / 24)) / 2


#: Tokens the fastest pool advances per simulation step; requests end at their exact time within a
#: step, and the ones queued or taken back into their slots are owed the time since (a resolution,
#: not a model constant: the pools' batches are held for a step).
QUANTUM_TOKENS = 128


@dataclass(frozen=True)
class Pool:
    """Generation slots: ``slots`` in all over ``replicas`` replicas, ready at ``start`` seconds, each
    replica already running ``base`` other requests (online traffic); ``iteration(b)`` is the seconds
    per token at ``b`` requests in flight per replica."""

    name: str
    slots: int
    replicas: float
    iteration: Callable[[np.ndarray], np.ndarray]
    start: float = 0.0
    base: float = 0.0


@dataclass(frozen=True)
class Rollout:
    """When each response ended and which pool ended it, the last end, and how many requests each pool
    ran over time (``timeline``: (seconds, counts per pool))."""

    finish: np.ndarray
    pool: np.ndarray
    t_last: float
    timeline: list[tuple[float, dict[str, int]]]


def _admit(
    queue: list[int],
    pools: list[Pool],
    where: np.ndarray,
    counts: np.ndarray,
    t: float,
    owed: np.ndarray,
    freed: list[np.ndarray],
) -> None:
    """Queued requests, in order, each to the ready pool with the fewest requests per replica (the
    first such pool on a tie), while slots are free. Pool ``p`` takes its ``j``-th request at
    ``counts_p / replicas_p + base_p + j / replicas_p`` requests per replica, so the requests go to
    the pools in the order of those levels, ties to the first pool: one sort admits them all. A
    request taking a slot that ended within the last step (``freed``: each pool's end times, earliest
    first) started there when it ended, as an engine refills a slot at its next iteration: it is owed
    the decoding time since (``owed``, a negative wait); the slots it takes leave ``freed``."""
    if not queue:
        return
    free = [p.slots - int(c) if p.start <= t else 0 for p, c in zip(pools, counts, strict=True)]
    admitted = min(len(queue), sum(max(f, 0) for f in free))
    if not admitted:
        return
    levels, owners = [], []
    for i, (pool, count, room) in enumerate(zip(pools, counts, free, strict=True)):
        if room > 0:
            steps = np.full(min(room, admitted), 1 / pool.replicas)
            steps[0] = float(count) / pool.replicas + pool.base
            levels.append(np.cumsum(steps))  # added up in turn, as one request at a time would
            owners.append(np.full(len(steps), i))
    level, owner = np.concatenate(levels), np.concatenate(owners)
    chosen = owner[np.lexsort((owner, level))[:admitted]]
    taken = np.array(queue[:admitted])
    where[taken] = chosen
    for i, ended in enumerate(freed):
        into = taken[chosen == i][: len(ended)]
        owed[into], freed[i] = ended[: len(into)] - t, ended[len(into) :]
    counts += np.bincount(chosen, minlength=len(pools))
    del queue[:admitted]


def _steal(
    pools: list[Pool],
    where: np.ndarray,
    counts: np.ndarray,
    generated: np.ndarray,
    t: float,
    owed: np.ndarray,
    freed: np.ndarray,
    rates: np.ndarray,
) -> None:
    """With nothing queued, the first pool (the RL cluster) takes back the requests that have run
    longest elsewhere into its free slots (the first listed of those that ran as long): the tail ends
    on its fast, lightly loaded replicas. A slot that ended within the last step (``freed``, its end
    times, earliest first) took its request back when it ended: the request is owed the time its
    faster pace there would have saved since, ``(t - end) (1 - r_old / r_RL)`` at the last step's
    ``rates``."""
    free = pools[0].slots - counts[0]
    elsewhere = np.flatnonzero(where > 0)
    if free <= 0 or not elsewhere.size:
        return
    moved = elsewhere[np.argsort(-generated[elsewhere], kind="stable")[:free]]
    early, ended = moved[: len(freed)], freed[: len(moved)]
    saved = (t - ended) * np.maximum(1 - rates[where[early]] / rates[0], 0.0)
    owed[early] = np.where(owed[early] > 0, owed[early], owed[early] - saved)  # not while on its environment
    counts -= np.bincount(where[moved], minlength=len(pools))
    where[moved] = 0
    counts[0] += moved.size


@dataclass(frozen=True)
class Turns:
    """Multi-turn episodes (an agent's trajectory: FrozenLake's actions, ALFWorld's environment steps):
    a trajectory's tokens are generated in turns of at most ``tokens`` each, at most ``most`` turns
    (its tokens beyond them are never generated); between two turns the environment steps for
    ``env_s`` seconds while the trajectory keeps its slot and its KV cache but is not in the batch,
    and each turn after the first prefills the environment's answer, which rides one iteration."""

    tokens: float = np.inf
    most: int = 1
    env_s: float = 0.0

    def generated(self, lengths: np.ndarray) -> np.ndarray:
        """The tokens each trajectory generates: its length, at most ``most`` turns of ``tokens``."""
        return np.minimum(np.asarray(lengths, dtype=float), self.tokens * self.most)

    def count(self, lengths: np.ndarray) -> np.ndarray:
        """Turns each trajectory takes."""
        return np.maximum(np.ceil(self.generated(lengths) / self.tokens), 1.0)


SINGLE_TURN = Turns()


def simulate_rollout(
    lengths: np.ndarray, pools: list[Pool], steal: bool = False, turns: Turns = SINGLE_TURN
) -> Rollout:
    """Generate ``lengths`` tokens per request on ``pools`` (module docstring), in steps of
    :data:`QUANTUM_TOKENS`, in ``turns`` (:class:`Turns`: a request waiting on its environment holds
    its slot, out of the batch, and resumes within the step its wait ends in; while every request
    waits, the step runs to the first one back); ``steal``: the RL cluster takes back the tail
    (:func:`_steal`)."""
    lengths = turns.generated(lengths)
    n = len(lengths)
    remaining = np.minimum(lengths, turns.tokens)  # tokens left in the current turn
    left, finish = lengths - remaining, np.full(n, np.nan)  # tokens of the turns after it
    # Seconds the environment still takes before the request decodes again; below zero, decoding time
    # the request is owed from the step its turn ended in (its environment stepped before that step's end).
    wait = np.zeros(n)
    where = np.full(n, -1)  # pool of each request in flight; -1 queued or done
    counts = np.zeros(len(pools), dtype=int)
    queue, t = list(range(n)), 0.0
    timeline: list[tuple[float, dict[str, int]]] = []
    freed: list[np.ndarray] = [np.empty(0)] * len(pools)  # when slots ended within the last step
    rates = np.ones(len(pools))  # each pool's tokens per second in the last step
    replicas, base = np.array([p.replicas for p in pools]), np.array([p.base for p in pools])
    unfinished = n
    while unfinished:
        _admit(queue, pools, where, counts, t, wait, freed)
        if steal and not queue:
            _steal(pools, where, counts, lengths - left - remaining, t, wait, freed[0], rates)
        timeline.append((t, {pool.name: int(c) for pool, c in zip(pools, counts, strict=True)}))
        active = np.flatnonzero(where >= 0)
        held, owner = wait[active], where[active]
        decoding = np.bincount(owner[held <= 0], minlength=len(pools))
        batch = decoding / replicas + base
        rates = np.array([1 / float(p.iteration(batch[i : i + 1])[0]) for i, p in enumerate(pools)])
        dt = QUANTUM_TOKENS / rates[counts > 0].max()
        if active.size and (held > 0).all():  # every request on its environment: to the first back
            dt = float(held.min())
        if queue:
            dt = min([dt] + [p.start - t for p in pools if p.start > t])
        rate = rates[owner]
        busy = np.maximum(dt - held, 0.0)  # the step's time each one decodes
        wait[active] = np.maximum(held - dt, 0.0)
        tokens = remaining[active]
        ending = tokens <= rate * busy
        ends = active[ending]
        at = t + dt - busy[ending] + tokens[ending] / rate[ending]
        more = left[ends] > 0
        finish[ends[~more]] = at[~more]
        nxt = ends[more]  # the next turn: the environment steps from the turn's end, then its prefill
        wait[nxt] = turns.env_s - (t + dt - at[more])
        turn = np.minimum(left[nxt], turns.tokens)
        left[nxt], remaining[nxt] = left[nxt] - turn, turn + 1.0
        going = ~ending
        remaining[active[going]] = tokens[going] - rate[going] * busy[going]
        done = ends[~more]
        unfinished -= done.size
        freed = [np.sort(at[~more][where[done] == i]) for i in range(len(pools))]
        counts -= np.bincount(where[done], minlength=len(pools))
        where[done] = -1
        t += dt
    timeline.append((t, {pool.name: 0 for pool in pools}))
    return Rollout(finish, where, float(np.max(finish)), timeline)


@dataclass(frozen=True)
class Setup:
    """An RL job beside a serving cluster: the priced pieces :func:`rl_hour` combines.

    ``rl_iteration`` and ``rl_slots``: an RL-cluster replica's mean iteration at a batch and its
    slots (KV for a prompt and the longest response); ``rl_replicas``; ``serve_replicas``;
    ``serve_iteration``, ``serve_tpot``, ``slo_batch``: a serving replica's mean iteration and an online
    request's time per output token at a batch (online request shapes), and its largest batch under
    the SLO; ``spare_kv_slots``: rollout requests one idle serving
    replica's KV cache holds;
    ``train_s``: the policy update; ``dense_s``, ``sparse_s``: weight transfers to the serving cluster;
    ``activation_s``: ROSE's lending activation, ``cold_start_s``: an elastic replica's engine start."""

    rl_iteration: Callable[[np.ndarray], np.ndarray]
    rl_slots: int
    rl_replicas: int
    activation_s: float
    cold_start_s: float
    serve_replicas: int
    serve_iteration: Callable[[np.ndarray], np.ndarray]
    serve_tpot: Callable[[np.ndarray], np.ndarray]
    slo_batch: float
    spare_kv_slots: float
    train_s: float
    dense_s: float
    sparse_s: float


def pools_for(policy: str, setup: Setup, load: float) -> list[Pool]:
    """The generation pools of ``policy`` at online load share ``load`` (module docstring)."""
    per = setup.rl_slots
    pools = [Pool("RL cluster", per * setup.rl_replicas, setup.rl_replicas, setup.rl_iteration)]
    if policy == "elastic":
        lent = lent_replicas(setup, load)
        if lent:
            pools.append(
                Pool("lent replicas", per * lent, lent, setup.rl_iteration, lending_s("elastic", setup))
            )
    elif policy == "rose":
        # each replica keeps its online requests and fills up to the SLO batch (and its spare KV)
        online = load * setup.slo_batch
        slots = min(setup.slo_batch - online, (1 - load) * setup.spare_kv_slots)
        pools.append(
            Pool("serving spare", int(slots * setup.serve_replicas), setup.serve_replicas, setup.serve_iteration,
                 lending_s("rose", setup), online)
        )  # fmt: skip
    return pools


def weight_sync_s(policy: str, setup: Setup) -> float:
    """Seconds a step spends bringing the new weights to borrowed serving GPUs: dense for ``elastic``,
    sparse deltas and their rebuild (:data:`SPARSE_REBUILD_S`) for ``rose``, none for the policies that
    borrow nothing."""
    return {"elastic": setup.dense_s, "rose": setup.sparse_s + SPARSE_REBUILD_S}.get(policy, 0.0)


def lending_s(policy: str, setup: Setup) -> float:
    """Seconds of a step's critical path spent making borrowed serving GPUs ready to roll out (the
    allocation overhead): the weight sync, after an ``elastic`` replica's engine cold start, or after
    what ``rose``'s activation leaves exposed. ROSE activates (remaps the rollout model's pages, loads
    its weights) on the serving GPUs while the RL cluster trains the step before: that needs none of
    the new weights, so only what it outlasts the update by delays the rollout."""
    start = {"elastic": setup.cold_start_s, "rose": max(setup.activation_s - setup.train_s, 0.0)}
    return start.get(policy, 0.0) + weight_sync_s(policy, setup)


def lent_replicas(setup: Setup, load: float) -> int:
    """Serving replicas an elastic policy lends at online load share ``load``: those the online
    requests do not need when packed at the SLO batch."""
    return int(np.floor((1 - load) * setup.serve_replicas))


def peak_tpot(
    policy: str, setup: Setup, load: float, peak: float, rollouts_per_replica: float = 0.0
) -> float:
    """An online request's seconds per output token on a serving replica at a burst of ``peak`` times
    the hour's load: the online share of the SLO batch on the replicas left to them (``elastic``: the
    ones not lent), beside half the rollouts a replica held (``rose``: it cuts the rollouts' KV budget
    by half at once on a burst)."""
    kept = setup.serve_replicas - (lent_replicas(setup, load) if policy == "elastic" else 0)
    online = peak * load * setup.serve_replicas / max(kept, 1) * setup.slo_batch
    rollouts = rollouts_per_replica / 2 if policy == "rose" else 0.0
    return float(setup.serve_tpot(np.array([online + rollouts]))[0])


def rollout_phase(
    policy: str, setup: Setup, lengths: np.ndarray, load: float, turns: Turns = SINGLE_TURN
) -> Rollout:
    """One round of generation under ``policy`` at online load share ``load`` (an asynchronous run
    generates on its own GPUs, as the fixed policy does), in ``turns``."""
    if policy not in POLICIES:
        raise unknown("RL rollout policy", policy, POLICIES)
    pools = pools_for("fixed" if policy == "async" else policy, setup, load)
    return simulate_rollout(lengths, pools, steal=policy == "rose", turns=turns)


def step_seconds(policy: str, rollout_s: float, train_s: float) -> float:
    """A step from its generation and its update: their sum, or for an asynchronous run, whose
    trainer works on the previous step's samples meanwhile, the slower of the two."""
    return max(rollout_s, train_s) if policy == "async" else rollout_s + train_s


def rl_hour(
    policy: str, setup: Setup, lengths: np.ndarray, load: float, turns: Turns = SINGLE_TURN
) -> tuple[float, Rollout]:
    """One RL step (one round of generation) at online load share ``load``: its seconds and its rollout."""
    rollout = rollout_phase(policy, setup, lengths, load, turns)
    return step_seconds(policy, rollout.t_last, setup.train_s), rollout


#: RL algorithms: GRPO generates one batch per step; DAPO's dynamic sampling drops the groups whose
#: rewards are all equal and generates again until the batch is full (ROLL's and verl's rounds).
ALGORITHMS = ("grpo", "dapo")


def dapo_rounds(prompts: int, keep: float, rng: np.random.Generator) -> int:
    """Rounds of ``prompts`` groups DAPO's dynamic sampling generates until ``prompts`` groups with
    differing rewards are kept, each kept with probability ``keep`` (seeded)."""
    kept, rounds = 0, 0
    while kept < prompts:
        kept, rounds = kept + rng.binomial(prompts, keep), rounds + 1
    return rounds
