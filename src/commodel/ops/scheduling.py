"""Queue waits of a batch-scheduled partition under node-exclusive allocation and consumable-resource
packing (Slurm TRES), by a queueing approximation and a discrete-event simulation of the same mix,
with the scheduler's cycle and per-job costs and bursty or daily-cycling arrivals
(:mod:`commodel.ops.scheduler`).

Each job asks for the resources of its class (a stated mix,
:class:`commodel.workloads.model.schema.JobMixSpec`, every job within one node) for a lognormal runtime with
the mix's mean and coefficient of variation ``cv``, and holds them for its runtime plus the prolog and
epilog: ``S = E[runtime] + prolog + epilog``.

- ``exclusive``: every job holds a whole node, so the partition is ``c = nodes`` servers.
- ``tres``: jobs share nodes by resource; fluid packing gives ``c = nodes / E[max_r d_r / s_r]`` servers
  (a job takes the share of a node its most-demanded resource takes).

**Approximation** (GI/G/c; Erlang C with the Allen-Cunneen correction): offered load ``a = lambda S``,
``rho = a / c``; the probability of waiting ``C(c, a)`` (Erlang C), waits beyond that roughly
exponential with rate ``theta = (c / S - lambda) x 2 / (c_a^2 + c_s^2)`` (``c_a^2`` the burst size,
``c_s^2 = (cv E[runtime] / S)^2``); a job that finds room waits for its pass, one that waits also for
the backfill pass after the queue releases it: mean ``(1 - C) t_pass + C (1 / theta + t_backfill)``,
median ``t_pass``, or ``t_backfill + ln(2 C) / theta`` where ``C > 1/2``. It holds for Poisson arrivals
(within a factor of 3 of the simulation at cv 2, where simulated means converge slowly) and parts from
the simulation for job arrays: a burst of ``k`` jobs finds fewer than ``k`` free slots far more often
than Erlang C's single arrivals do (a test holds both).

**Simulation** (SimPy, seeded): the same arrivals and runtimes on ``nodes`` nodes. With an ideal
scheduler, whenever a job arrives or ends every queued job that fits starts, in order (first fit;
``exclusive``: an empty node). With a scheduler's cycle, a job starts on submission only if it finds
room and nobody waits ahead of it (none with ``defer``); waiting jobs start at the periodic passes.
The first :data:`WARMUP_SHARE` of jobs are discarded.
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import simpy
from numpy.typing import ArrayLike

from commodel.errors import CommodelError, unknown
from commodel.ops.node_power import ALWAYS_ON, NodeLedger, PowerSaving, steady_power_W
from commodel.ops.scheduler import IDEAL, POISSON, Arrivals, Scheduler
from commodel.workloads.model.schema import JobMixSpec, NodePowerSpec

POLICIES = ("exclusive", "tres")

#: Share of the simulated jobs discarded as warm-up before waits are recorded.
WARMUP_SHARE = 0.2

#: Node power for a mix that states none: its simulation runs, its energy is not reported.
UNPRICED = NodePowerSpec(busy=1.0, idle=0.0, off=0.0, source="not stated")


def node_share(mix: JobMixSpec) -> float:
    """Mean share of a node one job takes when jobs share nodes: its most-demanded resource's share."""
    demand = np.array([c.demand for c in mix.classes]) / np.array(mix.server)
    return float(np.array([c.share for c in mix.classes]) @ demand.max(axis=1))


def servers(policy: str, mix: JobMixSpec, nodes: ArrayLike) -> np.ndarray:
    """Jobs the partition runs at once under ``policy`` (module docstring)."""
    if policy not in POLICIES:
        raise unknown("scheduling policy", policy, POLICIES)
    n = np.asarray(nodes, dtype=float)
    return n if policy == "exclusive" else n / node_share(mix)


def erlang_c(c: ArrayLike, a: ArrayLike) -> np.ndarray:
    """Probability that an arrival waits in an M/M/c queue with offered load ``a`` (Erlang C), through
    the stable Erlang B recursion ``B_k = a B_{k-1} / (k + a B_{k-1})`` (``c`` may be fractional: the
    recursion runs to its floor and interpolates)."""
    c, a = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(a, dtype=float))
    top = int(np.ceil(c.max()))
    b = np.ones_like(a)
    below = b.copy()
    for k in range(1, top + 1):
        below = np.where(k <= np.floor(c), b, below)
        b = np.where(k <= np.ceil(c), a * b / (k + a * b), b)
    frac = c - np.floor(c)
    blocking = np.where(frac > 0, (1 - frac) * below + frac * b, b)
    rho = a / c
    return np.where(rho < 1, blocking / (1 - rho * (1 - blocking)), 1.0)


def approximate_waits(
    policy: str,
    mix: JobMixSpec,
    nodes: ArrayLike,
    arrivals_per_h: ArrayLike,
    scheduler: Scheduler = IDEAL,
    arrivals: Arrivals = POISSON,
    saving: PowerSaving = ALWAYS_ON,
) -> dict:
    """Mean and median wait (hours), probability of waiting, utilization of the job slots (held
    time included) and the start overhead (hours), by the module docstring's approximation with the
    scheduler's cycle and costs and the arrivals' bursts (:mod:`commodel.ops.scheduler`): a job holds
    its slot ``S = E[runtime] + prolog + epilog``, ``c_s^2 = (cv E[runtime] / S)^2``, ``c_a^2 = burst``;
    a job that finds room waits for its pass (0, or half a cycle with ``defer``), one that waits
    beyond the queue's exponential tail for the backfill pass. A daily cycle is the simulation's
    alone: the queue smooths a peak over hours-long jobs, which a stationary approximation cannot; so
    is power saving, whose boots depend on how long each node stays empty. Energy per job (kWh): every
    node idles, the jobs' use adds to it (:func:`~commodel.ops.node_power.steady_power_W`)."""
    if saving.on:
        raise CommodelError(
            "power saving is simulated (a boot depends on how long each node stayed empty): use method simulation"
        )
    if arrivals.daily_amplitude:
        raise CommodelError(
            "the queueing approximation assumes the same arrival rate all day: give a daily cycle to the "
            "simulation (method simulation)"
        )
    c = servers(policy, mix, nodes)
    held = mix.job_hours + scheduler.held_h
    lam = np.asarray(arrivals_per_h, dtype=float)
    load = lam * held
    if np.any(load >= c):
        raise CommodelError(
            f"the offered load ({float(np.max(load / c)):.4g} of the {policy} capacity, each job holding its "
            f"nodes {3600 * scheduler.held_h:.0f} s beyond its run for prolog and epilog) must stay below 1: "
            "the queue would grow without end"
        )
    wait = erlang_c(c, load)
    theta = (c / held - lam) * 2 / ((mix.runtime_cv * mix.job_hours / held) ** 2 + arrivals.burst)
    now, later = scheduler.immediate_h, scheduler.backfill_h
    # P(wait <= t) = (1 - C) [t >= now] + C (1 - exp(-theta (t - later))) [t >= later], now <= later:
    # the median is the pass of those that find room, unless more than half wait.
    median = np.where(wait > 0.5, later + np.log(np.maximum(2 * wait, 1e-300)) / theta, now)
    return {
        "mean_wait_h": (1 - wait) * now + wait * (1 / theta + later),
        "median_wait_h": median,
        "wait_probability": wait,
        "utilization": load / c,
        "start_overhead_h": np.full(np.shape(wait), scheduler.start_overhead_h),
        "energy_kWh_per_job": _steady_energy_kWh(mix, nodes, lam, held),
        "boots_per_job": np.zeros(np.shape(wait)),
    }


def _steady_energy_kWh(mix: JobMixSpec, nodes: ArrayLike, lam: np.ndarray, held: float) -> np.ndarray:
    """kWh per job of always-on nodes: their mean power over the arrival rate."""
    if mix.node_power is None:
        return np.full(np.shape(lam), np.nan)
    return (
        steady_power_W(mix.node_power, np.asarray(nodes, dtype=float), lam * held * node_share(mix))
        / lam
        / 1e3
    )


def _runtimes(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    sigma = np.sqrt(np.log1p(cv**2))
    return mean * np.exp(sigma * rng.standard_normal(n) - sigma**2 / 2)


def _draw_jobs(
    mix: JobMixSpec, arrivals: Arrivals, rate_per_h: float, jobs: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Seeded jobs of the mix: submission times (hours), classes, demands and runtimes (hours)."""
    rng = np.random.default_rng(seed)
    arrive = arrivals.times(rng, rate_per_h, jobs)
    shares = np.array([c.share for c in mix.classes])
    kinds = rng.choice(len(mix.classes), jobs, p=shares / shares.sum())
    demand = np.array([c.demand for c in mix.classes], dtype=float)[kinds]
    return arrive, kinds, demand, _runtimes(rng, mix.job_hours, mix.runtime_cv, jobs)


def simulate_waits(
    policy: str,
    mix: JobMixSpec,
    nodes: int,
    arrivals_per_h: float,
    jobs: int = 4000,
    seed: int = 0,
    scheduler: Scheduler = IDEAL,
    arrivals: Arrivals = POISSON,
    saving: PowerSaving = ALWAYS_ON,
) -> dict[str, float]:
    """Mean and median wait (hours), utilization of the job slots and energy per job (kWh) from a
    SimPy simulation. With a scheduler that charges a cycle, a job starts on submission only if it
    finds room and nobody waits ahead of it (none with ``defer``); waiting jobs start at the periodic
    passes (:attr:`~commodel.ops.scheduler.Scheduler.pass_h`); a job holds its resources for its
    runtime, prolog and epilog. Jobs go to powered nodes first; one placed on a suspended node waits
    for its boot (:mod:`commodel.ops.node_power`)."""
    if policy not in POLICIES:
        raise unknown("scheduling policy", policy, POLICIES)
    arrive, kinds, demand, runtime = _draw_jobs(mix, arrivals, arrivals_per_h, jobs, seed)
    server = np.array(mix.server, dtype=float)
    free = np.tile(server, (nodes, 1))
    needs = np.broadcast_to(server, demand.shape) if policy == "exclusive" else demand
    use = np.max(demand / server, axis=1)  # power follows the most-used resource, not the allocation
    ledger = NodeLedger(
        nodes, mix.node_power or UNPRICED, saving, (arrive[int(WARMUP_SHARE * jobs)], arrive[-1])
    )
    env, queue, start, periodic = simpy.Environment(), [], np.full(jobs, np.nan), scheduler.pass_h > 0
    waiting = [jobs]  # jobs not yet placed: the passes run until none is left

    def place(job: int) -> bool:
        fits = np.flatnonzero(np.all(free >= needs[job] - 1e-9, axis=1))
        if not fits.size:
            return False
        node = ledger.first_awake(fits, env.now)
        free[node] -= needs[job]
        start[job] = env.now + ledger.occupy(node, env.now, use[job])
        waiting[0] -= 1
        env.process(run(job, node))
        return True

    def run(job: int, node: int) -> Generator[simpy.events.Event, None, None]:
        yield env.timeout(start[job] - env.now + runtime[job] + scheduler.held_h)
        free[node] += needs[job]
        ledger.release(node, env.now, use[job])
        if not periodic:
            schedule()

    def schedule() -> None:
        """Start queued jobs in order on the first node they fit (a class that found no node is not
        tried again in this pass: nodes only fill up within it)."""
        blocked: set[int] = set()
        for job in list(queue):
            if kinds[job] not in blocked and place(job):
                queue.remove(job)
            elif len(blocked | {kinds[job]}) == len(mix.classes):
                return
            else:
                blocked.add(kinds[job])

    def source() -> Generator[simpy.events.Event, None, None]:
        for job in range(jobs):
            yield env.timeout(arrive[job] - env.now)
            if not periodic:
                queue.append(job)
                schedule()
            elif scheduler.defer or queue or not place(job):
                queue.append(job)

    def passes() -> Generator[simpy.events.Event, None, None]:
        while waiting[0]:
            yield env.timeout(scheduler.pass_h)
            schedule()

    for process in (source(), passes()) if periodic else (source(),):
        env.process(process)
    env.run()
    return _simulated(
        policy, mix, nodes, arrive, start, runtime, scheduler, ledger.close(env.now), ledger.boots
    )


def _simulated(
    policy: str, mix: JobMixSpec, nodes: int, arrive: np.ndarray, start: np.ndarray, runtime: np.ndarray,
    scheduler: Scheduler, joules: float, boots: int,
) -> dict[str, float]:  # fmt: skip
    """A simulation's waits, utilization and energy over the jobs after the warm-up."""
    jobs = arrive.size
    kept = slice(int(WARMUP_SHARE * jobs), jobs)
    waits = (start - arrive)[kept]
    busy = np.sum(runtime[kept] + scheduler.held_h) / (arrive[-1] - arrive[kept.start])
    return {
        "mean_wait_h": float(np.mean(waits)),
        "median_wait_h": float(np.median(waits)),
        "utilization": float(busy / servers(policy, mix, nodes)),
        "start_overhead_h": scheduler.start_overhead_h,
        "energy_kWh_per_job": joules / 3.6e6 / (jobs - kept.start) if mix.node_power else np.nan,
        "boots_per_job": boots / jobs,
    }
